"""A server's cost table: step times from timed lockstep blocks and vLLM's counters, acceptance by depth pooled over
K, a table keyed by the server and reused with --if-missing (a fake probe stands in for the server)."""

from __future__ import annotations

import pytest

from specbench.errors import SpecbenchError
from specbench.runners.server import ServerRequest
from specbench.runners.server_calibrate import (
    Grid, build_table, calibrate, calibrate_server, find_server_table, measure_k, reach_by_depth, step_ms, table_key,
    table_path,
)

# the chance the accepted path reaches depth d = 1..15, whatever K the server drafts
REACH = [0.8, 0.6, 0.45, 0.35, 0.25, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.01]
PROMPT = list(range(100))


def cost_ms(k: int, batch: int) -> float:
    """A server whose tokens are cheap alone and dear in a batch: 20 ms + 0.5 ms per verified token per
    sequence, squared in the batch size (a memory-bound step turning compute-bound)."""
    return 20.0 + 0.5 * (k + 1) * batch ** 2


class FakeProbe:
    """Answers blocks as a server at K would: lockstep blocks decode `steps` steps of cost_ms(K, b) each,
    acceptance blocks count REACH per drafting step."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, int, bool]] = []
        self.closed = 0

    def block(self, k, requests, concurrency, max_new_tokens, lockstep):
        self.blocks.append((k, concurrency, lockstep))
        steps = 20
        decode = steps * cost_ms(k, len(requests)) / 1000.0
        records = [{"ttft_s": 0.1, "latency_s": 0.1 + decode, "itl_s": [decode / steps] * steps,
                    "prompt_token_ids": PROMPT, "status": "ok"} for _ in requests]
        drafts = float(steps * len(requests))
        return records, {"num_drafts": drafts, "num_accepted_tokens_per_pos": [r * drafts for r in REACH[:k]]}

    def close(self) -> None:
        self.closed += 1


KEY = table_key("vllm", "0.32.0", "cpu: test", 1, "/m/target", "/m/drafter", "bfloat16")


def requests(n: int = 3) -> list[ServerRequest]:
    return [ServerRequest(f"q{i}", [{"role": "user", "content": "hi"}]) for i in range(n)]


def test_step_time_is_decode_time_over_the_counted_steps():
    # 4 requests, each 2.0 s from first to last chunk; vLLM counted 40 drafts = 10 steps each: 200 ms a step
    records = [{"ttft_s": 0.5, "latency_s": 2.5}] * 4
    assert step_ms(records, 40.0, 4) == pytest.approx(200.0)
    with pytest.raises(SpecbenchError, match="no drafting steps"):
        step_ms(records, 0.0, 4)


def test_acceptance_by_depth_pools_every_k_that_drafts_the_depth():
    raw = {"ks": {"1": {"acceptance": {"num_drafts": 100, "accepted_per_pos": [90]}},
                  "3": {"acceptance": {"num_drafts": 300, "accepted_per_pos": [210, 120, 60]}}}}
    # depth 1: (90 + 210) / 400; depths 2 and 3 only from K = 3
    assert reach_by_depth(raw) == pytest.approx([0.75, 0.4, 0.2])


def test_sglangs_histograms_give_the_steps_and_the_depths_they_reached():
    from specbench.runners.server_calibrate import drafting_counts

    # summed meta_info of a K = 3 block: 10 verify steps, 4 accepted nothing, 6 one draft, none two or three
    # (SGLang's histogram grows only to the most drafts a step accepted)
    counters = {"verify_steps": 10, "accept_histogram": [4, 6], "accepted_drafts": 6}
    assert drafting_counts(counters) == (10, [6.0])
    probe = FakeProbe()
    probe.block = lambda *args: ([{"ttft_s": 0.1, "latency_s": 1.1, "prompt_token_ids": PROMPT, "status": "ok"}],
                                 counters)
    raw = {"ks": {"3": measure_k(probe, 3, requests(1), Grid(ks=(3,), max_batch=1, repeats=1), lambda _: None)}}
    assert reach_by_depth(raw) == pytest.approx([0.6, 0.0, 0.0])
    assert raw["ks"]["3"]["step_ms"]["1"] == [pytest.approx(100.0)]       # 1 s over 10 steps


def test_calibrate_times_every_k_and_batch_size_and_keeps_the_raw_samples():
    probe = FakeProbe()
    grid = Grid(ks=(1, 3), max_batch=4, prompts=3, max_new_tokens=32, repeats=2)
    table = calibrate(lambda k: probe, KEY, requests(), grid, say=lambda _: None)
    assert table.key == KEY and table.batches == [1, 2, 3, 4] and table.tokens == [2, 4]
    assert table.contexts == [len(PROMPT) + 16]
    for b, row in zip(table.batches, table.verify_ms):
        assert row[0] == pytest.approx([cost_ms(1, b), cost_ms(3, b)])
    assert reach_by_depth(table.raw) == pytest.approx(REACH[:3])
    # per K: one acceptance block over the prompts at C = min(max_batch, prompts), then rounds of lockstep blocks
    assert probe.blocks[0] == (1, 3, False)
    assert [b for k, b, lockstep in probe.blocks if k == 1 and lockstep] == [1, 2, 3, 4, 1, 2, 3, 4]
    assert probe.closed == 2 and len(table.raw["ks"]["3"]["step_ms"]["2"]) == 2


def test_a_later_calibration_adds_its_k_to_the_table():
    grid = Grid(ks=(1,), max_batch=2, repeats=1)
    first = calibrate(lambda k: FakeProbe(), KEY, requests(), grid, say=lambda _: None)
    both = calibrate(lambda k: FakeProbe(), KEY, requests(), Grid(ks=(7,), max_batch=2, repeats=1), first.raw,
                     say=lambda _: None)
    assert both.tokens == [2, 8] and sorted(first.raw["ks"]) == ["1"]


def test_tables_are_keyed_by_the_server_and_found_again(tmp_path):
    table = build_table(KEY, calibrate(lambda k: FakeProbe(), KEY, requests(), Grid(ks=(1,), max_batch=1, repeats=1),
                                       say=lambda _: None).raw)
    table.save(table_path(KEY, tmp_path))
    found, path = find_server_table(KEY, tmp_path)
    assert found.verify_ms == table.verify_ms and path.name.startswith("server-vllm-0.32.0-tp1-target-drafter-")
    for change in ({"version": "0.33.0"}, {"device": "4x NVIDIA B300"}, {"tp": 4}, {"drafter": "/m/other"},
                   {"dtype": "float32"}, {"server_args": "--enforce-eager"}):
        assert find_server_table({**KEY, **change}, tmp_path) is None, change


def test_if_missing_keeps_a_table_that_has_every_k_and_measures_a_missing_one(tmp_path, monkeypatch):
    from specbench.runners import server_calibrate

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(server_calibrate, "server_key", lambda runner, options, drafter: KEY)
    monkeypatch.setattr(server_calibrate, "RunnerProbe", lambda *args: FakeProbe())
    monkeypatch.setattr(server_calibrate, "calibration_requests", lambda runner, n, seed: requests())
    runner = type("Runner", (), {"endpoint": None})()
    quiet = {"say": lambda _: None}
    first, path, measured = calibrate_server(runner, "/m/drafter", {}, Grid(ks=(1, 3), max_batch=2), **quiet)
    assert measured and path == table_path(KEY) and path.exists()
    kept, _, measured = calibrate_server(runner, "/m/drafter", {}, Grid(ks=(1, 3), max_batch=2), True, **quiet)
    assert not measured and kept.verify_ms == first.verify_ms
    more, _, measured = calibrate_server(runner, "/m/drafter", {}, Grid(ks=(1, 7), max_batch=2), True, **quiet)
    assert measured and more.tokens == [2, 4, 8]


def test_a_batch_timed_below_a_smaller_one_costs_what_the_smaller_did(tmp_path):
    """A quiet spell of the machine during batch 3 must not make batch 3 look cheaper than batch 2 (the planner
    would send the schedule there); the saved file's medians are rebuilt by the same rule when read."""
    raw = {"ks": {"1": {"acceptance": {"num_drafts": 10.0, "accepted_per_pos": [5.0]}, "context": 300,
                        "step_ms": {"1": [100.0], "2": [120.0, 124.0], "3": [90.0], "4": [130.0]}}}}
    table = build_table(KEY, raw)
    assert [row[0][0] for row in table.verify_ms] == [100.0, 122.0, 122.0, 130.0]
    table.verify_ms[2][0][0] = 90.0                     # a file written before the rule
    table.save(table_path(KEY, tmp_path))
    found, _ = find_server_table(KEY, tmp_path)
    assert [row[0][0] for row in found.verify_ms] == [100.0, 122.0, 122.0, 130.0]
    assert found.created == table.created
