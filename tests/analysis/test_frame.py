"""The results DataFrame: one row per run × category plus an "all" row per run, with the report's numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specbench.analysis.frame import ALL_CATEGORIES, COLUMNS, runs_frame, summaries_frame
from specbench.analysis.metrics import summarize_run


@pytest.fixture
def run_dirs(synth):
    """vanilla and ngram L=4 at C=1 in one compare, two categories, one failed ngram request, plus an ngram
    variant. Hand-computed for ngram: 14 tokens over 6 steps (AL 2.33, per request 2.5 and 2.0), 5 of 6 steps
    accept the first draft, 16 tokens over 1 s busy vs vanilla's 20 over 2 s (speedup 1.6); text-to-image alone
    11 tokens over 0.5 s vs 10 over 1 s (2.2), text-to-video 5 over 0.5 s vs 10 over 1 s (1.0)."""
    rec, step = synth.record, synth.step
    van = synth.run("van", [
        rec("q1", [step(0, 0)] * 9, category="text-to-image", method="vanilla", t_start=0.0),
        rec("q2", [step(0, 0)] * 9, category="text-to-video", method="vanilla", t_start=1.0),
    ], compare_id="cmp")
    ngram = synth.run("ng", [
        rec("q1", [step(3, 3), step(1, 3), step(0, 3), step(2, 3)], category="text-to-image", t_start=10.0,
            latency=0.5),
        rec("q2", [step(1, 3), step(1, 3)], category="text-to-video", t_start=10.5, latency=0.5),
        rec("q3", [step(3, 3)], category="text-to-video", status="failed", t_start=11.0, latency=5.0),
    ], method="ngram", budget=4, compare_id="cmp")
    variant = synth.run("ng-off", [rec("q1", [step(1, 3)], category="text-to-image")], method="ngram", budget=4,
                        variant={"lookup": "off"}, compare_id="cmp")
    return [van, ngram, variant]


def test_one_row_per_run_and_category_with_the_reports_numbers(run_dirs):
    frame = runs_frame(run_dirs)
    assert list(frame.columns) == list(COLUMNS)
    assert list(zip(frame["run_id"], frame["category"])) == [
        ("van", "all"), ("van", "text-to-image"), ("van", "text-to-video"),
        ("ng", "all"), ("ng", "text-to-image"), ("ng", "text-to-video"),
        ("ng-off", "all"), ("ng-off", "text-to-image"),
    ]
    ng = frame.set_index(["run_id", "category"]).loc["ng"]
    overall = ng.loc[ALL_CATEGORIES]
    assert (overall["method"], overall["base_method"], overall["budget"], overall["concurrency"]) == ("ngram", "ngram",
                                                                                                      4, 1)
    assert overall["al_token_weighted"] == pytest.approx(14 / 6)
    assert overall["al_per_request_mean"] == pytest.approx(2.25)
    assert overall["hit_at_1"] == pytest.approx(5 / 6)
    assert overall["aggregate_tok_s"] == pytest.approx(16.0)
    assert overall["speedup"] == pytest.approx(1.6)
    assert overall["tpot_mean_s"] == pytest.approx(0.07)
    assert (overall["n_ok"], overall["n_failed"], overall["baseline"]) == (2, 1, "van")
    assert ng.loc["text-to-image", "speedup"] == pytest.approx(2.2)
    assert ng.loc["text-to-image", "al_token_weighted"] == pytest.approx(2.5)
    assert (ng.loc["text-to-video", "n_ok"], ng.loc["text-to-video", "n_failed"]) == (1, 1)
    assert ng.loc["text-to-video", "speedup"] == pytest.approx(1.0)


def test_missing_metrics_are_nan_and_variants_keep_their_options(run_dirs):
    frame = runs_frame(run_dirs).set_index(["run_id", "category"])
    assert math.isnan(frame.loc[("van", "all"), "hit_at_1"])            # vanilla drafts nothing
    assert frame.loc[("van", "all"), "speedup"] == pytest.approx(1.0)
    off = frame.loc[("ng-off", "all")]
    assert (off["method"], off["base_method"], off["variant"]) == ("ngram+lookup=off", "ngram", "lookup=off")
    assert pd.isna(frame.loc[("ng", "all"), "variant"])


def test_dtypes_and_an_empty_frame():
    frame = summaries_frame([])
    assert frame.empty and list(frame.columns) == list(COLUMNS)
    assert {str(frame[c].dtype) for c in ("budget", "concurrency", "n_ok")} == {"int64"}
    assert {str(frame[c].dtype) for c in ("speedup", "aggregate_tok_s", "hit_at_1")} == {"float64"}


def test_one_groupby_answers_which_budget_is_best(run_dirs):
    """What the frame is for: a notebook question in one line, here the fastest budget of each method."""
    frame = summaries_frame([summarize_run(d) for d in run_dirs])
    best = frame[frame["category"] == ALL_CATEGORIES].groupby("method")["speedup"].max()
    assert best["ngram"] == pytest.approx(1.6) and best["vanilla"] == pytest.approx(1.0)
