"""The host waits for a GPU only where a step cannot do without it: counted per step on the CPU path, which
computes what the GPU path does (host_syncs.HostReads), against the numbers reference_eagle4/README.md states."""

from __future__ import annotations

import pytest
import torch

from eagle4_helpers import bigram_target, one_thread  # noqa: F401  (fixture)
from lossless_helpers import bigram_proposers
from reference_eagle4.device import on_host, upload
from reference_eagle4.engine import Engine, GenerationConfig, Request
from reference_eagle4.host_syncs import HostReads, per_step
from reference_eagle4.verify import Sampling


@pytest.fixture(scope="module")
def target():
    return bigram_target()


def requests(n: int) -> list[Request]:
    return [Request(f"q{i}", torch.randint(3, 250, (12,), generator=torch.Generator().manual_seed(i)).tolist())
            for i in range(n)]


def waits(target, method: str, concurrency: int = 1, sampling: Sampling = Sampling()):
    engine = Engine(target, bigram_proposers(target, None)[method](),
                    GenerationConfig(16, sampling, concurrency=concurrency), max_len=128)
    return per_step(engine, requests(3), HostReads())


def files(sites) -> set[str]:
    return {site.split(":")[0] for site in sites}


@pytest.mark.parametrize("method", ["vanilla", "ngram"])
@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_step_without_a_drafter_waits_once_for_its_greedy_tokens(target, method, concurrency):
    counted = waits(target, method, concurrency)
    assert counted.steps > 0 and counted.per_step == 1.0, counted.summary()
    assert files(counted.sites) == {"engine.py"}


@pytest.mark.parametrize("method", ["eagle4-chain", "dflash"])
def test_a_chain_drafter_adds_one_wait_for_its_drafts(target, method):
    counted = waits(target, method, concurrency=3)
    assert counted.per_step == 2.0, counted.summary()


def test_the_static_tree_adds_one_wait_per_level_it_may_stop_after(target):
    counted = waits(target, "eagle4-tree")
    early_stops = sum(n for site, n in counted.sites.items() if site.startswith("proposers/eagle4.py"))
    assert counted.per_step == 2.0 + early_stops / counted.steps
    assert early_stops / counted.steps <= 7                       # at most one per level of its depth 7


def test_the_harness_waits_only_where_its_planner_reads_probabilities(target):
    counted = waits(target, "eagle4-harness", concurrency=3)
    assert files(counted.sites) <= {"engine.py", "tree.py", "proposers/harness.py", "retrieval.py"}
    assert 1.0 < counted.per_step < 12, counted.summary()


def test_sampling_adds_one_wait_per_sequence_for_its_draws(target):
    counted = waits(target, "vanilla", concurrency=1, sampling=Sampling(temperature=1.0))
    assert counted.per_step == 2.0, counted.summary()


def test_the_counter_tells_device_reads_and_blocking_copies_from_host_work():
    counter = HostReads()
    with counter:
        device = torch.ones(3, device="cpu") * 2           # made with a device: the device's
        host = torch.arange(3)                             # made from host data: the host's
        host.tolist(), int(host.sum()), on_host(torch.zeros(2)).tolist()
        upload([1, 2], "cpu")                              # queued, never waited for
        device.tolist()
        torch.tensor([1, 2], device="cpu")                 # a blocking copy
        (device + host).sum().item()
    assert sum(counter.sites.values()) == 3
