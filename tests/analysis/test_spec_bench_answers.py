"""Runs as Spec-Bench model-answer files: Spec-Bench's own arithmetic gives back our AL and tok/s/user speedup."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from specbench.analysis.metrics import summarize_run
from specbench.cli import app
from specbench.errors import SpecbenchError

cli = CliRunner()


def spec_bench_speed(answers: list[dict], baseline: list[dict]) -> tuple[float, float]:
    """What Spec-Bench's evaluation/speed.py computes (mean accepted tokens, speedup), the baseline's tokens
    taken from new_tokens in place of its re-tokenised text."""
    speeds = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in answers]
    base = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in baseline]
    accept = [x for a in answers for x in a["choices"][0]["accept_lengths"]]
    return float(np.mean(accept)), float(np.mean(speeds) / np.mean(base))


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_spec_bench_reads_back_our_al_and_per_user_speedup(synth, tmp_path):
    rec, step = synth.record, synth.step
    van = synth.run("van", [rec("q1", [step(0, 0)] * 9, latency=2.0), rec("q2", [step(0, 0)] * 5, latency=1.5)])
    ngram = synth.run("ng", [rec("q2", [step(1, 3), step(2, 3)], latency=0.5),
                             rec("q1", [step(3, 3), step(0, 3), step(2, 3)], latency=0.8),
                             rec("q3", [step(3, 3)], status="failed")],
                      method="ngram", budget=4)
    for run, name in ((van, "van.jsonl"), (ngram, "ng.jsonl")):
        res = cli.invoke(app, ["export-answers", str(run), "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    ours, theirs = read(tmp_path / "ng.jsonl"), read(tmp_path / "van.jsonl")
    assert [a["question_id"] for a in ours] == ["q1", "q2"], "failed requests are left out, ids sorted"
    assert ours[0]["choices"][0]["accept_lengths"] == [4, 1, 3] and ours[0]["model_id"] == "smollm2-135m-ngram-L4-C1"
    al, speedup = spec_bench_speed(ours, theirs)
    mine, base = summarize_run(ngram), summarize_run(van)
    assert al == pytest.approx(mine["al_token_weighted"])
    assert speedup == pytest.approx(mine["per_user_tok_s"] / base["per_user_tok_s"])


def test_export_answers_names_a_folder_that_is_not_a_run(tmp_path):
    res = cli.invoke(app, ["export-answers", str(tmp_path), "--out", str(tmp_path / "a.jsonl")])
    assert isinstance(res.exception, SpecbenchError) and "a run directory?" in str(res.exception)
    assert not (tmp_path / "a.jsonl").exists()
