"""The report's opening sentences: the right winner, runner-up and ratios, and words for what cannot be computed."""

from __future__ import annotations

import pytest

from specbench.analysis.headline import findings, sentences
from specbench.analysis.metrics import summarize_run


@pytest.fixture
def run(synth):
    """`run(run_id, method, budget, tok_s, ...)`: a summary of one request that emits tok_s tokens in 1 s."""
    def make(run_id, method, budget, tok_s, *, concurrency=1, dataset="prompt-enhancement", status="ok",
             **manifest):
        steps = [synth.step(0, 0)] if method == "vanilla" else [synth.step(1, budget - 1)]
        records = [synth.record("q1", steps, method=method, n_out=tok_s, latency=1.0, status=status)]
        return summarize_run(synth.run(run_id, records, method=method, budget=budget, concurrency=concurrency,
                                       dataset=dataset, **manifest))
    return make


@pytest.fixture
def summaries(run):
    """prompt-enhancement at C=1: vanilla 10 tok/s, ngram L=4 16 and L=8 12, eagle4-harness L=8 25 and L=16 20;
    at C=8: vanilla 40, ngram L=4 44, eagle4-harness L=4 42. fireworks at C=1: vanilla 10, ngram L=8 9; at C=8
    ngram L=8 30 and no vanilla."""
    return [
        run("van1", "vanilla", 1, 10), run("ng4", "ngram", 4, 16), run("ng8", "ngram", 8, 12),
        run("h8", "eagle4-harness", 8, 25), run("h16", "eagle4-harness", 16, 20),
        run("van8", "vanilla", 1, 40, concurrency=8), run("ng4c8", "ngram", 4, 44, concurrency=8),
        run("h4c8", "eagle4-harness", 4, 42, concurrency=8),
        run("fw-van", "vanilla", 1, 10, dataset="fireworks"), run("fw-ng", "ngram", 8, 9, dataset="fireworks"),
        run("fw-ng8", "ngram", 8, 30, dataset="fireworks", concurrency=8),
    ]


def test_findings_name_winner_runner_up_and_margin(summaries):
    found = {(f.concurrency, f.dataset): f for f in findings(summaries)}
    assert list(found) == [(1, "fireworks"), (1, "prompt-enhancement"), (8, "fireworks"), (8, "prompt-enhancement")]
    pe1 = found[(1, "prompt-enhancement")]
    assert (pe1.winner.label, pe1.runner_up.label) == ("eagle4-harness L = 8", "ngram L = 4")
    assert (pe1.winner.speedup, pe1.runner_up.speedup, pe1.margin) == pytest.approx((2.5, 1.6, 2.5 / 1.6))
    pe8 = found[(8, "prompt-enhancement")]
    assert (pe8.winner.label, pe8.runner_up.label) == ("ngram L = 4", "eagle4-harness L = 4")
    assert pe8.margin == pytest.approx(44 / 42)
    fw8 = found[(8, "fireworks")]
    assert (fw8.winner.speedup, fw8.winner.tok_s, fw8.runner_up, fw8.margin) == (None, 30.0, None, None)


def test_three_sentences_say_who_wins_where_and_by_how_much(summaries):
    assert sentences(summaries) == [
        "At C = 1, nothing beats vanilla on fireworks (the fastest method, ngram L = 8, reaches 0.90×); "
        "eagle4-harness L = 8 is fastest on prompt-enhancement (2.50× vanilla; 1.56× the best other method, "
        "ngram L = 4 at 1.60×).",
        "At C = 8, ngram L = 8 is fastest on fireworks (30.0 tok/s, no vanilla run to compare with; no other "
        "method ran); ngram L = 4 is fastest on prompt-enhancement (1.10× vanilla; 1.05× the best other method, "
        "eagle4-harness L = 4 at 1.05×).",
        "Over the 4 settings (dataset × C), ngram is fastest in 2, eagle4-harness is fastest in 1 and nothing "
        "beats vanilla in 1; the largest speedup is 2.50× (eagle4-harness L = 8 at C = 1 on prompt-enhancement).",
    ]


def test_a_single_run_or_no_vanilla_says_what_cannot_be_computed(run):
    ng, harness = run("ng", "ngram", 4, 16), run("h", "eagle4-harness", 8, 20)
    assert sentences([ng]) == [
        "At C = 1, ngram L = 4 is fastest on prompt-enhancement (16.0 tok/s, no vanilla run to compare with; "
        "no other method ran)."]
    assert sentences([ng, harness]) == [
        "At C = 1, eagle4-harness L = 8 is fastest on prompt-enhancement (20.0 tok/s, no vanilla run to compare "
        "with; 1.25× the best other method, ngram L = 4 at 16.0 tok/s)."]
    vanilla = run("van", "vanilla", 1, 10)
    assert sentences([vanilla]) == ["At C = 1, only vanilla ran on prompt-enhancement."]
    assert sentences([vanilla, run("dead", "ngram", 4, 16, status="failed")]) == [
        "At C = 1, no method besides vanilla finished a request on prompt-enhancement."]
    assert sentences([]) == ["No runs to compare."]


def test_a_repeated_setting_counts_its_newest_run_only(run, summaries):
    older = run("h8-old", "eagle4-harness", 8, 100, created="2026-01-01T00:00:00+00:00")
    found = findings(summaries + [older])
    pe1 = next(f for f in found if (f.concurrency, f.dataset) == (1, "prompt-enhancement"))
    assert pe1.winner.speedup == pytest.approx(2.5)


def test_labels_name_the_engine_where_engines_differ(run):
    found = findings([run("van", "vanilla", 1, 10), run("ng", "ngram", 4, 16),
                      run("vvan", "vanilla", 1, 20, engine="vllm"), run("vng", "ngram", 4, 50, engine="vllm")])
    assert (found[0].winner.label, found[0].runner_up.label) == ("vllm ngram L = 4", "reference ngram L = 4")
    assert found[0].margin == pytest.approx(2.5 / 1.6)
