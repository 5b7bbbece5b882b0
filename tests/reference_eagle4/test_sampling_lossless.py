"""Sampled decoding through the engine keeps the target's distribution, for every drafting method.

Many requests share one prompt (each request has its own seed), so their first tokens are draws from
the same sequence distribution. The 2nd and 3rd tokens come out of the first speculative step: the 3rd
is drawn at a drafted node whenever the 2nd was accepted, so a wrong tree mask, position or KV row
would shift its distribution. A two-sample chi-square test compares (2nd, 3rd) pairs with vanilla's.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from scipy.stats import chi2_contingency

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_drafter, bigram_target, one_thread  # noqa: E402,F401

from reference_eagle4.calibration import CostTable  # noqa: E402
from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.verify import Sampling  # noqa: E402

N = 800
TABLE = CostTable({"device": "synthetic"}, [1, 8], [64, 512], [1, 16],
                  [[[10.0, 10.5], [10.0, 10.5]], [[10.0, 10.5], [10.0, 10.5]]])


@pytest.fixture(scope="module")
def target():
    return bigram_target(layer_std=0.05)


def pairs(target, proposer, seed: int = 0) -> Counter:
    prompt = [7, 91, 200, 13]
    cfg = GenerationConfig(max_new_tokens=3, concurrency=8, sampling=Sampling(temperature=0.6), seed=seed)
    got: Counter = Counter()
    accepted = []

    def done(s):
        got[tuple(s.output[1:3])] += 1
        accepted.extend(st["accepted"] for st in s.steps)

    Engine(target, proposer, cfg, 32).generate((Request(f"q{i}", prompt) for i in range(N)), done)
    return got, sum(accepted) / max(len(accepted), 1)


def proposer(name: str, target):
    if name.startswith("eagle4"):
        kw = {"table": TABLE} if name == "eagle4-harness" else {}
        return PROPOSERS[name](budget=8, drafter=bigram_drafter(target, noise=0.02), **kw)
    torch.manual_seed(0)
    d = DFlashDrafter(DFlashConfig.for_target(target.args, markov_rank=8 if name == "dspark" else 0, block_size=8))
    d.reset_parameters(std=0.1)
    return PROPOSERS[name](budget=8, drafter=d.eval(), **({"table": TABLE} if name == "dspark" else {}))


def contingency(a: Counter, b: Counter, min_count: int = 10) -> list[list[int]]:
    keys = [k for k in set(a) | set(b) if a[k] + b[k] >= min_count]
    rest_a, rest_b = sum(a.values()) - sum(a[k] for k in keys), sum(b.values()) - sum(b[k] for k in keys)
    return [[a[k] for k in keys] + [rest_a], [b[k] for k in keys] + [rest_b]]


@pytest.fixture(scope="module")
def vanilla(target):
    return pairs(target, PROPOSERS["vanilla"](budget=1), seed=1)[0]


@pytest.mark.parametrize("method", ["eagle4-tree", "eagle4-harness", "ngram", "dflash", "dspark"])
def test_sampled_pairs_match_vanilla(target, vanilla, method):
    got, mean_accepted = pairs(target, proposer(method, target) if method != "ngram"
                               else PROPOSERS["ngram"](budget=8))
    table = contingency(got, vanilla)
    assert len(table[0]) >= 4                   # enough distinct outcomes for the test to have power
    p = chi2_contingency(table).pvalue
    assert p > 1e-3, f"{method}: chi-square p = {p:.2e}"
    if method.startswith("eagle4"):
        assert mean_accepted > 0.3              # drafts were accepted, so drafted nodes produced the 3rd token


def test_the_check_has_power(target, vanilla):
    """A biased sampler (a colder temperature) fails the same test."""
    prompt = [7, 91, 200, 13]
    cfg = GenerationConfig(max_new_tokens=3, concurrency=8, sampling=Sampling(temperature=0.45), seed=2)
    got: Counter = Counter()
    Engine(target, PROPOSERS["vanilla"](budget=1), cfg, 32).generate(
        (Request(f"q{i}", prompt) for i in range(N)), lambda s: got.update([tuple(s.output[1:3])]))
    assert chi2_contingency(contingency(got, vanilla)).pvalue < 1e-3
