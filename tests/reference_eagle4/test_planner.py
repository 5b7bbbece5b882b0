"""The harness's tree size follows the measured cost table, the batch size and the draft confidence."""

from reference_eagle4.calibration import CostTable
from reference_eagle4.planner import TreePlanner

TOKENS = [1, 2, 4, 8, 16, 32, 64]


def table(per_token_ms: float, batch_factor: float = 0.0, draft_ms: float = 0.0) -> CostTable:
    """Synthetic table: verify = 20 ms + per_token_ms * tokens * (1 + batch_factor * (batch - 1))."""
    batches, contexts = [1, 8], [256, 4096]
    verify = [[[20.0 + per_token_ms * t * (1 + batch_factor * (b - 1)) for t in TOKENS] for _ in contexts]
              for b in batches]
    draft = [[draft_ms * (1 + 0.1 * w) for w in (1, 16)] for _ in batches]
    return CostTable({"device": "synthetic"}, batches, contexts, TOKENS, verify, batches, [1, 16], draft)


# a typical drafter's best-first path probabilities for one sequence
PROBS = [0.9, 0.8, 0.7, 0.55, 0.45, 0.4, 0.3, 0.25, 0.2, 0.15, 0.12, 0.1, 0.08, 0.06, 0.05]


def test_flat_table_gives_a_wider_tree_than_a_steep_one():
    flat = TreePlanner(table(0.05), budget=16, batch=1, context=256).best_sizes([PROBS], 0.0)
    steep = TreePlanner(table(3.0), budget=16, batch=1, context=256).best_sizes([PROBS], 0.0)
    assert flat.sizes == [15]                   # nearly free tokens: fill the budget
    assert 0 < steep.sizes[0] < 15


def test_larger_batches_get_smaller_trees():
    t = table(0.6, batch_factor=1.0)
    one = TreePlanner(t, budget=16, batch=1, context=256).best_sizes([PROBS], 0.0)
    eight = TreePlanner(t, budget=16, batch=8, context=256).best_sizes([PROBS] * 8, 0.0)
    assert max(eight.sizes) < one.sizes[0]


def test_never_beyond_the_budget_and_zero_when_drafts_are_hopeless():
    cheap = TreePlanner(table(0.01), budget=4, batch=1, context=256)
    assert cheap.best_sizes([PROBS], 0.0).sizes == [3]
    costly = TreePlanner(table(5.0), budget=16, batch=1, context=256)
    assert costly.best_sizes([[0.01, 0.005]], 0.0).sizes == [0]


def test_chosen_size_maximises_expected_speed():
    planner = TreePlanner(table(1.0), budget=16, batch=1, context=256)
    plan = planner.best_sizes([PROBS], 2.0)
    speeds = [(1 + sum(PROBS[:n])) / (2.0 + planner.verify_ms(n + 1)) for n in range(16)]
    assert plan.sizes == [max(range(16), key=lambda n: speeds[n])]


def test_a_batch_spends_its_tokens_on_the_confident_sequences():
    """One sure and one unsure sequence: the sure one drafts deep, the unsure one not at all, and that
    plan is faster than giving both the same size."""
    t = table(2.0, batch_factor=0.5)
    planner = TreePlanner(t, budget=16, batch=2, context=256)
    sure, unsure = [0.95, 0.9, 0.85, 0.8, 0.75, 0.7], [0.1, 0.05, 0.02]
    plan = planner.best_sizes([sure, unsure], 0.0, per_sequence=True)
    assert plan.sizes[0] >= 4 and plan.sizes[1] == 0
    uniform = max((2 + sum(sure[:n]) + sum(unsure[:n])) / planner.verify_ms(1 + n) for n in range(7))
    assert plan.speed > uniform
    same = planner.best_sizes([sure, unsure], 0.0)                      # the default: one size for both
    assert same.sizes == [same.sizes[0], min(same.sizes[0], len(unsure))]
    assert abs(same.speed - uniform) < 1e-9


def test_another_level_only_when_confident_and_cheap():
    planner = TreePlanner(table(0.2), budget=16, batch=1, context=256)
    assert planner.worth_another_level([[0.9, 0.8]], 1.0, [0.8], confidence=0.9, level_ms=1.0)
    assert not planner.worth_another_level([[0.9, 0.8]], 1.0, [0.01], confidence=0.1, level_ms=1.0)
    assert not planner.worth_another_level([[0.9, 0.8]], 1.0, [0.8], confidence=0.9, level_ms=200.0)


def test_a_noisy_dip_in_the_table_does_not_pull_the_plan_to_it():
    """A 4-token forward timed below the 2-token one (noise) must not make 3 drafts look cheaper than 1."""
    t = table(1.0)
    for b in t.verify_ms:
        for row in b:
            row[2] = row[0] - 5.0                   # tokens = 4 measured cheaper than tokens = 1
    planner = TreePlanner(t, budget=16, batch=1, context=256)
    costs = [planner.verify_ms(n) for n in range(1, 17)]
    assert costs == sorted(costs)
    assert planner.verify_ms(4) >= planner.verify_ms(1)


def test_a_ragged_batch_stops_at_the_edge_of_a_block_of_rows():
    """Linears that cost by blocks of rows: 8 sequences x 2 tokens cost what 1 token does, a third token
    (rows 17-24) as much as a fourth. A per-sequence plan then fills the free block and stops, rather than
    buying a few rows past its edge as if they cost a fraction of the next block."""
    tokens = [1, 2, 3, 4, 8]
    verify = [[[50.0, 50.0, 70.0, 70.0, 120.0]] for _ in (1, 8)]
    t = CostTable({"device": "synthetic"}, [1, 8], [256], tokens, verify, [1, 8], [1, 16], [[0.0, 0.0]] * 2)
    planner = TreePlanner(t, budget=8, batch=8, context=256)
    probs = [[0.95, 0.9]] + [[0.5, 0.2]] * 7       # one sure sequence: its second node alone looks worth a row
    plan = planner.best_sizes(probs, 0.0, per_sequence=True)
    assert sum(plan.sizes) == 8
    assert planner.verify_ms(2 + 1 / 8) == planner.verify_ms(3)


# a chain's reach by depth (vLLM's per-position acceptance): depth d is reached with probability REACH[d-1]
REACH = [0.9, 0.8, 0.7, 0.1, 0.05]


def chain_table() -> CostTable:
    """Synthetic server table, every token count timed: a step costs 10 ms + 1 ms per token (root included)
    per sequence, so at batch 1 a longer chain is cheap and at batch 8 it is dear."""
    tokens = list(range(1, 9))
    return CostTable({"device": "synthetic"}, [1, 8], [512], tokens,
                     [[[10.0 + b * t for t in tokens]] for b in (1, 8)])


def test_best_chain_takes_the_known_optimum_at_each_batch_size():
    from reference_eagle4.planner import best_chain

    # batch 1: K = 0..5 give 1/11, 1.9/12, 2.7/13, 3.4/14, 3.5/15, 3.55/16 tokens/ms: K = 3 (0.243)
    # batch 8: 8/18, 15.2/26, 21.6/34, 27.2/42, 28/50, 28.4/58: K = 3 (0.648) beats K = 2 (0.635) narrowly
    assert best_chain(chain_table(), 16, 1, 512, REACH).sizes == [3]
    eight = best_chain(chain_table(), 16, 8, 512, REACH)
    assert eight.sizes == [3] * 8 and abs(eight.speed - 27.2 / 42) < 1e-9
    # a step of 2 ms + 3 ms a sequence-token at batch 8 shortens the chain: 8/26, 15.2/50, 21.6/74 -> K = 0,
    # or K = 1 when K = 0 is not allowed
    steep = chain_table()
    steep.verify_ms[1] = [[2.0 + 24 * t for t in steep.tokens]]
    assert best_chain(steep, 16, 8, 512, REACH).sizes == [0] * 8
    assert best_chain(steep, 16, 8, 512, REACH, least=1).sizes == [1] * 8


def test_best_chain_never_exceeds_the_budget():
    from reference_eagle4.planner import best_chain

    free = chain_table()
    free.verify_ms = [[[10.0] * 8] for _ in (1, 8)]            # every length costs the same: the longest wins
    assert best_chain(free, 3, 1, 512, REACH).sizes == [2]
    assert best_chain(free, 16, 1, 512, REACH).sizes == [5]     # no depth past what was measured

