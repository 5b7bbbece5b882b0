"""The vLLM runner's launch commands, drafter checks, options, cache flush and what it learns from a server.

The drafters are config-only folders in the published layouts that tools/check_vllm_args.py writes (and feeds
through vLLM itself); here no vLLM is needed."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.runners.vllm import (
    VllmRunner, facts_from_metrics, facts_mismatch, launch_command, speculative_config,
)

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_vllm_args", ROOT / "tools" / "check_vllm_args.py")
check_vllm_args = sys.modules.setdefault("check_vllm_args", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check_vllm_args)
LAYOUTS = check_vllm_args.LAYOUTS
cli = CliRunner()


@pytest.fixture
def drafters(tmp_path):
    check_vllm_args.write_folders(tmp_path)
    return tmp_path


def drafter(tmp_path: Path, name: str, **changes: Any) -> str:
    """A config-only drafter: a published layout with some keys changed (None deletes one)."""
    folder = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    config = {**LAYOUTS[name], **changes}
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return str(folder)


def spec_of(argv: list[str]) -> dict[str, Any]:
    return json.loads(argv[argv.index("--speculative-config") + 1])


# -- launch commands -------------------------------------------------------------------------------------------

def test_each_method_maps_to_vllms_method_at_budget_l(drafters):
    def cmd(method: str, budget: int = 8) -> list[str]:
        folder = check_vllm_args.DRAFTERS.get(method)
        return launch_command("/m/target", method, budget, tp=4, drafter=folder and str(drafters / folder))

    vanilla = cmd("vanilla", 1)
    assert vanilla[:5] == ["env", "VLLM_SERVER_DEV_MODE=1", "python", "-m", "vllm.entrypoints.openai.api_server"]
    assert vanilla[vanilla.index("--tensor-parallel-size") + 1] == "4" and "--speculative-config" not in vanilla
    assert spec_of(cmd("ngram")) == {"method": "ngram", "num_speculative_tokens": 7, "prompt_lookup_max": 3,
                                     "prompt_lookup_min": 1}
    for method in ("eagle3", "eagle4-chain"):
        assert spec_of(cmd(method))["method"] == "eagle3"
    for method in ("dflash", "dflash2"):           # DFlash2 is a DFlash architecture, not a method of its own
        argv = cmd(method)
        assert spec_of(argv) == {"method": "dflash", "model": str(drafters / method), "num_speculative_tokens": 7,
                                 "attention_backend": "flash_attn"}
        assert argv[-2:] == ["--max-num-batched-tokens", "32768"]
    assert spec_of(cmd("dspark")) == {"method": "dspark", "model": str(drafters / "dspark"),
                                      "num_speculative_tokens": 7, "enable_adaptive_verification": True}
    assert spec_of(cmd("dspark", 16))["num_speculative_tokens"] == 15
    assert "--max-num-batched-tokens" not in cmd("eagle3")
    with pytest.raises(SpecbenchError, match="runs on --engine sglang"):
        cmd("eagle4-tree")
    with pytest.raises(SpecbenchError, match="budget >= 2"):
        cmd("dspark", 1)
    with pytest.raises(SpecbenchError, match="--option tp=0"):
        launch_command("/m/target", "vanilla", 1, tp=0)


# -- drafters vLLM would run as another method ----------------------------------------------------------------------

def test_dspark_drafters_that_would_silently_change_the_method_are_refused(tmp_path):
    def refused(path: str, budget: int = 8) -> str:
        with pytest.raises(SpecbenchError) as err:
            speculative_config("dspark", budget, path)
        return str(err.value)

    assert "as DeepSeek-V4's DSpark" in refused(drafter(tmp_path, "dspark", architectures=["LlamaForCausalLM"]))
    assert "as DeepSeek-V4's DSpark" in refused(drafter(tmp_path, "dspark", model_type="llama"))
    assert "no confidence head" in refused(drafter(tmp_path, "dspark", enable_confidence_head=None))
    speculative_config("dspark", 8, drafter(tmp_path, "dspark", architectures=["Qwen3DSparkModel"]))
    # DeepSeek-V4's drafter ships in the target's checkpoint and builds its head unless told not to
    v4 = drafter(tmp_path, "dspark", architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4",
                 enable_confidence_head=None)
    assert speculative_config("dspark", 8, v4)["method"] == "dspark"
    # a head in the config but not in the weights: vLLM drops it while loading
    weights = drafter(tmp_path, "dspark")
    header = json.dumps({"markov_head.w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    (Path(weights) / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
    assert "no confidence_head tensors" in refused(weights)
    # block 15 with the anchor as first prediction: 15 drafts, L = 16 at most
    assert speculative_config("dspark", 16, drafter(tmp_path, "dspark"))["num_speculative_tokens"] == 15
    assert "--budget 16 at most" in refused(drafter(tmp_path, "dspark"), 17)
    assert "--budget 8 at most" in refused(drafter(tmp_path, "dspark", sample_from_anchor=False, block_size=8), 9)
    assert "--budget 9" in refused(drafter(tmp_path, "dspark", architectures=["Qwen3OmniDSparkModel"], block_size=8))


def test_dflash_and_dflash2_drafters_must_be_of_the_method_asked(tmp_path):
    with pytest.raises(SpecbenchError, match="runs as DFlash2 under vLLM's method=dflash, not DFlash; use --method "
                                             "dflash2"):
        speculative_config("dflash", 8, drafter(tmp_path, "dflash2"))
    with pytest.raises(SpecbenchError, match="runs as DFlash under vLLM's method=dflash, not DFlash2"):
        speculative_config("dflash2", 8, drafter(tmp_path, "dflash"))
    with pytest.raises(SpecbenchError, match="runs as XPress"):
        speculative_config("dflash", 8, drafter(tmp_path, "dflash", architectures=["Qwen3XPressModel"]))
    with pytest.raises(SpecbenchError, match="use --method dspark"):
        speculative_config("dflash", 8, drafter(tmp_path, "dflash", dflash_config={"sample_from_anchor": True}))
    assert speculative_config("dflash", 16, drafter(tmp_path, "dflash"))["num_speculative_tokens"] == 15
    with pytest.raises(SpecbenchError, match="--budget 16 at most"):
        speculative_config("dflash", 17, drafter(tmp_path, "dflash"))


def test_specbench_checkpoints_and_hub_ids():
    own = ROOT / "reference_eagle4" / "drafters"
    with pytest.raises(SpecbenchError, match="specbench's own DFlash/DSpark checkpoint"):
        speculative_config("dspark", 8, str(own / "smollm2-135m-dspark"))
    with pytest.raises(SpecbenchError, match="export-eagle3"):
        speculative_config("eagle4-chain", 8, str(own / "smollm2-135m-eagle4"))
    assert speculative_config("dspark", 8, "deepseek-ai/dspark_qwen3_8b_block7")["model"] == \
        "deepseek-ai/dspark_qwen3_8b_block7"                     # the server resolves a Hub id itself


# -- options -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("methods,shared,message", [
    ([("vanilla", {}), ("ngram", {})], {"top_k": "4"}, "--option top_k: no method of this run reads it on vLLM "
                                                       "(it shapes SGLang's trees"),
    ([("vanilla", {}), ("ngram", {})], {"drafter": "/d"}, "--option drafter: no method of this run reads it"),
    ([("vanilla", {}), ("dflash", {"max_n": "4"})], {}, "--methods dflash:max_n=...: vLLM's dflash does not read"),
    ([("ngram", {})], {"tp": "zero"}, "--option tp=zero: expected an integer >= 1"),
])
def test_options_no_method_of_the_run_reads_are_refused(methods, shared, message):
    with pytest.raises(SpecbenchError, match=message.replace("(", r"\(").replace(".", r"\.")):
        VllmRunner.check_options(methods, shared)


def test_options_the_run_reads_pass_and_bad_values_are_one_line():
    VllmRunner.check_options([("vanilla", {}), ("dflash", {})], {"drafter": "/d", "tp": "4"})
    VllmRunner.check_options([("ngram", {"max_n": "4"})], {})
    with pytest.raises(SpecbenchError, match="min_n=5 is above max_n=4"):
        speculative_config("ngram", 8, options={"max_n": "4", "min_n": "5"})
    with pytest.raises(SpecbenchError, match="--option max_n=x"):
        speculative_config("ngram", 8, options={"max_n": "x"})


# -- a server: cache flush and facts ---------------------------------------------------------------------------------

# /server_info's vllm_config as vLLM 0.32.0 dumps it (trimmed to what the runner reads; the real dump has every field)
SERVER_INFO = {"vllm_config": {
    "parallel_config": {"tensor_parallel_size": 4, "pipeline_parallel_size": 1},
    "speculative_config": {"method": "dspark", "num_speculative_tokens": 7, "model": "/ckpt/dspark",
                           "enable_adaptive_verification": True, "prompt_lookup_max": 0},
}}
PER_POS = "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} 0.0\n'
                  for i in range(3))
METRICS = "# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{engine=\"0\"} 0.0\n" \
          "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n" + PER_POS


class FakeVllm(ThreadingHTTPServer):
    """What a vLLM server answers on the routes the runner reads; `routes` maps a path to (status, body)."""

    def __init__(self, routes: dict[str, list[tuple[int, Any]]]):
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes, self.posts = routes, []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeVllm

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self) -> None:
        answers = self.server.routes.get(self.path.split("?")[0], [(404, {"detail": "Not Found"})])
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = answer

    def do_POST(self) -> None:  # noqa: N802
        self.server.posts.append(self.path)
        self.answer()


@pytest.fixture
def fake():
    servers = []

    def start(routes: dict[str, list[tuple[int, Any]]] | None = None) -> FakeVllm:
        servers.append(FakeVllm(routes or {}))
        return servers[-1]

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def runner(url: str) -> VllmRunner:
    return VllmRunner("m", endpoint=url)


def test_flush_cache_posts_vllms_reset_and_is_one_line_when_it_cannot(fake, monkeypatch):
    monkeypatch.setattr("specbench.runners.vllm.FLUSH_WAIT_S", 0.0)
    ok = fake({"/reset_prefix_cache": [(200, {"success": False}), (200, {"success": True})]})
    runner(ok.url).flush_cache(ok.url)                     # blocks still held once, then emptied
    assert ok.posts == ["/reset_prefix_cache"] * 2
    plain = fake()                                         # no VLLM_SERVER_DEV_MODE: no such route
    with pytest.raises(SpecbenchError, match="HTTP 404: .* launch it with VLLM_SERVER_DEV_MODE=1"):
        runner(plain.url).flush_cache(plain.url)
    held = fake({"/reset_prefix_cache": [(200, {"success": False})]})
    with pytest.raises(SpecbenchError, match="success=false 5 times"):
        runner(held.url).flush_cache(held.url)


def test_server_facts_from_server_info_then_metrics(fake):
    dev = fake({"/version": [(200, {"version": "0.33.0"})], "/server_info": [(200, SERVER_INFO)]})
    facts = runner(dev.url).server_facts(dev.url)
    assert facts == {"engine_version": "0.33.0", "tensor_parallel_size": 4, "speculative": {
        "enabled": True, "method": "dspark", "num_speculative_tokens": 7, "model": "/ckpt/dspark",
        "enable_adaptive_verification": True, "source": "GET /server_info"}}
    plain = fake({"/version": [(200, {"version": "0.33.0"})], "/metrics": [(200, METRICS)]})
    facts = runner(plain.url).server_facts(plain.url)
    assert facts["tensor_parallel_size"] is None and facts["speculative"]["num_speculative_tokens"] == 3
    assert facts["speculative"]["enabled"] and facts["speculative"]["method"] is None
    silent = fake()                                        # says nothing: nothing is concluded
    assert runner(silent.url).server_facts(silent.url) == {
        "engine_version": None, "tensor_parallel_size": None, "speculative": dict.fromkeys(
            ["enabled", "method", "num_speculative_tokens", "model", "enable_adaptive_verification", "source"])}


def test_facts_that_contradict_the_run_are_named():
    facts = {"engine_version": "0.33.0", "tensor_parallel_size": 4, "speculative": {
        "enabled": True, "method": "dspark", "num_speculative_tokens": 7, "model": "/d",
        "enable_adaptive_verification": True, "source": "GET /server_info"}}
    assert facts_mismatch(facts, "dspark", 8, 4) is None
    assert "drafts 7 tokens per step (L=8) (GET /server_info), but this run is --budget 4" == \
        facts_mismatch(facts, "dspark", 4)
    assert "vLLM method 'dspark'" in facts_mismatch(facts, "dflash2", 8)
    assert "--method vanilla" in facts_mismatch(facts, "vanilla", 1)
    assert "tensor parallel 4, but this run says --option tp=1" in facts_mismatch(facts, "dspark", 8, 1)
    facts["speculative"]["enable_adaptive_verification"] = False
    assert "not the confidence-gated DSpark" in facts_mismatch(facts, "dspark", 8)
    no_spec = {"engine_version": "0.33.0", "tensor_parallel_size": None,
               "speculative": facts_from_metrics("# TYPE vllm:num_requests_running gauge\n")}
    assert "runs no speculative decoding (/metrics)" in facts_mismatch(no_spec, "ngram", 4)


def test_an_attached_server_that_serves_another_budget_is_one_line(fake, tmp_path):
    server = fake({"/health": [(200, {})], "/version": [(200, {"version": "0.33.0"})],
                     "/v1/models": [(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})],
                     "/metrics": [(200, METRICS)]})
    res = cli.invoke(app, ["run", "--engine", "vllm", "--endpoint", server.url, "--target", "m", "--method", "ngram",
                           "--budget", "8", "--limit", "1", "--no-report", "--out", str(tmp_path / "run")])
    assert res.exit_code != 0
    assert f"{server.url} drafts 3 tokens per step (L=4) (/metrics), but this run is --budget 8" in str(res.exception)
