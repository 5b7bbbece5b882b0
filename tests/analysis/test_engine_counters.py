"""Engine counters beside records: one definition, both sources, a flag where they disagree."""

from __future__ import annotations

import pytest

from specbench.analysis.engine_counters import counter_agreement
from specbench.analysis.metrics import summarize_run


def counters(al: float | None, hit1: float, al_engine: float | None = 2.5) -> dict:
    return {"source": "vLLM /metrics", "incomplete": False,
            "summary": {"al": al, "al_engine": al_engine, "al_engine_definition": "vLLM: 1 + accepted / drafting steps",
                        "hit_rate_unconditional": [hit1, 1 / 3]}}


@pytest.fixture
def server_run(synth):
    """An ngram run on a server: 3 steps emitting 3 + 1 + 2 = 6 tokens (AL 2.0), 2 of 3 hit at depth 1."""
    def make(name: str, engine_counters: dict | None):
        rec, step = synth.record, synth.step
        extra = {"engine_counters": engine_counters} if engine_counters else {}
        return summarize_run(synth.run(name, [rec("q1", [step(2, 3), step(0, 3), step(1, 3)])], method="ngram",
                                       budget=4, engine="vllm", **extra))
    return make


def test_sources_that_agree_are_not_flagged(server_run):
    c = counter_agreement(server_run("ok", counters(al=2.02, hit1=2 / 3)))
    assert c["al_records"] == pytest.approx(2.0) and c["al_counters"] == 2.02
    assert c["al_gap"] == pytest.approx(0.01) and c["hit_gap"] == pytest.approx(0.0)
    assert not c["flag"] and c["al_engine"] == 2.5


def test_an_al_gap_above_two_percent_is_flagged(server_run):
    c = counter_agreement(server_run("al", counters(al=2.1, hit1=2 / 3)))
    assert c["al_gap"] == pytest.approx(0.05) and c["flag"]


def test_a_hit_rate_gap_is_flagged_even_when_al_agrees(server_run):
    c = counter_agreement(server_run("hits", counters(al=2.0, hit1=0.5)))
    assert c["hit_gap"] == pytest.approx(2 / 3 - 0.5) and c["flag"]


def test_runs_without_engine_counters_have_no_check(server_run):
    assert counter_agreement(server_run("none", None)) is None
    assert counter_agreement(server_run("empty", counters(al=None, hit1=0.5, al_engine=None))) is None
