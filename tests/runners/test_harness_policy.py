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


def tree_table(draft_level_ms: float):
    """Verification 10 ms + 0.2 ms a token per sequence (times the batch size), a draft level draft_level_ms x
    width^0.5: wide trees are cheap alone and dear at C = 8."""
    from reference_eagle4.cost_table import CostTable

    tokens, batches, widths = list(range(1, 17)), [1, 8], [1, 2, 4, 8]
    verify = [[[10.0 + 0.2 * t * b * b for t in tokens]] for b in batches]
    draft = [[draft_level_ms * w ** 0.5 for w in widths] for _ in batches]
    return CostTable({"device": "synthetic"}, batches, [512], tokens, verify, batches, widths, draft)


# acceptance by depth and rank: the top draft is accepted 60% of the time, the second 20%, the third 10%
ACCEPT = [[0.6, 0.2, 0.1, 0.05]] * 10


def test_tree_candidates_follow_sglangs_beam():
    from specbench.runners.harness_policy import tree_candidates

    # two levels of top 2: 0.6, 0.2, then the children of 0.6 and 0.2 (the frontier's topk best)
    assert tree_candidates([[0.6, 0.2], [0.5, 0.3]], 2, 2) == pytest.approx(
        sorted([0.6, 0.2, 0.3, 0.18, 0.1, 0.06], reverse=True))


def test_sglang_shape_is_the_planners_best_over_steps_and_topk():
    from reference_eagle4.planner import TreePlanner
    from specbench.runners.harness_policy import sglang_shape, tree_candidates

    table = tree_table(1.0)
    one, eight = sglang_shape(table, 16, 1, ACCEPT), sglang_shape(table, 16, 8, ACCEPT)
    assert one.topk > 1 and one.num_draft_tokens > eight.num_draft_tokens      # wide alone, narrow in a batch
    for c, shape in ((1, one), (8, eight)):
        planner = TreePlanner(table, 16, c, 512)
        for topk in (1, 2, 4, 8):            # no other shape the planner could verify is expected to be faster
            for steps in range(1, 10):
                cands = tree_candidates(ACCEPT, steps, topk)
                cands = cands[:steps] if topk == 1 else cands
                for n in range(1 if topk > 1 else steps, min(15, len(cands)) + 1):
                    speed = c * (1 + sum(cands[:n])) / (steps * table.draft(c, topk) + planner.verify_ms(n + 1))
                    assert speed <= shape.speed + 1e-12, (c, topk, steps, n)
    assert one.num_draft_tokens <= 16 and (one.topk > 1 or one.num_draft_tokens == one.num_steps + 1)


def test_a_chain_acceptance_gives_a_chain():
    from specbench.runners.harness_policy import rank_acceptance, sglang_shape

    accept = rank_acceptance([0.8, 0.6, 0.45, 0.3])
    assert [a[0] for a in accept] == pytest.approx([0.8, 0.75, 0.75, 2 / 3])
    shape = sglang_shape(tree_table(1.0), 16, 1, accept)
    assert shape.topk == 1 and shape.num_draft_tokens == shape.num_steps + 1
