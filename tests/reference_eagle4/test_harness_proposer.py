"""`eagle4-harness` through the engine: lossless, and its trees follow the cost table and the batch.

The harness weighs each draft level's measured time against the table; here every drafter pass lasts one
tick of a fake clock (lossless_helpers.steady_clock), so the trees, and what these tests assert about them, do
not depend on how busy the machine is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import bigram_drafter, bigram_target, one_thread, tiny_drafter  # noqa: E402,F401
from lossless_helpers import steady_clock  # noqa: E402,F401

from reference_eagle4.calibration import CostTable  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402

TOKENS = [1, 2, 4, 8, 16, 32, 64]
pytestmark = pytest.mark.usefixtures("steady_clock")


def table(per_token_ms: float, per_batch: float = 0.0, base_ms: float = 10.0) -> CostTable:
    """verify = base + per_token_ms * tokens * (1 + per_batch * (batch - 1)); drafting is timed (by the fake
    clock: one millisecond a drafter pass)."""
    batches, contexts = [1, 8], [64, 512]
    verify = [[[base_ms + per_token_ms * t * (1 + per_batch * (b - 1)) for t in TOKENS] for _ in contexts]
              for b in batches]
    return CostTable({"device": "synthetic"}, batches, contexts, TOKENS, verify)


@pytest.fixture(scope="module")
def bigram():
    t = bigram_target()
    g = torch.Generator().manual_seed(0)
    reqs = [Request(f"r{i}", torch.randint(0, 256, (n,), generator=g).tolist())
            for i, n in enumerate([5, 30, 12, 40, 3, 17, 9, 22])]
    return t, reqs


def run(target, reqs, method, C, drafter=None, max_new_tokens=32, **options):
    p = PROPOSERS[method](budget=16, drafter=drafter or bigram_drafter(target, noise=0.02), **options)
    eng = Engine(target, p, GenerationConfig(max_new_tokens=max_new_tokens, concurrency=C), max_len=200)
    out = {}
    eng.generate(reqs, lambda s: out.__setitem__(s.request.id, s))
    steps = [st for s in out.values() for st in s.steps]
    return {k: s.output for k, s in out.items()}, steps


@pytest.mark.parametrize("C", [1, 3])
def test_harness_is_lossless(bigram, C):
    t, reqs = bigram
    base, _ = run(t, reqs, "vanilla", 1)
    out, steps = run(t, reqs, "eagle4-harness", C, table=table(0.5))
    assert out == base
    assert all(st["budget"] <= 16 and "levels" in st for st in steps)


def test_flat_cost_table_gives_wider_trees_than_a_steep_one(bigram):
    t, reqs = bigram
    # a slow target (200 ms a step) makes the drafter's own time small beside it, isolating the table's shape
    _, flat = run(t, reqs[:3], "eagle4-harness", 1, table=table(0.01, base_ms=200.0))
    _, steep = run(t, reqs[:3], "eagle4-harness", 1, table=table(40.0, base_ms=200.0))
    mean = lambda steps: sum(st["drafted"] for st in steps) / len(steps)  # noqa: E731
    assert mean(flat) > mean(steep) + 2
    assert mean(flat) > 10


def test_trees_shrink_at_large_batch(bigram):
    t, reqs = bigram
    # a batch of 8 makes every extra token 8x dearer; a slow target keeps the drafter's time small against the
    # table, as in the test above
    costs = table(2.0, per_batch=1.0, base_ms=200.0)
    _, one = run(t, reqs, "eagle4-harness", 1, table=costs)
    _, eight = run(t, reqs, "eagle4-harness", 8, table=costs)
    mean = lambda steps: sum(st["drafted"] for st in steps) / len(steps)  # noqa: E731
    assert mean(eight) < mean(one) - 2


def test_a_drafter_as_slow_as_the_target_gets_smaller_trees(bigram, monkeypatch):
    """The drafter's own time enters the plan: with each drafter pass as dear as a target step, the harness
    drafts far less than with a drafter that costs next to nothing, on the same flat table."""
    from lossless_helpers import TickingClock

    from reference_eagle4.proposers import eagle4

    t, reqs = bigram
    costs = table(0.01, base_ms=200.0)
    _, fast = run(t, reqs[:3], "eagle4-harness", 1, table=costs)
    monkeypatch.setattr(eagle4, "time", TickingClock(200.0))
    _, slow = run(t, reqs[:3], "eagle4-harness", 1, table=costs)
    mean = lambda steps: sum(st["drafted"] for st in steps) / len(steps)  # noqa: E731
    assert mean(slow) < mean(fast) / 2


def lossless_with_a_poor_drafter(bigram, C: int, option: str) -> dict[bool, list[dict]]:
    """The harness with a random drafter on 4 requests, `option` on and off: each run's steps, after checking
    that both runs' outputs equal vanilla's."""
    t, reqs = bigram
    reqs = reqs[:4]
    base, _ = run(t, reqs, "vanilla", 1, max_new_tokens=64)
    steps = {}
    for on in (False, True):
        out, steps[on] = run(t, reqs, "eagle4-harness", C, drafter=tiny_drafter(t), max_new_tokens=64,
                             table=table(0.5), **{option: on})
        assert out == base
    return steps


@pytest.mark.parametrize("C", [1, 3])
def test_lookup_drafts_lift_acceptance_and_stay_lossless_when_the_drafter_is_poor(bigram, C):
    """A random drafter almost never matches; the bigram target's output falls into cycles, which prompt
    lookup copies. With lookup on, the harness must emit more tokens per step and still equal vanilla."""
    steps = lossless_with_a_poor_drafter(bigram, C, "lookup")
    al = {on: sum(st["emitted"] for st in s) / len(s) for on, s in steps.items()}
    assert al[True] > al[False] + 0.5


@pytest.mark.parametrize("C", [1, 3])
def test_steps_where_retrieval_suffices_skip_the_drafter_and_stay_lossless(bigram, C):
    """With a drafter that never matches and lookup drafts that do, steps whose lookup drafts promise more
    than the drafter's plans have verify them alone (no draft level, no catch-up); others still draft, and
    the outputs equal vanilla's. `skip_drafter=off` drafts every step."""
    runs = lossless_with_a_poor_drafter(bigram, C, "skip_drafter")
    levels = {on: [st["levels"] for st in s] for on, s in runs.items()}
    assert levels[True].count(0) >= 5 and max(levels[True]) >= 1
    assert 0 not in levels[False]


@pytest.mark.parametrize("C", [1, 3])
def test_datastore_drafts_from_other_responses_lift_acceptance_and_stay_lossless(bigram, C, tmp_path):
    """Responses to *other* prompts, indexed, draft the bigram target's recurring runs: with the datastore
    (and prompt lookup off, so it alone retrieves) the harness emits more per step and still equals vanilla."""
    from reference_eagle4.datastore import Datastore

    t, reqs = bigram
    corpus, _ = run(t, reqs[4:], "vanilla", 1, max_new_tokens=64)
    Datastore.from_responses(list(corpus.values()), vocab_size=256).save(tmp_path / "ds", {})
    base, _ = run(t, reqs[:4], "vanilla", 1, max_new_tokens=64)
    al = {}
    for ds in ("off", str(tmp_path / "ds")):
        out, steps = run(t, reqs[:4], "eagle4-harness", C, drafter=tiny_drafter(t), max_new_tokens=64,
                         table=table(0.5), lookup="off", datastore=ds)
        assert out == base
        al[ds] = sum(st["emitted"] for st in steps) / len(steps)
    assert al[str(tmp_path / "ds")] > al["off"] + 0.3


def test_a_datastore_of_another_vocabulary_is_refused_when_given_and_left_out_by_default(bigram, tmp_path):
    from reference_eagle4.datastore import Datastore

    t, reqs = bigram
    Datastore.from_responses([[1, 2, 3]], vocab_size=49152).save(tmp_path / "ds", {})
    with pytest.raises(ValueError, match="vocabulary of 49152 tokens, the target has 256"):
        run(t, reqs[:1], "eagle4-harness", 1, table=table(0.5), datastore=str(tmp_path / "ds"))
    for default in ({}, {"datastore": "on"}):
        p = PROPOSERS["eagle4-harness"](budget=16, drafter=bigram_drafter(t), table=table(0.5), **default)
        p.bind(t)
        assert p.config()["datastore"] is None    # the shipped one is for the default target's tokenizer


def test_a_phrase_seen_twice_drafts_both_continuations_the_later_first(bigram):
    """Where the context's longest match occurred more than once with different continuations, the target
    may take either: each distinct one is a branch, the most recent priced as "context", the others apart."""
    from types import SimpleNamespace

    from reference_eagle4.retrieval import ContextIndex

    t, _ = bigram
    seq = SimpleNamespace(tokens=[5, 6, 7, 1, 2, 9, 5, 6, 7, 3, 4, 9, 5, 6, 7])
    for matches, want in ((1, [("context", 3, [3, 4])]), (3, [("context", 3, [3, 4]), ("context-alt", 3, [1, 2])])):
        p = PROPOSERS["eagle4-harness"](budget=8, drafter=bigram_drafter(t), table=table(0.5), datastore="off",
                                        lookup_matches=matches)
        assert p.retrieval.find(ContextIndex(seq.tokens, 3), 2) == want
    with pytest.raises(ValueError, match="lookup_matches must be >= 1"):
        PROPOSERS["eagle4-harness"](budget=8, drafter=bigram_drafter(t), lookup_matches=0)
