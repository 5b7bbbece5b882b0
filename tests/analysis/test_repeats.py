"""Repeats of a variant combined: means, 95% t intervals, pooled counts, and speedups paired repeat by repeat."""

from __future__ import annotations

import pytest
from scipy import stats

from specbench.analysis.metrics import speedups, summarize_run
from specbench.analysis.repeats import combine_repeats


def _t_half(values: list[float]) -> float:
    low, _ = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / len(values), scale=stats.sem(values))
    return sum(values) / len(values) - low


@pytest.fixture
def repeats(synth):
    """Three repeats of vanilla and ngram in one comparison, one request of 10 output tokens each. Vanilla's
    latencies 1, 0.5, 1 s (10, 20, 10 tok/s); ngram's 0.5, 0.25, 0.25 s (20, 40, 40 tok/s): paired speedups 2,
    2 and 4, where the ratio of the means would say 2.5."""
    def run(method, k, latency, steps, budget):
        return synth.run(f"{method}-C1-r{k}", [synth.record("q1", steps, latency=latency, method=method,
                                                            t_start=10.0 * k, ttft=0.05)],
                         method=method, budget=budget, compare_id="cmp", repeat=k, repeats=3)

    dirs = []
    for k, (van, ng) in enumerate([(1.0, 0.5), (0.5, 0.25), (1.0, 0.25)], 1):
        dirs.append(run("vanilla", k, van, [synth.step(0, 0)] * 9, 1))
        dirs.append(run("ngram", k, ng, [synth.step(2, 3)] * 3, 4))
    solo = synth.run("ngram-solo", [synth.record("q1", [synth.step(1, 3)] * 4)], method="ngram", budget=4)
    return [summarize_run(d) for d in dirs] + [summarize_run(solo)]


def test_repeats_become_one_summary_of_means_and_intervals(repeats):
    combined = combine_repeats(repeats)
    assert [s["run_id"] for s in combined] == ["vanilla-C1", "ngram-C1", "ngram-solo"]
    ng = combined[1]
    assert [m["run_id"] for m in ng["repeats"]] == ["ngram-C1-r1", "ngram-C1-r2", "ngram-C1-r3"]
    assert ng["aggregate_tok_s"] == pytest.approx(100 / 3)
    assert ng["ci95"]["aggregate_tok_s"] == pytest.approx(_t_half([20.0, 40.0, 40.0]))
    assert ng["ttft_mean_s"] == pytest.approx(0.05) and ng["ci95"]["ttft_mean_s"] == pytest.approx(0.0, abs=1e-12)
    assert ng["al_token_weighted"] == pytest.approx(3.0)
    assert (ng["n_ok"], ng["acceptance_histogram"]) == (3, {"2": 9})    # pooled over the repeats
    assert ng["per_category"]["chat"]["aggregate_tok_s"] == pytest.approx(100 / 3)
    assert combined[2] is repeats[-1]                                  # a run that is no repeat passes through


def test_speedup_pairs_each_repeat_with_vanillas_same_repeat(repeats):
    combined = combine_repeats(repeats)
    sp = {s["run_id"]: s for s in speedups(combined)}["ngram-C1"]
    assert sp["baseline"] == "vanilla-C1"
    assert sp["speedup"] == pytest.approx(8 / 3)
    assert sp["speedup_ci95"] == pytest.approx(_t_half([2.0, 2.0, 4.0]))
    assert sp["per_category"]["chat"] == pytest.approx(8 / 3)
    # uncombined, each repeat takes vanilla's same repeat as its baseline
    raw = {s["run_id"]: s for s in speedups(repeats)}
    assert [(raw[f"ngram-C1-r{k}"]["baseline"], raw[f"ngram-C1-r{k}"]["speedup"]) for k in (1, 2, 3)] == \
        [("vanilla-C1-r1", 2.0), ("vanilla-C1-r2", 2.0), ("vanilla-C1-r3", 4.0)]


def test_repeats_of_different_comparisons_stay_apart(synth):
    runs = [summarize_run(synth.run(f"v-{c}", [synth.record("q", [synth.step(0, 0)])], compare_id=c, repeat=1,
                                    repeats=2)) for c in ("a", "b")]
    assert [s["run_id"] for s in combine_repeats(runs)] == ["v-a", "v-b"]
    assert all(len(s["repeats"]) == 1 for s in combine_repeats(runs))
