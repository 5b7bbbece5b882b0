"""`specbench serve`: the reference engine behind an OpenAI-compatible API with vLLM's counters."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from reference_eagle4.engine import PENDING, Engine, GenerationConfig, Request
from reference_eagle4.model import load_transformer
from reference_eagle4.proposers import PROPOSERS
from specbench.runners.server_metrics import parse_spec_counters

STEP_TIMES = ("draft_ms", "verify_ms")
MESSAGES = [{"role": "system", "content": "write a prompt"}, {"role": "user", "content": "a red fox jumps"}]


# -- the engine's serving hooks ------------------------------------------------------------------------------

def test_engine_accepts_requests_that_arrive_while_it_runs(tiny_target):
    """A source yielding PENDING keeps the step loop going; on_progress streams; per-request output caps."""
    target = load_transformer(tiny_target)

    def engine():
        return Engine(target, PROPOSERS["ngram"](budget=4), GenerationConfig(16, concurrency=2), max_len=128)

    reqs = [Request(f"q{i}", [5 + i, 40, 41, 5 + i, 40], max_new_tokens=None if i else 9) for i in range(3)]
    plain: dict = {}
    engine().generate(reqs, lambda s: plain.__setitem__(s.request.id, list(s.output)))

    def trickle():                                 # q0 now, q1 after a few steps, q2 later still
        yield reqs[0]
        for _ in range(3):
            yield PENDING
        yield reqs[1]
        for _ in range(5):
            yield PENDING
        yield reqs[2]

    done, streamed = {}, {}
    engine().generate(trickle(), lambda s: done.__setitem__(s.request.id, list(s.output)),
                      lambda s: streamed.__setitem__(s.request.id, list(s.output)))
    assert done == plain == streamed
    assert len(done["q0"]) == 9 and len(done["q1"]) == 16


# -- the HTTP server ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tiny_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    srv = SpecbenchServer(ServeConfig(target=str(tiny_target), method="ngram", budget=4, concurrency=4,
                                      max_model_len=256, dtype="float32", port=0, model_name="tiny")).start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def reference_output(tiny_target):
    """What the in-process engine outputs for MESSAGES (24 tokens)."""
    from specbench.runners.reference.runner import ReferenceRunner
    from specbench.settings import Settings

    runner = ReferenceRunner(str(tiny_target), "float32")
    ids = runner.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    req = Request("x", list(ids))
    out = {}
    runner.make_engine(Settings("ngram", 4, max_new_tokens=24), 256).generate([req], lambda s: out.update(seq=s))
    return list(ids), out["seq"]


def sse(resp):
    events = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


def spec_counters(url):
    return parse_spec_counters(httpx.get(url + "/metrics").text)


def test_health_models_and_metrics(server):
    """/metrics parses with prometheus_client into counter families whose samples carry vLLM's `_total` names."""
    from prometheus_client.parser import text_string_to_metric_families

    assert httpx.get(server.url + "/health").status_code == 200
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert card["id"] == "tiny" and card["specbench"]["method"] == "ngram" and card["specbench"]["budget"] == 4
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(server.url + "/metrics").text)}
    assert all(f.type in ("counter", "gauge") for f in families.values())          # no `unknown` family
    for name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success"):
        assert families[name].type == "counter" and families[name].samples
        assert {s.name for s in families[name].samples} == {name + "_total"}
    per_pos = families["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
    assert [s.labels["position"] for s in per_pos] == ["0", "1", "2"]
    assert families["vllm:num_requests_running"].type == "gauge"


def test_chat_completion_equals_the_engine_and_counts_like_vllm(server, reference_output):
    prompt_ids, seq = reference_output
    before = spec_counters(server.url)
    r = httpx.post(server.url + "/v1/chat/completions", timeout=60,
                   json={"model": "tiny", "messages": MESSAGES, "max_tokens": 24, "temperature": 0,
                         "return_token_ids": True})
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["token_ids"] == seq.output and body["prompt_token_ids"] == prompt_ids
    assert choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 24
    served = body["metrics"]["specbench"]["steps"]
    untimed = lambda steps: [{k: v for k, v in st.items() if k not in STEP_TIMES} for st in steps]  # noqa: E731
    assert untimed(served) == untimed(seq.steps)           # the same steps; their wall times differ run to run
    assert all(st.keys() >= set(STEP_TIMES) for st in served)
    spec = body["metrics"]["speculative_decoding"]
    drafting = [s for s in seq.steps if s["drafted"] > 0]
    assert spec["num_spec_steps"] == len(drafting) > 0
    assert spec["per_step_accepted"] == [s["accepted"] for s in drafting]
    assert spec["num_accepted_draft_tokens"] == sum(spec["per_step_accepted"])
    assert spec["num_spec_steps"] == sum(spec["acceptance_histogram"]) and spec["num_spec_tokens"] == 3
    after = spec_counters(server.url)
    assert after["num_drafts"] - before["num_drafts"] == spec["num_spec_steps"]
    assert after["num_draft_tokens"] - before["num_draft_tokens"] == spec["num_draft_tokens"]
    assert after["num_accepted_tokens"] - before["num_accepted_tokens"] == spec["num_accepted_draft_tokens"]
    per_pos = [a - b for a, b in zip(after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"])]
    assert per_pos == [sum(s["accepted"] > i for s in drafting) for i in range(3)]


def test_streaming_chat_and_completions(server, reference_output, tiny_target):
    prompt_ids, seq = reference_output
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=60,
                      json={"messages": MESSAGES, "max_tokens": 24, "stream": True, "return_token_ids": True,
                            "stream_options": {"include_usage": True}}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"] == "text/event-stream"
        events = sse(resp)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"]["role"] == "assistant" and events[0]["prompt_token_ids"] == prompt_ids
    chunks = [e for e in events[:-1] if e["choices"]]
    assert sum((c["choices"][0]["token_ids"] for c in chunks), []) == seq.output
    assert len([c for c in chunks if c["choices"][0]["token_ids"]]) > 2          # streamed step by step
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    from transformers import AutoTokenizer

    assert text == AutoTokenizer.from_pretrained(tiny_target).decode(seq.output, skip_special_tokens=True)
    final = events[-2]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 24
    assert final["metrics"]["speculative_decoding"]["num_spec_steps"] > 0
    # /v1/completions with token ids as the prompt: the same continuation
    r = httpx.post(server.url + "/v1/completions", timeout=60,
                   json={"prompt": prompt_ids, "max_tokens": 24, "return_token_ids": True})
    assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == seq.output
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60,
                      json={"prompt": prompt_ids, "max_tokens": 5, "stream": True, "return_token_ids": True}) as resp:
        events = sse(resp)
    assert sum((e["choices"][0]["token_ids"] for e in events[:-1]), []) == seq.output[:5]


def test_concurrent_requests_join_the_running_batch(server, reference_output):
    _, seq = reference_output
    results, errors = {}, []

    def call(i):
        time.sleep(0.02 * i)                                     # staggered: they arrive while others run
        try:
            r = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                           json={"messages": MESSAGES, "max_tokens": 24, "return_token_ids": True})
            results[i] = r.json()["choices"][0]["token_ids"]
        except Exception as err:                                 # surfaced by the assert below
            errors.append(err)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 6
    assert all(out == seq.output for out in results.values())


@pytest.mark.parametrize("body,status,match", [
    ({"messages": MESSAGES, "temperature": 0.7}, 400, "temperature=0.0"),
    ({"messages": MESSAGES, "max_tokens": 10_000}, 400, "maximum context length is"),
    ({"messages": MESSAGES, "n": 2}, 400, "one choice"),
    ({"messages": MESSAGES, "stop": ["\n"]}, 400, "stop"),
    ({"messages": MESSAGES, "model": "gpt-4"}, 404, "does not exist"),
    ({"messages": []}, 400, "messages"),
])
def test_requests_it_cannot_honour_are_refused(server, body, status, match):
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == status and match in r.json()["error"]["message"]


def test_vanilla_server_exposes_no_spec_counters(tiny_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    with SpecbenchServer(ServeConfig(target=str(tiny_target), method="vanilla", budget=1, concurrency=1,
                                     max_model_len=128, dtype="float32", port=0)) as srv:
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "a red fox", "max_tokens": 4}, timeout=60)
        assert r.status_code == 200 and r.json()["metrics"]["speculative_decoding"] is None
        assert spec_counters(srv.url) is None
        assert "vllm:generation_tokens_total" in httpx.get(srv.url + "/metrics").text
