"""The harness compiled for vLLM: the planner's K per batch size over a server's measured costs and acceptance."""

from __future__ import annotations

import pytest

from specbench.runners.harness_policy import ChainPolicy, chain_policy
from specbench.runners.server_calibrate import build_table, table_key

REACH = [0.8, 0.6, 0.45, 0.35, 0.25, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.01]
KS = (1, 3, 7, 15)


def cost_ms(k: int, batch: int) -> float:
    """Cheap tokens alone, dear ones in a batch: 20 ms + 0.5 ms per verified token per sequence times batch²."""
    return 20.0 + 0.5 * (k + 1) * batch ** 2


def server_table():
    raw = {"ks": {str(k): {"acceptance": {"num_drafts": 1000.0, "accepted_per_pos": [r * 1000 for r in REACH[:k]]},
                           "step_ms": {str(b): [cost_ms(k, b)] for b in range(1, 9)}, "context": 300}
                  for k in KS}}
    return build_table(table_key("vllm", "0.32.0", "cpu: test", 1, "t", "d", "bfloat16"), raw)


def test_each_batch_size_gets_the_k_that_maximises_expected_tokens_per_ms():
    table = server_table()
    policy = chain_policy(table, 16)
    for b, k in enumerate(policy.ks, 1):
        speed = {n: b * (1 + sum(REACH[:n])) / table.verify(b, 300, n + 1) for n in range(1, 16)}
        assert speed[k] == pytest.approx(max(speed.values())), b
    # alone a long chain pays (K = 9, priced between the timed 7 and 15); at batch 8 a token costs 32 ms: K = 1
    assert policy.k_at(1) == 9 and policy.k_at(8) == 1


def test_the_schedule_is_vllms_ranges_from_batch_size_one():
    policy = chain_policy(server_table(), 16)
    schedule = policy.schedule
    assert schedule[0][0] == 1 and schedule[-1][1] == 8
    assert all(a[1] + 1 == b[0] and a[2] != b[2] for a, b in zip(schedule, schedule[1:]))
    assert [policy.k_at(b) for b in range(1, 9)] == [k for lo, hi, k in schedule for _ in range(lo, hi + 1)]
    assert policy.num_speculative_tokens == policy.k_at(1) and policy.k_at(64) == policy.k_at(8)
    assert ChainPolicy(16, [7, 7, 3, 3, 3, 1], [0.0] * 6, []).schedule == [[1, 2, 7], [3, 5, 3], [6, 6, 1]]


def test_the_budget_caps_k():
    policy = chain_policy(server_table(), 4)
    assert max(policy.ks) <= 3 and policy.manifest()["num_speculative_tokens"] == max(policy.ks)
