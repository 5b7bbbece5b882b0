"""How a server run offers its load: warm-up requests that reach the server but no record, the cache flushes
around them and between variants, seeded request-rate arrivals, and the inter-chunk gaps a record keeps.

The CLI drives the vLLM runner against the stub server of `stub_openai.py` (in a thread, or launched as a process
per variant); `flush_cache` is replaced by one that logs when it is called.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_manifest, read_records
from specbench.runners.server import ServerRunner, free_port
from specbench.runners.server_traffic import arrival_offsets, warmup_requests

cli = CliRunner()


@pytest.fixture
def server(stub_server):
    return stub_server


@pytest.fixture
def flushes(server, monkeypatch):
    """The vLLM runner's flush_cache, logging (time, requests the stub had got) for each call."""
    from specbench.runners import vllm as vllm_mod

    log: list[tuple[float, int]] = []
    monkeypatch.setattr(vllm_mod.VllmRunner, "flush_cache",
                        lambda self, base: log.append((time.time(), len(server.httpd.requests))))
    return log


def run_args(out: Path, url: str, *extra: str, limit: int = 3) -> list[str]:
    return ["run", "--engine", "vllm", "--endpoint", url, "--target", "stub-model", "--method", "vanilla",
            "--budget", "1", "--limit", str(limit), "--max-new-tokens", "5", "--no-report", "--out", str(out),
            *extra]


def _messages(body: dict) -> str:
    return str(body["messages"])


# -- warm-up and flushes ------------------------------------------------------------------------------------------

def test_warm_up_sends_the_variants_own_prompts_unrecorded_between_two_flushes(server, flushes, tmp_path):
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--concurrency", "2"))
    assert res.exit_code == 0, res.output
    sent = server.httpd.requests
    records = read_records(out)
    assert len(records) == 3 and len(sent) == 3 + 4                 # default warm-up: 2 * C requests
    warm, measured = sent[:4], sent[4:]
    assert {_messages(b) for b in warm} <= {_messages(b) for b in measured}   # the variant's own prompts
    assert [n for _, n in flushes] == [0, 4]                          # before the warm-up and after it
    assert flushes[-1][0] <= min(r["t_start"] for r in records)
    m = read_manifest(out)
    assert m["warmup"] == {"requests": 4, "failed": 0, "flushed_after": True} and m["cache_flushed"] is True
    assert "warm-up 4 requests, not recorded; server cache flushed before and after" in res.output


def test_warmup_option_sets_the_count_and_zero_turns_it_off(server, flushes, tmp_path):
    res = cli.invoke(app, run_args(tmp_path / "a", server.url, "--option", "warmup=5", "--limit", "2"))
    assert res.exit_code == 0, res.output
    assert len(server.httpd.requests) == 5 + 2 and read_manifest(tmp_path / "a")["warmup"]["requests"] == 5
    before = len(server.httpd.requests)
    res = cli.invoke(app, run_args(tmp_path / "b", server.url, "--option", "warmup=0", "--limit", "2"))
    assert res.exit_code == 0, res.output
    assert len(server.httpd.requests) == before + 2
    assert read_manifest(tmp_path / "b")["warmup"] == {"requests": 0, "failed": 0, "flushed_after": False}
    assert [n for _, n in flushes][-1] == before                       # one flush, before the run, none after


def test_a_runner_that_cannot_flush_says_so():
    class Bare(ServerRunner):
        engine = "bare"

    class Flushing(Bare):
        def flush_cache(self, base: str) -> None:
            pass

    assert Bare("t").flushes_cache is False and Flushing("t").flushes_cache is True
    assert Bare("t").flush_cache("http://127.0.0.1:1") is None          # the default does nothing


def test_compare_flushes_between_variants_and_warms_each_up(tmp_path, monkeypatch):
    """Launch mode, one stub process per variant: each variant's flushes come after the previous variant's last
    record and before its own first one."""
    from specbench.runners import vllm as vllm_mod

    stub_script = str(Path(__file__).with_name("stub_openai.py"))
    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", lambda self, settings: [
        sys.executable, stub_script, "--port", str(free_port()), "--plan", "ok"])
    log: list[tuple[float, str]] = []
    monkeypatch.setattr(vllm_mod.VllmRunner, "flush_cache", lambda self, base: log.append((time.time(), base)))
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--engine", "vllm", "--methods", "ngram", "--budget", "4", "--limit", "2",
                           "--max-new-tokens", "4", "--target", "stub-model", "--out", str(out), "--report",
                           str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    spans = [(min(r["t_start"] for r in recs), max(r["t_end"] for r in recs))
             for recs in (read_records(out / d) for d in ("vanilla-L1-C1", "ngram-L4-C1"))]
    assert len(log) == 4 and log[0][1] != log[2][1]                   # two flushes on each variant's server
    assert log[1][0] <= spans[0][0] and spans[0][1] <= log[2][0] <= log[3][0] <= spans[1][0]
    for d in ("vanilla-L1-C1", "ngram-L4-C1"):
        assert read_manifest(out / d)["warmup"]["requests"] == 2


def test_compare_serves_every_concurrency_of_a_variant_on_one_launch(tmp_path, monkeypatch):
    """A server launch per variant and repeat, not per concurrency: each launch serves C = 1 then C = 2, its cache
    flushed and warmed up before each."""
    from specbench.runners import vllm as vllm_mod

    stub_script = str(Path(__file__).with_name("stub_openai.py"))
    ports = {"vanilla": free_port(), "ngram": free_port()}
    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", lambda self, settings: [
        sys.executable, stub_script, "--port", str(ports[settings.method]), "--plan", "ok"])
    launched: list[str] = []
    real_launch = vllm_mod.VllmRunner._launch
    monkeypatch.setattr(vllm_mod.VllmRunner, "_launch", lambda self, session, timeout: (
        launched.append(session.run_dir.name), real_launch(self, session, timeout))[1])
    monkeypatch.setattr(vllm_mod.VllmRunner, "flush_cache", lambda self, base: None)
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--engine", "vllm", "--methods", "ngram", "--budget", "4", "--limit", "2",
                           "--concurrency", "1,2", "--repeats", "2", "--max-new-tokens", "4", "--target",
                           "stub-model", "--out", str(out), "--report", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    assert launched == ["vanilla-L1-C1-r1", "ngram-L4-C1-r1", "vanilla-L1-C1-r2", "ngram-L4-C1-r2"]
    for v, c, k in ((v, c, k) for v in ("vanilla-L1", "ngram-L4") for c in (1, 2) for k in (1, 2)):
        d = out / f"{v}-C{c}-r{k}"
        assert len(read_records(d)) == 2 and read_manifest(d)["warmup"]["requests"] == 2 * c


@pytest.mark.parametrize("value, shown", [("-1", "-1"), ("1.5", r"1\.5"), ("many", "'many'")])
def test_a_bad_warmup_is_one_line_naming_the_flag(tmp_path, value, shown):
    with pytest.raises(SpecbenchError, match=rf"--option warmup={shown}: expected a whole number >= 0"):
        cli.invoke(app, run_args(tmp_path / "r", "http://127.0.0.1:1", "--option", f"warmup={value}"),
                   catch_exceptions=False)
    with pytest.raises(SpecbenchError, match=r"--methods ngram: warmup=-1"):
        warmup_requests({"warmup": -1}, 1, "--methods ngram:")


# -- arrivals -------------------------------------------------------------------------------------------------------

def _gaps(offsets: list[float]) -> list[float]:
    return [offsets[0]] + [b - a for a, b in zip(offsets, offsets[1:])]


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def test_arrival_schedule_is_seeded_gamma_rescaled_to_n_over_rate():
    a = arrival_offsets(2000, 4.0, 1.0, seed=7)
    assert a == arrival_offsets(2000, 4.0, 1.0, seed=7) and a != arrival_offsets(2000, 4.0, 1.0, seed=8)
    assert a == sorted(a) and a[-1] == pytest.approx(2000 / 4.0)      # vllm bench serve's rescaling
    assert statistics.mean(_gaps(a)) == pytest.approx(0.25)
    # gamma gaps of shape B have a coefficient of variation 1 / sqrt(B): Poisson 1, burstier above, regular below
    assert _cv(_gaps(a)) == pytest.approx(1.0, rel=0.1)
    assert _cv(_gaps(arrival_offsets(2000, 4.0, 0.25, seed=7))) == pytest.approx(2.0, rel=0.15)
    assert _cv(_gaps(arrival_offsets(2000, 4.0, 16.0, seed=7))) == pytest.approx(0.25, rel=0.15)
    assert arrival_offsets(3, None) == [0.0, 0.0, 0.0]                 # no rate: every request at once


def test_requests_are_sent_on_the_seeded_schedule(server, tmp_path):
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "6", "--concurrency", "6", "--request-rate", "8",
                                   "--seed", "3", "--option", "warmup=0"))
    assert res.exit_code == 0, res.output
    starts = sorted(r["t_start"] for r in read_records(out))
    plan = arrival_offsets(6, 8.0, 1.0, seed=3)
    got = [t - starts[0] for t in starts]
    want = [t - plan[0] for t in plan]
    assert got == pytest.approx(want, abs=0.05)
    m = read_manifest(out)
    assert (m["request_rate"], m["burstiness"]) == (8.0, 1.0)


def test_concurrency_still_caps_requests_in_flight_under_a_rate(server, tmp_path):
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "4", "--concurrency", "1", "--request-rate", "1000",
                                   "--option", "warmup=0"))
    assert res.exit_code == 0, res.output
    spans = sorted((r["t_start"], r["t_end"]) for r in read_records(out))
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("args, said", [
    (["--request-rate", "0"], "--request-rate 0: must be above 0"),
    (["--burstiness", "2"], "--burstiness shapes the gaps between --request-rate arrivals: give --request-rate"),
    (["--request-rate", "2", "--burstiness", "0"], "--burstiness 0: must be a positive finite number"),
])
def test_bad_arrival_flags_are_one_line(tmp_path, args, said):
    with pytest.raises(SpecbenchError, match=said):
        cli.invoke(app, run_args(tmp_path / "r", "http://127.0.0.1:1", *args), catch_exceptions=False)


def test_the_reference_engine_refuses_a_request_rate(tmp_path):
    with pytest.raises(SpecbenchError, match="--request-rate is for server engines"):
        cli.invoke(app, ["compare", "--methods", "ngram", "--request-rate", "4", "--out", str(tmp_path / "c")],
                   catch_exceptions=False)
    assert not (tmp_path / "c").exists()


# -- records --------------------------------------------------------------------------------------------------------

def test_records_keep_the_gaps_between_output_chunks(server, tmp_path):
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--option", "warmup=0"))
    assert res.exit_code == 0, res.output
    for r in read_records(out):
        assert len(r["itl_s"]) == len(r["output_token_ids"]) - 1 == 4          # the stub sends a token a chunk
        assert min(r["itl_s"]) >= 0
        assert sum(r["itl_s"]) == pytest.approx(r["latency_s"] - r["ttft_s"], abs=1e-5)


def test_server_runs_default_to_256_new_tokens(server, tmp_path):
    out = tmp_path / "run"
    args = run_args(out, server.url, "--option", "warmup=0", "--limit", "1")
    i = args.index("--max-new-tokens")
    res = cli.invoke(app, args[:i] + args[i + 2:])
    assert res.exit_code == 0, res.output
    assert server.httpd.requests[-1]["max_tokens"] == 256 and read_manifest(out)["max_new_tokens"] == 256
