"""Metrics against hand-computed values, the design card's worked example first."""

from __future__ import annotations

import json

import pytest

from specbench.analysis import metrics
from specbench.errors import SpecbenchError


def test_design_worked_example(synth):
    """One request, chain of 4 drafts per step, steps accept 2, 0, 4 (the design card's example)."""
    rec = synth.record("q1", [synth.step(2, 4), synth.step(0, 4), synth.step(4, 4)])
    assert len(rec["output_token_ids"]) == 10  # prefill token + 9 emitted
    assert metrics.acceptance_length([rec]) == {"token_weighted": 3.0, "per_request_mean": 3.0}
    assert metrics.acceptance_histogram([rec]) == {0: 1, 2: 1, 4: 1}
    hits = metrics.hit_rates([rec])
    assert hits["unconditional"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert hits["conditional"] == pytest.approx([2 / 3, 1.0, 1 / 2, 1.0])


def test_token_weighted_and_per_request_al_differ(synth):
    long = synth.record("long", [synth.step(0, 4)] * 4)   # AL 1 over 4 steps
    short = synth.record("short", [synth.step(2, 4)])      # AL 3 over 1 step
    al = metrics.acceptance_length([long, short])
    assert al["token_weighted"] == pytest.approx(7 / 5)
    assert al["per_request_mean"] == pytest.approx(2.0)


def test_cut_step_counts_emitted_for_al_and_accepted_for_hits(synth):
    """EOS (or max_new_tokens) after 2 tokens of a step whose 4 drafts all matched: AL sees 2 tokens,
    hit rates and the histogram still see 4 accepted drafts."""
    rec = synth.record("q", [synth.step(1, 4), synth.step(4, 4, emitted=2)])
    assert metrics.acceptance_length([rec])["token_weighted"] == pytest.approx(2.0)
    assert metrics.acceptance_histogram([rec]) == {1: 1, 4: 1}
    assert metrics.hit_rates([rec])["unconditional"] == pytest.approx([1.0, 0.5, 0.5, 0.5])


def test_prefill_token_is_output_but_not_a_step(synth):
    only_prefill = synth.record("p", [], latency=0.5)
    drafted = synth.record("d", [synth.step(1, 2)])
    assert metrics.acceptance_length([only_prefill, drafted]) == {"token_weighted": 2.0, "per_request_mean": 2.0}
    assert metrics.throughput([only_prefill, drafted])["output_tokens"] == 1 + 3


def test_conditional_rate_counts_only_trees_deep_enough(synth):
    """A depth-1 tree is no miss at depth 2; a depth that nobody reached gives None, not NaN."""
    rec = synth.record("q", [synth.step(1, 1), synth.step(2, 3, drafted=6), synth.step(0, 0, drafted=0)])
    hits = metrics.hit_rates([rec])
    assert hits["unconditional"] == pytest.approx([1.0, 0.5, 0.0])  # the no-draft step is not in the denominator
    assert hits["conditional"] == pytest.approx([1.0, 1.0, 0.0])
    unreached = metrics.hit_rates([synth.record("u", [synth.step(0, 2)])])
    assert unreached["conditional"] == [0.0, None]


def test_vanilla_has_al_one_and_no_hit_rates(synth):
    rec = synth.record("v", [synth.step(0, 0)] * 5, method="vanilla")
    assert metrics.acceptance_length([rec])["token_weighted"] == 1.0
    assert metrics.hit_rates([rec]) == {"unconditional": [], "conditional": []}
    assert metrics.acceptance_histogram([rec]) == {0: 5}


def test_al_by_entropy_quartile(synth):
    # Request i has entropy i and accepts i // 2 drafts per step: quartile q holds entropies 2q-2, 2q-1.
    records = [synth.record(f"q{i}", [synth.step(i // 2, 4)] * 2, entropy=float(i)) for i in (5, 0, 7, 2, 1, 6, 3, 4)]
    records.append(synth.record("no-entropy", [synth.step(4, 4)], entropy=None))
    quartiles = metrics.al_by_entropy_quartile(records)
    assert [(q["quartile"], q["n"], q["entropy_min"], q["entropy_max"]) for q in quartiles] == [
        (1, 2, 0.0, 1.0), (2, 2, 2.0, 3.0), (3, 2, 4.0, 5.0), (4, 2, 6.0, 7.0)]
    assert [q["al"] for q in quartiles] == pytest.approx([1.0, 2.0, 3.0, 4.0])


def test_entropy_quartiles_with_fewer_requests_than_quartiles(synth):
    quartiles = metrics.al_by_entropy_quartile([synth.record("a", [synth.step(1, 2)], entropy=0.5)])
    assert [q["n"] for q in quartiles] == [1, 0, 0, 0]
    assert quartiles[1] == {"quartile": 2, "n": 0, "entropy_min": None, "entropy_max": None, "al": None}


@pytest.mark.parametrize("intervals, length", [
    ([], 0.0),
    ([(0.0, 2.0), (1.0, 3.0), (10.0, 11.0)], 4.0),  # overlap merged, gap left out
    ([(0.0, 10.0), (2.0, 3.0)], 10.0),              # nested
    ([(3.0, 4.0), (0.0, 1.0), (1.0, 2.0)], 3.0),    # touching, unsorted
])
def test_union_length(intervals, length):
    assert metrics.union_length(intervals) == pytest.approx(length)


def test_throughput_uses_union_of_intervals(synth):
    """Two overlapping requests then, after a gap (another method's turn in an interleaved comparison), a third:
    40 tokens over 4 s of busy time, not over the 11 s from first start to last end."""
    records = [
        synth.record("a", [synth.step(0, 0)] * 9, t_start=100.0, latency=2.0, ttft=0.2),
        synth.record("b", [synth.step(0, 0)] * 9, t_start=101.0, latency=2.0, ttft=0.4),
        synth.record("c", [synth.step(0, 0)] * 19, t_start=110.0, latency=1.0, ttft=0.6),
    ]
    tp = metrics.throughput(records)
    assert tp["output_tokens"] == 40
    assert tp["wall_s"] == pytest.approx(4.0)
    assert tp["aggregate_tok_s"] == pytest.approx(10.0)
    assert tp["per_user_tok_s"] == pytest.approx((5 + 5 + 20) / 3)
    assert tp["ttft_mean_s"] == pytest.approx(0.4)
    assert tp["ttft_p50_s"] == pytest.approx(0.4)
    assert tp["ttft_p90_s"] == pytest.approx(0.56)
    assert tp["tpot_mean_s"] == pytest.approx(((1.8 / 9) + (1.6 / 9) + (0.4 / 19)) / 3)


def test_failed_records_are_counted_and_excluded(synth):
    ok = [synth.record("a", [synth.step(2, 4)], latency=1.0), synth.record("b", [synth.step(0, 4)], t_start=1.0)]
    failed = synth.record("f", [synth.step(4, 4)] * 10, status="failed", t_start=5.0, latency=100.0, ttft=50.0)
    with_failed = metrics.summarize_records(ok + [failed])
    assert (with_failed["n_ok"], with_failed["n_failed"]) == (2, 1)
    assert {k: v for k, v in with_failed.items() if k != "n_failed"} == \
        {k: v for k, v in metrics.summarize_records(ok).items() if k != "n_failed"}
    assert with_failed["al_token_weighted"] == pytest.approx(2.0)
    assert with_failed["wall_s"] == pytest.approx(2.0)


def test_summarize_run_is_json_stable_and_splits_categories(synth):
    run = synth.run("r1", [
        synth.record("a", [synth.step(3, 4)], category="text-to-image"),
        synth.record("b", [synth.step(1, 4)], category="text-to-video", t_start=1.0),
        synth.record("c", [synth.step(1, 4)], category="text-to-video", t_start=2.0, status="failed"),
    ], method="ngram", budget=5, extra_key="kept")
    summary = metrics.summarize_run(run)
    assert json.loads(json.dumps(summary)) == summary
    assert (summary["method"], summary["budget"], summary["run_dir"]) == ("ngram", 5, str(run))
    assert summary["manifest"]["extra_key"] == "kept"
    assert summary["al_token_weighted"] == pytest.approx(3.0)
    assert summary["acceptance_histogram"] == {"1": 1, "3": 1}
    cats = summary["per_category"]
    assert list(cats) == ["text-to-image", "text-to-video"]
    assert cats["text-to-image"]["al_token_weighted"] == pytest.approx(4.0)
    assert (cats["text-to-video"]["n_ok"], cats["text-to-video"]["n_failed"]) == (1, 1)


def test_summarize_run_rejects_what_is_not_a_run_dir(tmp_path, synth):
    with pytest.raises(SpecbenchError, match="nowhere"):
        metrics.summarize_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecbenchError, match="empty"):
        metrics.summarize_run(tmp_path / "empty")
    run = synth.run("bad", [])
    (run / "manifest.json").write_text("{not json")
    with pytest.raises(SpecbenchError, match="bad.*not valid JSON"):
        metrics.summarize_run(run)
    (run / "manifest.json").write_text(json.dumps({"run_id": "bad", "method": "ngram"}))
    with pytest.raises(SpecbenchError, match="lacks engine, dataset, budget, concurrency"):
        metrics.summarize_run(run)


def _summary(run_id, method, tok_s, *, cats=None, **keys):
    base = {"run_id": run_id, "method": method, "engine": "reference", "dataset": "d", "concurrency": 1,
            "target": "t", "dtype": "float32", "compare_id": None, "created": "2026-11-29T10:00:00",
            "aggregate_tok_s": tok_s, "per_category": {c: {"aggregate_tok_s": v} for c, v in (cats or {}).items()}}
    return {**base, **keys}


def test_speedups_prefer_same_compare_id_then_closest_in_time():
    summaries = [
        _summary("van-other", "vanilla", 50.0, compare_id="x", created="2026-11-29T10:00:01"),
        _summary("van-same", "vanilla", 40.0, compare_id="c1", created="2026-11-28T00:00:00",
                 cats={"chat": 20.0, "code": 0.0}),
        _summary("ng", "ngram", 80.0, compare_id="c1", cats={"chat": 30.0, "code": 5.0, "math": 9.0}),
        _summary("ng-solo", "ngram", 100.0, created="2026-11-29T09:00:00"),
        _summary("van-c8", "vanilla", 200.0, concurrency=8),
        _summary("ng-c8", "ngram", 300.0, concurrency=8),
        _summary("ng-vllm", "ngram", 300.0, engine="vllm"),
        _summary("ng-bf16", "ngram", 300.0, dtype="bfloat16"),
        _summary("van-128", "vanilla", 60.0, compare_id="c2", manifest={"max_new_tokens": 128, "categories": []}),
        _summary("ng-512", "ngram", 90.0, manifest={"max_new_tokens": 512, "categories": []}),
        _summary("ng-chat", "ngram", 90.0, manifest={"max_new_tokens": 128, "categories": ["chat"]}),
        _summary("ng-128", "ngram", 90.0, manifest={"max_new_tokens": 128, "categories": []}),
    ]
    result = {s["run_id"]: s for s in metrics.speedups(summaries)}
    assert [s["run_id"] for s in metrics.speedups(summaries)] == [s["run_id"] for s in summaries]
    assert (result["ng"]["baseline"], result["ng"]["speedup"]) == ("van-same", pytest.approx(2.0))
    assert result["ng"]["per_category"] == {"chat": pytest.approx(1.5), "code": None, "math": None}
    assert (result["ng-solo"]["baseline"], result["ng-solo"]["speedup"]) == ("van-other", pytest.approx(2.0))
    assert (result["ng-c8"]["baseline"], result["ng-c8"]["speedup"]) == ("van-c8", pytest.approx(1.5))
    assert (result["van-same"]["baseline"], result["van-same"]["speedup"]) == ("van-same", 1.0)
    assert result["ng-vllm"] == {"run_id": "ng-vllm", "baseline": None, "speedup": None, "speedup_ci95": None,
                                 "per_category": {}, "per_category_ci95": {}}
    assert result["ng-bf16"]["baseline"] is None
    # another token budget or another slice of the dataset is not a baseline
    assert result["ng-512"]["baseline"] is None and result["ng-chat"]["baseline"] is None
    assert (result["ng-128"]["baseline"], result["ng-128"]["speedup"]) == ("van-128", pytest.approx(1.5))


def test_verified_drafts_and_confidence_correlation(synth):
    from specbench.analysis.metrics import verified_drafts
    steps = [{**synth.step(a, 4), "pred_accept": p} for a, p in [(0, 0.2), (1, 1.1), (3, 2.5), (4, 3.6)]]
    steps.append(synth.step(0, 1))                 # a step without a prediction still counts as verified drafts
    got = verified_drafts([synth.record("q", steps)])
    assert got["drafted_mean"] == (4 * 4 + 1) / 5
    assert got["pred_accept_corr"] > 0.95
    assert verified_drafts([synth.record("q", [synth.step(1, 2)] * 3)])["pred_accept_corr"] is None


def test_step_times_average_the_steps_that_record_them(synth):
    from specbench.analysis.metrics import step_times
    timed = [{**synth.step(1, 4), "draft_ms": d, "verify_ms": v} for d, v in [(2.0, 50.0), (4.0, 60.0)]]
    got = step_times([synth.record("a", timed), synth.record("b", [{**timed[0]}])])
    assert got == {"draft_ms_mean": pytest.approx(8 / 3), "verify_ms_mean": pytest.approx(160 / 3)}
    assert step_times([synth.record("c", [synth.step(1, 4)])]) == {"draft_ms_mean": None, "verify_ms_mean": None}


def test_server_baselines_match_on_hardware_version_and_tp_never_on_the_url():
    """A vLLM run's vanilla must come from the same engine version, GPUs and tensor parallel size; a server whose
    hardware is unknown only pairs with vanilla measured in the same comparison."""
    vllm = dict(engine="vllm", engine_version="0.33.0", device="4x NVIDIA B300", tensor_parallel_size=4)
    summaries = [
        _summary("van-h100", "vanilla", 10.0, **{**vllm, "device": "4x NVIDIA H100 80GB HBM3"}),
        _summary("van-tp1", "vanilla", 20.0, **{**vllm, "tensor_parallel_size": 1}),
        _summary("van-old", "vanilla", 30.0, **{**vllm, "engine_version": "0.32.0"}),
        _summary("van-b300", "vanilla", 40.0, **vllm),
        _summary("ng-b300", "ngram", 80.0, **vllm),
        _summary("van-unknown", "vanilla", 50.0, **{**vllm, "device": "unknown"}, compare_id="other"),
        _summary("van-unknown-c", "vanilla", 25.0, **{**vllm, "device": "unknown"}, compare_id="c"),
        _summary("ng-unknown", "ngram", 100.0, **{**vllm, "device": "unknown"}, compare_id="c"),
        _summary("ng-unknown-solo", "ngram", 100.0, **{**vllm, "device": "unknown"}),
    ]
    result = {s["run_id"]: s for s in metrics.speedups(summaries)}
    assert (result["ng-b300"]["baseline"], result["ng-b300"]["speedup"]) == ("van-b300", pytest.approx(2.0))
    assert (result["ng-unknown"]["baseline"], result["ng-unknown"]["speedup"]) == ("van-unknown-c",
                                                                                  pytest.approx(4.0))
    assert result["ng-unknown-solo"]["baseline"] is None


# -- latency distributions, goodput, confidence intervals -----------------------------------------------------------

def _timed(synth, qid, n_out, ttft, latency, itl=None, **kw):
    rec = synth.record(qid, [], n_out=n_out, ttft=ttft, latency=latency, **kw)
    return {**rec, "itl_s": itl} if itl is not None else rec


def test_latency_percentiles_as_vllm_bench_serve_computes_them(synth):
    """Eleven requests with TTFT 0, 0.1, ..., 1.0 s: numpy's linear percentiles give p50 0.5, p90 0.9, p99 0.99.
    TPOT = (latency - TTFT) / (tokens - 1); ITL pools every request's gaps."""
    records = [_timed(synth, f"q{i}", 11, ttft=i / 10, latency=i / 10 + 1.0, t_start=float(i)) for i in range(11)]
    tp = metrics.throughput(records)
    assert (tp["ttft_mean_s"], tp["ttft_p50_s"], tp["ttft_p90_s"], tp["ttft_p99_s"]) == \
        pytest.approx((0.5, 0.5, 0.9, 0.99))
    assert (tp["tpot_mean_s"], tp["tpot_p99_s"]) == pytest.approx((0.1, 0.1))
    assert tp["itl_mean_s"] is None and tp["itl_p99_s"] is None           # no record kept its gaps
    gaps = [_timed(synth, "a", 4, 0.1, 0.7, itl=[0.1, 0.2, 0.3]), _timed(synth, "b", 2, 0.1, 1.1, itl=[1.0])]
    tp = metrics.throughput(gaps)
    assert (tp["itl_mean_s"], tp["itl_p50_s"], tp["itl_p90_s"], tp["itl_p99_s"]) == \
        pytest.approx((0.4, 0.25, 0.79, 0.979))
    assert tp["tpot_p50_s"] == pytest.approx(0.6)                        # TPOTs 0.2 and 1.0


def test_goodput_counts_requests_meeting_every_objective_per_second(synth):
    """Four ok requests busy for 1.3 s in all (the union of their intervals): (TTFT, TPOT) = (0.1, 0.01),
    (0.6, 0.01), (0.1, 0.03), and one output token (TPOT 0, as vllm bench serve counts it) with TTFT 0.2.
    ttft <= 500 ms and tpot <= 20 ms: 2 good."""
    records = [_timed(synth, "a", 11, 0.1, 0.2), _timed(synth, "b", 11, 0.6, 0.7, t_start=0.5),
               _timed(synth, "c", 11, 0.1, 0.4, t_start=1.0), _timed(synth, "d", 1, 0.2, 0.2, t_start=1.8),
               _timed(synth, "f", 1, 0.0, 0.1, t_start=1.9, status="failed")]
    slo = metrics.parse_slo(["ttft_ms:500", "tpot_ms:20"])
    assert slo == {"ttft": 500.0, "tpot": 20.0}
    assert metrics.goodput(records, slo) == pytest.approx(2 / 1.3)
    assert metrics.goodput(records, {"ttft": 500.0}) == pytest.approx(3 / 1.3)
    assert metrics.goodput(records, {"e2el": 250.0}) == pytest.approx(2 / 1.3)   # latencies 0.2 and 0.2
    assert metrics.goodput(records, {}) is None
    assert metrics.summarize_records(records, slo)["goodput_req_s"] == pytest.approx(2 / 1.3)
    assert metrics.summarize_records(records)["goodput_req_s"] is None


@pytest.mark.parametrize("items, said", [
    (["ttft_ms"], "'ttft_ms': expected KEY:MILLISECONDS"),
    (["latency_ms:5"], "'latency_ms:5': expected KEY:MILLISECONDS with KEY one of ttft_ms, tpot_ms, e2el_ms"),
    (["tpot_ms:fast"], "'tpot_ms:fast'"),
    (["tpot_ms:-1"], "'tpot_ms:-1'"),
])
def test_bad_objectives_are_one_line(items, said):
    with pytest.raises(SpecbenchError, match="--goodput " + said):
        metrics.parse_slo(items)


def test_objectives_in_one_string_or_vllm_spelling():
    assert metrics.parse_slo(["ttft:300, e2el_ms:2000"]) == {"ttft": 300.0, "e2el": 2000.0}


def test_mean_ci_is_the_student_t_interval():
    """[1, 2, 3, 4]: mean 2.5, standard error sqrt(5/3)/2, t(0.975, 3) = 3.182446 -> half-width 2.054275."""
    mean, half = metrics.mean_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == pytest.approx(2.5) and half == pytest.approx(3.182446 * (5 / 3) ** 0.5 / 2, rel=1e-6)
    assert metrics.mean_ci([2.0, None, 4.0])[0] == pytest.approx(3.0)
    assert metrics.mean_ci([5.0, 5.0, 5.0]) == (5.0, 0.0)
    assert metrics.mean_ci([7.0]) == (7.0, None) and metrics.mean_ci([None]) == (None, None)
