"""`specbench serve` logprobs: the target's own distribution in vLLM's shapes, strictly validated, and the
top-K entropy estimate checked against the engine's exact entropy through that HTTP path."""

from __future__ import annotations

import importlib.util
import random
import shutil
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_manifest, read_records
from specbench.runners.server import ServerRequest
from specbench.runners.server_entropy import DEFAULT_TAIL
from specbench.settings import Settings

TOOL = Path(__file__).resolve().parents[3] / "tools" / "check_entropy_estimator.py"
_spec = importlib.util.spec_from_file_location("check_entropy_estimator", TOOL)
check_entropy = sys.modules.setdefault("check_entropy_estimator", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check_entropy)

MESSAGES = [{"role": "user", "content": "a red fox jumps"}]
WORDS = ("a red fox jumps over the lazy dog at golden hour cinematic slow pan write a python function that "
         "reverses a list").split()


def sse(resp) -> list:
    import json

    return [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]


def target_logprobs(folder, prompt_ids, output_ids):
    """transformers' log-softmax of the tiny target at every output position: [len(output), V]."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + output_ids])).logits[0, len(prompt_ids) - 1: -1]
    return logits.log_softmax(-1)


def test_chat_and_completion_logprobs_are_the_targets_top_k_in_vllms_shape(served, tiny_target):
    body = {"messages": MESSAGES, "max_tokens": 12, "return_token_ids": True, "logprobs": True, "top_logprobs": 5,
            "return_tokens_as_token_ids": True}
    r = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=60).json()
    out, content = r["choices"][0]["token_ids"], r["choices"][0]["logprobs"]["content"]
    expected = target_logprobs(tiny_target, r["prompt_token_ids"], out)
    assert len(content) == len(out) == 12
    for entry, token, lp in zip(content, out, expected):
        top = lp.topk(5)
        assert entry["token"] == f"token_id:{token}" and entry["logprob"] == pytest.approx(float(lp[token]), abs=1e-4)
        assert [t["token"] for t in entry["top_logprobs"]] == [f"token_id:{i}" for i in top.indices.tolist()]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(top.values.tolist(), abs=1e-4)
    # streamed: the same entries, spread over the chunks that carry their tokens
    with httpx.stream("POST", served.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60) as resp:
        chunks = [c for c in sse(resp) if c["choices"]]
    streamed = sum((c["choices"][0]["logprobs"]["content"] for c in chunks if c["choices"][0]["logprobs"]), [])

    def flat(entries):           # (token, logprob) of every entry and its top list, in order
        return [(e["token"], e["logprob"]) for x in entries for e in (x, *x["top_logprobs"])]

    assert [t for t, _ in flat(streamed)] == [t for t, _ in flat(content)]   # the prefix cache may round apart
    assert [lp for _, lp in flat(streamed)] == pytest.approx([lp for _, lp in flat(content)], abs=1e-4)
    assert all(len(c["choices"][0]["logprobs"]["content"]) == len(c["choices"][0]["token_ids"]) for c in chunks[1:])
    # completions: `logprobs: k` gives k + 1 entries (the sampled token and the top k), strings as decoded
    r = httpx.post(served.url + "/v1/completions", timeout=60,
                   json={"prompt": r["prompt_token_ids"], "max_tokens": 12, "logprobs": 2}).json()
    lps = r["choices"][0]["logprobs"]
    assert lps["token_logprobs"] == pytest.approx([e["logprob"] for e in content], abs=1e-6)
    assert all(1 <= len(top) <= 3 for top in lps["top_logprobs"]) and len(lps["tokens"]) == 12
    plain = httpx.post(served.url + "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4}, timeout=60)
    assert plain.json()["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("body,match", [
    ({"logprobs": True, "top_logprobs": 21}, "between 0 and 20"),
    ({"logprobs": True, "top_logprobs": -1}, "between 0 and 20"),
    ({"logprobs": True, "top_logprobs": "5"}, "`top_logprobs` must be a number"),
    ({"logprobs": True, "top_logprobs": 2.5}, "`top_logprobs` must be an integer"),
    ({"logprobs": "yes"}, "`logprobs` must be true or false"),
    ({"top_logprobs": 3}, "`logprobs` must be set to true"),
    ({"prompt_logprobs": 1}, "prompt logprobs are not supported"),
])
def test_bad_logprob_requests_are_a_400_json_error(served, body, match):
    r = httpx.post(served.url + "/v1/chat/completions", json={"messages": MESSAGES, **body}, timeout=30)
    assert r.status_code == 400 and match in r.json()["error"]["message"]


@pytest.mark.parametrize("body,match", [
    ({"logprobs": 21}, "between 0 and 20"), ({"logprobs": True}, "`logprobs` must be a number"),
    ({"logprobs": 2, "top_logprobs": 2}, "completions take `logprobs`"),
])
def test_bad_completion_logprobs_are_a_400_json_error(served, body, match):
    r = httpx.post(served.url + "/v1/completions", json={"prompt": "a red fox", **body}, timeout=30)
    assert r.status_code == 400 and match in r.json()["error"]["message"]


@pytest.fixture(scope="module")
def sharp_target(tiny_target, tmp_path_factory):
    """The tiny target with its logits scaled up: its random weights otherwise give every request the same
    near-uniform entropy, so there would be no quartiles to rank."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("sharp-target") / "target"
    shutil.copytree(tiny_target, folder)
    weights = load_file(folder / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"] * 6.0
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_top_20_estimate_puts_requests_in_the_exact_entropy_quartiles(sharp_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    rng = random.Random(0)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(2, 12))) for _ in range(40)]
    requests = [ServerRequest(f"q{i}", [{"role": "user", "content": t}]) for i, t in enumerate(texts)]
    with SpecbenchServer(ServeConfig(target=str(sharp_target), method="ngram", budget=4, concurrency=8,
                                     max_model_len=256, dtype="float32", port=0, model_name="sharp")) as srv:
        answers = check_entropy.ask(srv.url, "sharp", requests, Settings("ngram", 4, 8, 24))
    assert all(len(a.positions) == 24 for a in answers)
    exact = [a.exact for a in answers]
    assert max(exact) - min(exact) > 1.0, "the requests must differ in entropy for quartiles to mean anything"
    table = check_entropy.agreement_table(answers, vocab_size=320)
    assert table[DEFAULT_TAIL]["agreement"] >= 0.95
    assert table[DEFAULT_TAIL]["agreement"] > table["one"]["agreement"]


def test_a_vllm_run_against_serve_records_the_exact_entropy_and_the_estimate(served, tiny_target, tmp_path):
    def run(out, *extra):
        res = CliRunner().invoke(app, ["run", "--engine", "vllm", "--endpoint", served.url, "--target",
                                       str(tiny_target), "--method", "ngram", "--budget", "4", "--limit", "4",
                                       "--max-new-tokens", "16", "--dtype", "float32", "--no-report", "--out",
                                       str(out), *extra])
        assert res.exit_code == 0, res.output
        return read_records(out), read_manifest(out)["method_config"]

    records, config = run(tmp_path / "inline")
    assert config["entropy"] == "inline" and config["entropy_top_logprobs"] == 20
    for r in records:
        assert r["entropy_source"] == "exact" and r["mean_entropy"] > 0
        assert 0 < r["entropy_estimate"] <= r["mean_entropy"] + 1e-4    # the capped tail is a lower bound
    records, config = run(tmp_path / "off", "--option", "entropy=off")
    assert config == {**config, "entropy": "off"} and "entropy_top_logprobs" not in config
    assert all(r["entropy_source"] == "exact" and "entropy_estimate" not in r for r in records)
    with pytest.raises(SpecbenchError, match="^--option entropy=maybe: expected one of inline, off$"):
        CliRunner().invoke(app, ["run", "--engine", "vllm", "--endpoint", served.url, "--target", str(tiny_target),
                                 "--option", "entropy=maybe", "--no-report", "--out", str(tmp_path / "bad")],
                           catch_exceptions=False)
    assert not (tmp_path / "bad").exists()
