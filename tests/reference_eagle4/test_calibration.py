"""Cost tables: measured on the real forward, interpolated between grid points, found by device key."""

import pytest

from reference_eagle4.calibration import CostTable, calibrate, find_table, slug
from reference_eagle4.model import load_transformer


def test_interpolates_between_and_beyond_grid_points():
    t = CostTable({"device": "x"}, [1, 4], [100, 200], [1, 3],
                  [[[10.0, 30.0], [20.0, 40.0]], [[40.0, 60.0], [50.0, 70.0]]])
    assert t.verify(1, 100, 2) == pytest.approx(20.0)
    assert t.verify(1, 150, 1) == pytest.approx(15.0)
    assert t.verify(2.5, 100, 1) == pytest.approx(25.0)
    assert t.verify(1, 100, 5) == pytest.approx(50.0)        # linear past the last token count
    assert t.draft(4, 16) == 0.0                              # no drafter timings: drafting is free


def test_calibrating_a_model_writes_a_table_found_by_its_key(tiny_target, tmp_path):
    model = load_transformer(tiny_target)
    table = calibrate(model, batches=(1, 2), contexts=(16, 64), tokens=(1, 4), repeats=1,
                      drafter_step=lambda b, w: (lambda: None), widths=(1, 2))
    assert len(table.verify_ms) == 2 and len(table.verify_ms[0]) == 2 and len(table.verify_ms[0][0]) == 2
    assert all(ms > 0 for plane in table.verify_ms for row in plane for ms in row)
    assert set(table.raw) >= {"b1-c16-t1", "b2-c64-t4", "draft-b2-w2"}
    table.save(tmp_path / f"{slug(table.key)}.json")
    again = find_table(table.key, tmp_path)
    assert again is not None and again.verify_ms == table.verify_ms
    assert find_table({**table.key, "threads": 99}, tmp_path) is None


def test_step_sizes_are_timed_in_rounds_so_drift_touches_each_alike():
    """A 1-token step timed during a slow minute must not look dearer than a 4-token one timed later."""
    from reference_eagle4.calibration import interleaved_ms

    calls: list[str] = []
    samples = interleaved_ms([lambda: calls.append("a"), lambda: calls.append("b")], repeats=3, warmup=1)
    assert calls == ["a", "b"] + ["a", "b"] * 3               # warm-up each, then a round of each
    assert [len(s) for s in samples] == [3, 3]


def test_the_token_counts_small_trees_use_and_draft_levels_are_timed_in_more_rounds(tiny_target):
    """The planner's choices at the budgets users run turn on the ratios of small step sizes, and on what a
    draft level costs next to them."""
    from reference_eagle4.calibration import FINE_ROUNDS, FINE_TOKENS

    table = calibrate(load_transformer(tiny_target), batches=(1,), contexts=(16,), tokens=(1, FINE_TOKENS, 32),
                      repeats=2, drafter_step=lambda b, w: (lambda: None), widths=(1,))
    assert [len(table.raw[f"b1-c16-t{t}"]) for t in (1, FINE_TOKENS, 32)] == [2 * FINE_ROUNDS] * 2 + [2]
    assert len(table.raw["draft-b1-w1"]) == 2 * FINE_ROUNDS


def test_a_table_from_an_older_engine_revision_is_not_used(tiny_target, tmp_path):
    model = load_transformer(tiny_target)
    table = calibrate(model, batches=(1,), contexts=(16,), tokens=(1,), repeats=1)
    table.save(tmp_path / f"{slug(table.key)}.json")
    assert find_table(table.key, tmp_path) is not None
    assert find_table({**table.key, "revision": table.key["revision"] - 1}, tmp_path) is None
