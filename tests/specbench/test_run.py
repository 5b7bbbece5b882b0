"""`specbench run` / `compare` end to end on a tiny target: records, manifest, resume, Ctrl-C, errors."""

import json

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.dataset import bundled_version
from specbench.errors import SpecbenchError
from specbench.records import read_manifest, read_records

cli = CliRunner()


def run_args(target, out, *extra):
    return ["run", "--target", str(target), "--method", "ngram", "--budget", "4", "--limit", "4",
            "--max-new-tokens", "12", "--dtype", "float32", "--no-report", "--out", str(out), *extra]


def test_run_writes_manifest_and_one_record_per_request(tiny_target, tmp_path):
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(tiny_target, out, "--category", "text-to-image", "--concurrency", "2"))
    assert res.exit_code == 0, res.output
    assert f"run: {out}" in res.output.splitlines()      # a machine-load warning may follow it
    records = read_records(out)
    assert len(records) == 4 and {r["category"] for r in records} == {"text-to-image"}
    for r in records:
        assert len(r["output_token_ids"]) == 1 + sum(s["emitted"] for s in r["steps"])
        assert r["ttft_s"] <= r["latency_s"] and r["output_text"]
    m = read_manifest(out)
    assert (m["method"], m["budget"], m["concurrency"], m["dtype"]) == ("ngram", 4, 2, "float32")
    assert len(m["weights_sha256"]) == 64 and m["method_config"]["budget"] == 4
    assert m["dataset_version"] == bundled_version()     # the bundled release the rows came from


def test_run_keeps_c_requests_in_flight_until_the_queue_runs_dry(tiny_target, tmp_path, monkeypatch):
    """The engine gets every request at once, so a request starts as soon as a slot frees; groups of C, each
    drained before the next began, left slots idle at every group's end."""
    from specbench.runners.reference.runner import ReferenceRunner

    handed: list[int] = []
    real = ReferenceRunner.run
    monkeypatch.setattr(ReferenceRunner, "run", lambda self, engine, todo, *a: (handed.append(len(todo)),
                                                                             real(self, engine, todo, *a))[1])
    res = cli.invoke(app, run_args(tiny_target, tmp_path / "run", "--concurrency", "2"))
    assert res.exit_code == 0, res.output
    assert handed == [4]


def test_resume_completes_a_run_and_keeps_finished_records(tiny_target, tmp_path):
    out = tmp_path / "run"
    assert cli.invoke(app, run_args(tiny_target, out)).exit_code == 0
    path = out / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")            # as if interrupted after two requests
    res = cli.invoke(app, run_args(tiny_target, out, "--resume"))
    assert res.exit_code == 0, res.output
    again = path.read_text().splitlines()
    assert again[:2] == lines[:2] and len(again) == 4
    assert sorted(json.loads(x)["question_id"] for x in again) == sorted(json.loads(x)["question_id"] for x in lines)


def test_refuses_to_overwrite_or_resume_with_other_settings(tiny_target, tmp_path):
    out = tmp_path / "run"
    assert cli.invoke(app, run_args(tiny_target, out)).exit_code == 0
    with pytest.raises(SpecbenchError, match="already holds records"):
        cli.invoke(app, run_args(tiny_target, out), catch_exceptions=False)
    with pytest.raises(SpecbenchError, match="budget"):
        cli.invoke(app, [*run_args(tiny_target, out, "--resume")[:-4], "--budget", "8", "--no-report", "--out",
                         str(out), "--resume"], catch_exceptions=False)


def test_ctrl_c_keeps_finished_records(tiny_target, tmp_path, monkeypatch):
    from specbench import run as run_mod

    out = tmp_path / "run"
    real = run_mod.RecordWriter.write
    calls = {"n": 0}

    def write_then_interrupt(self, rec):
        real(self, rec)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(run_mod.RecordWriter, "write", write_then_interrupt)
    res = cli.invoke(app, run_args(tiny_target, out))
    assert res.exit_code == 130   # typer turns Ctrl-C into the shell convention
    assert len(read_records(out)) == 2
    monkeypatch.setattr(run_mod.RecordWriter, "write", real)
    assert cli.invoke(app, run_args(tiny_target, out, "--resume")).exit_code == 0
    assert len(read_records(out)) == 4


def test_compare_interleaves_methods_and_reports_speedups(tiny_target, tmp_path):
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--target", str(tiny_target), "--methods", "ngram", "--budget", "2,4",
                           "--concurrency", "1,2", "--limit", "3", "--max-new-tokens", "10", "--dtype", "float32",
                           "--out", str(out)])
    assert res.exit_code == 0, res.output
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "report")
    assert dirs == ["ngram-L2-C1", "ngram-L2-C2", "ngram-L4-C1", "ngram-L4-C2", "vanilla-L1-C1", "vanilla-L1-C2"]
    assert {read_manifest(out / d)["compare_id"] for d in dirs} == {"cmp"}
    assert "identical to vanilla for 100.0% of requests" in res.output
    assert (out / "report" / "leaderboard.md").exists()


def test_compare_repeats_interleave_each_in_its_own_run_dir(tiny_target, tmp_path):
    """--repeats 2: four run dirs (NAME-rK, the manifest says which repeat), every repeat's first request done
    before any second one (interleaved), one report row per variant, and --resume of the finished comparison
    runs nothing again."""
    out = tmp_path / "cmp"
    args = ["compare", "--target", str(tiny_target), "--methods", "ngram", "--budget", "4", "--limit", "2",
            "--max-new-tokens", "8", "--dtype", "float32", "--repeats", "2", "--out", str(out)]
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    dirs = ["vanilla-L1-C1-r1", "ngram-L4-C1-r1", "vanilla-L1-C1-r2", "ngram-L4-C1-r2"]
    assert sorted(p.name for p in out.iterdir() if p.name != "report") == sorted(dirs)
    assert [(read_manifest(out / d)["repeat"], read_manifest(out / d)["repeats"]) for d in dirs] == \
        [(1, 2), (1, 2), (2, 2), (2, 2)]
    starts = [sorted(r["t_start"] for r in read_records(out / d)) for d in dirs]
    assert max(s[0] for s in starts) < min(s[1] for s in starts)
    md = (out / "report" / "leaderboard.md").read_text()
    assert "| 4 in 2 repeats | ngram-L4-C1 |" in md and "| 4 in 2 repeats | vanilla-L1-C1 |" in md
    before = {d: read_records(out / d) for d in dirs}
    res = cli.invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    assert {d: read_records(out / d) for d in dirs} == before


def test_match_rates_say_so_when_no_request_finished_in_both_runs(synth, capsys):
    from specbench.run_cli import _print_match_rates

    step = synth.step(1, 2)
    vanilla = synth.run("van", [synth.record("q1", [step], status="failed")])
    ngram = synth.run("ng", [synth.record("q1", [step])], method="ngram", budget=4)
    _print_match_rates([vanilla, ngram])
    assert "ngram L=4 C=1: no request finished in both runs, outputs not compared" in capsys.readouterr().out


def test_unknown_method_is_one_clear_error(tiny_target, tmp_path):
    with pytest.raises(SpecbenchError, match="--method 'nope' is unknown"):
        cli.invoke(app, ["run", "--target", str(tiny_target), "--method", "nope", "--limit", "1",
                         "--out", str(tmp_path / "r")], catch_exceptions=False)


def test_prefix_cache_skips_the_shared_system_prompt_without_changing_outputs(tiny_target, tmp_path):
    runs = {}
    for flag in ("--prefix-cache", "--no-prefix-cache"):
        out = tmp_path / flag
        res = cli.invoke(app, run_args(tiny_target, out, "--category", "text-to-video", flag))
        assert res.exit_code == 0, res.output
        runs[flag] = read_records(out)
        assert read_manifest(out)["prefix_cache"] == (8192 if flag == "--prefix-cache" else 0)
    on, off = runs["--prefix-cache"], runs["--no-prefix-cache"]
    assert [r["output_token_ids"] for r in on] == [r["output_token_ids"] for r in off]
    assert on[0]["cached_prompt_tokens"] == 0 and all(r["cached_prompt_tokens"] > 100 for r in on[1:])
    assert all(r["cached_prompt_tokens"] == 0 for r in off)


def test_no_prefix_cache_on_a_server_engine_is_a_clear_error(tiny_target, tmp_path):
    with pytest.raises(SpecbenchError, match="--no-prefix-cache is for the reference engine"):
        cli.invoke(app, ["run", "--target", str(tiny_target), "--engine", "vllm", "--no-prefix-cache",
                         "--limit", "1", "--out", str(tmp_path / "r")], catch_exceptions=False)


def test_compare_runs_variants_of_one_method_side_by_side(tiny_target, tmp_path):
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--target", str(tiny_target), "--methods", "ngram,ngram:matches=3",
                           "--budget", "4", "--limit", "2", "--max-new-tokens", "10", "--dtype", "float32",
                           "--out", str(out)])
    assert res.exit_code == 0, res.output
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "report")
    assert dirs == ["ngram+matches=3-L4-C1", "ngram-L4-C1", "vanilla-L1-C1"]
    m = read_manifest(out / "ngram+matches=3-L4-C1")
    assert (m["method"], m["variant"], m["options"]) == ("ngram", {"matches": 3}, {"matches": 3})
    assert m["method_config"] != read_manifest(out / "ngram-L4-C1")["method_config"]
    board = (out / "report" / "leaderboard.md").read_text()
    assert "| ngram+matches=3 |" in board and "| ngram |" in board
    assert "ngram+matches=3 L=4 C=1: output identical to vanilla" in res.output


def test_a_method_entry_runs_at_its_own_budget_beside_the_shared_ones(tiny_target, tmp_path):
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--target", str(tiny_target), "--methods", "ngram,ngram:matches=3:budget=2",
                           "--budget", "4,6", "--limit", "1", "--max-new-tokens", "6", "--dtype", "float32",
                           "--out", str(out)])
    assert res.exit_code == 0, res.output
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "report")
    assert dirs == ["ngram+matches=3-L2-C1", "ngram-L4-C1", "ngram-L6-C1", "vanilla-L1-C1"]
    m = read_manifest(out / "ngram+matches=3-L2-C1")
    assert (m["budget"], m["options"]) == (2, {"matches": 3})


@pytest.mark.parametrize("entry", ["vanilla:budget=4", "ngram:budget=0", "ngram:budget=big"])
def test_a_bad_per_method_budget_names_the_entry(tiny_target, tmp_path, entry):
    with pytest.raises(SpecbenchError, match=f"--methods {entry}: budget must be an integer L >= 1"):
        cli.invoke(app, ["compare", "--target", str(tiny_target), "--methods", entry,
                         "--out", str(tmp_path / "c")], catch_exceptions=False)


def test_a_malformed_method_option_names_the_entry(tiny_target, tmp_path):
    with pytest.raises(SpecbenchError, match="--methods ngram:matches: 'matches': expected KEY=VALUE"):
        cli.invoke(app, ["compare", "--target", str(tiny_target), "--methods", "ngram:matches",
                         "--out", str(tmp_path / "c")], catch_exceptions=False)


@pytest.mark.parametrize("args, message", [
    (["run", "--method", "ngram", "--option", "lookup=off"], "--option lookup: no method here takes it "
                                                             r"\(ngram takes matches, max_n, min_n\)"),
    (["compare", "--methods", "ngram:lokup=off"], "--methods ngram:lokup=...: ngram has no option 'lokup'"),
    (["run", "--engine", "vllm", "--method", "ngram", "--option", "lookup=off"],
     "--option lookup: the vllm runner takes no option 'lookup'"),
    (["compare", "--engine", "sglang", "--methods", "sglang-ngram:tp=2,sglang-ngram:tpp=2"],
     "--methods sglang-ngram:tpp=...: --method sglang-ngram on SGLang takes no option 'tpp'"),
    (["compare", "--engine", "sglang", "--methods", "sglang-ngram", "--chunk", "4"], "--chunk is for the reference engine"),
    (["run", "--engine", "vllm", "--method", "ngram", "--threads", "2"], "--threads is for the reference engine"),
])
def test_an_option_no_method_takes_is_an_error_not_ignored(tiny_target, tmp_path, args, message):
    with pytest.raises(SpecbenchError, match=message):
        cli.invoke(app, [*args, "--target", str(tiny_target), "--out", str(tmp_path / "r")], catch_exceptions=False)


def test_serve_refuses_an_option_its_method_does_not_take(tiny_target):
    with pytest.raises(SpecbenchError, match="--option lookup: no method here takes it"):
        cli.invoke(app, ["serve", "--method", "ngram", "--option", "lookup=off", "--target", str(tiny_target)],
                   catch_exceptions=False)
