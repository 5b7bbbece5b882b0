"""Adapter for SGLang: launch command per method, the native streaming /generate endpoint, and the
per-request speculative statistics SGLang puts in `meta_info`.

The launch command of each method (vanilla, sglang-ngram, eagle3, eagle4-chain, eagle4-tree, eagle4-harness,
dflash, dflash2, dspark) and its options follow SGLang 0.5.23's own argument rules: `runners/sglang_launch.py`.
eagle4-harness launches EAGLE3 with the (num_steps, topk, num_draft_tokens) the harness's planner compiles from
the server's cost table (`specbench calibrate --engine sglang`) for the run's --concurrency
(`harness_policy.sglang_policy`), so its launch command differs by concurrency and a compare launches it once per
concurrency (the runner reuses a server only for an unchanged command); a server with no table is refused in one
line naming the calibrate command. The manifest's method config holds the table's key and file and the shape.
Every option is checked against the method it is given to (`SglangRunner.check_options`). Between variants the runner
empties the server's radix cache (`flush_cache`: POST /flush_cache). Attached to a running server
(`--endpoint`), it reads the server's resolved arguments (GET /server_info; older servers answer only its
deprecated name /get_server_info) into `server_facts` and refuses a server whose speculative algorithm, draft
shape or tensor parallel size contradicts --method / --budget / --option tp (`sglang_launch.facts_mismatch`).
The DSpark ragged-verify mode is an environment variable that the server does not report: specbench sets it on
the servers it launches and cannot see it on one it attaches to.

Requests go to POST /generate with the chat template applied here (`input_ids`, so prompt tokens are exact),
`sampling_params` and `stream: true`. Each streamed event holds `output_ids` (the whole output so far, or
only the new ids when the server runs with --incremental-streaming-output; both are handled) and
`meta_info`; the final event's `meta_info` carries (python/sglang/srt/managers/tokenizer_manager.py,
`_calculate_spec_decoding_metrics`): `completion_tokens`, `spec_verify_ct` (verification steps),
`spec_num_correct_drafts` (older: `spec_accept_token_num`, `spec_accepted_drafts`), the proposed-draft count
(`spec_num_proposed_drafts`, older `spec_draft_token_num`), and `spec_accept_histogram` (newer alias
`spec_correct_drafts_histogram`): index j = steps that accepted exactly j drafts. The histogram becomes the
record's steps (order lost; `fit_steps` reconciles them with the output length); the sums over requests are
the run-level counters in the manifest (`engine_counters`), with the AL of both definitions
(`sglang_summary`: the project's, and SGLang's spec_accept_length).

Entropy (`--option entropy=inline`, the default): requests add `return_logprob: true, top_logprobs_num: 20`,
and `meta_info.output_top_logprobs` / `output_token_logprobs` (one row per output token: [logprob, token_id,
text]; python/sglang/srt/managers/tokenizer_manager.py `add_logprob_to_meta_info`) give each record's
`mean_entropy` as an estimate from the top 20 plus a tail (runners/server_entropy.py), with `entropy_source`
"top-20 logprobs"; the method config records `entropy`. Costs to know: in SGLang's default (cumulative)
streaming every event repeats the logprobs of the whole output so far, so a long output sends and parses
quadratically many of them (--incremental-streaming-output sends each once; both are read); and a sampled
run's logprobs are of the temperature-scaled distribution unless the server runs with
SGLANG_RETURN_ORIGINAL_LOGPROB=1 (python/sglang/srt/layers/sampler.py), so its entropies are the tempered
distribution's. `--option entropy=off` requests none and records no entropy.
"""

from __future__ import annotations

import json
import time
from typing import Any

from specbench.errors import SpecbenchError
from specbench.runners.server import (
    SERVER_OPTIONS, ServerRequest, ServerRunner, Session, Stream, describe_error, load_tokenizer, sse_events,
)
from specbench.runners.server_entropy import (
    DEFAULT_TOP_LOGPROBS, entropy_config, entropy_fields, entropy_mode, sglang_positions,
)
from specbench.runners.server_metrics import add_counters, design_al, steps_from_histogram
from specbench.runners.sglang_launch import (
    HARNESS, METHOD_SPECIFIC, METHODS, check_method, check_option, draft_tokens, facts_from_info, facts_mismatch,
    launch_command, spec_args, spec_env, tree_shape,
)
from specbench.settings import MethodSpec, Settings

ENGINE = "sglang"
# the server runners' options that every SGLang method takes (where the server runs, retries, entropy, ...)
COMMON_OPTIONS = tuple(k for k in SERVER_OPTIONS if k not in METHOD_SPECIFIC)
FLUSH_WAIT_S = 30              # how long SGLang may wait for running requests to finish before it flushes

ACCEPTED_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM_KEYS = ("spec_accept_histogram", "spec_correct_drafts_histogram")


def _first(meta: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if meta.get(k) is not None:
            return meta[k]
    return None


def parse_meta_info(meta: dict[str, Any], budget: int, n_output: int, method: str = "eagle3",
                    options: dict[str, Any] | None = None, shape: Any = None) -> dict[str, Any]:
    """Steps and counters from one request's final `meta_info` (`shape`: eagle4-harness's compiled tree shape).

    Returns {"steps", "steps_source", "counters"} where counters = {"verify_steps", "accepted_drafts",
    "proposed_drafts", "accept_histogram", "completion_tokens"} (None when the server gave no spec stats).
    """
    hist = _first(meta, HISTOGRAM_KEYS)
    verify = meta.get("spec_verify_ct")
    accepted = _first(meta, ACCEPTED_KEYS)
    proposed = _first(meta, PROPOSED_KEYS)
    completion = int(meta.get("completion_tokens", n_output))
    topk, depth = tree_shape(method, budget, options, shape)
    drafted = draft_tokens(method, budget, shape) - 1
    if hist:
        steps, source = steps_from_histogram([int(x) for x in hist], drafted, n_output, depth), "histogram"
        if accepted is None:
            accepted = sum(j * int(n) for j, n in enumerate(hist))
        if verify is None:
            verify = sum(int(n) for n in hist)
    else:
        steps, source = [], "none"
    counters = None
    if verify:
        counters = {"verify_steps": int(verify), "accepted_drafts": int(accepted or 0),
                    "proposed_drafts": int(proposed if proposed is not None else int(verify) * drafted),
                    "accept_histogram": [int(x) for x in (hist or [])], "completion_tokens": completion,
                    "requests": 1}
    return {"steps": steps, "steps_source": source, "counters": counters}


def sglang_summary(c: dict[str, Any]) -> dict[str, Any]:
    """AL and per-position rates from summed meta_info counters.

    `al` is the project's definition (`server_metrics.design_al`): output tokens after each request's first
    (its prefill's) / verify steps; `al_engine` is SGLang's own `spec_accept_length`, completion tokens / verify
    steps, the prefill token included. Per-position rates come from the summed acceptance histogram."""
    steps = c.get("verify_steps") or 0
    hist = c.get("accept_histogram") or []
    if not steps:
        return {"al": None, "al_engine": None, "acceptance_rate": None, "hit_rate_unconditional": [],
                "hit_rate_conditional": []}
    reach = [sum(hist[j:]) for j in range(1, len(hist))]          # steps reaching depth j
    prev = [sum(hist), *reach[:-1]]
    return {
        "al": design_al(c["completion_tokens"] - c.get("requests", 1), steps),
        "al_engine": c["completion_tokens"] / steps,
        "al_engine_definition": "SGLang spec_accept_length: completion tokens / verify steps",
        "acceptance_rate": c["accepted_drafts"] / c["proposed_drafts"] if c.get("proposed_drafts") else None,
        "hit_rate_unconditional": [r / steps for r in reach],
        "hit_rate_conditional": [r / p if p else None for r, p in zip(reach, prev)],
    }


class SglangRunner(ServerRunner):
    engine = ENGINE
    METHODS = METHODS
    extra = "sglang"
    SUMMARIES = {"sglang-ngram": "SGLang's NGRAM: drafts from a trie of the tokens every request on the server "
                                 "decoded (not prompt lookup)",
                 "dflash2": "a DFlash2 checkpoint: DFlash's block drafter plus a candidate selector",
                 HARNESS: "the calibrated EAGLE-2 tree shape per expected concurrency only (compiled from "
                          "`specbench calibrate --engine sglang`); per-step trees, lookup and datastore: reference "
                          "engine only"}
    counters_source = "SGLang meta_info: spec_verify_ct, accepted drafts and spec_accept_histogram summed over requests"

    def __init__(self, target: str, dtype: str = "auto", endpoint: str | None = None):
        super().__init__(target, dtype, endpoint)
        self._tokenizer: Any = None
        self._plans: dict[tuple[int, int, str], Any] = {}

    def build_launch_command(self, settings: Settings, args: dict[str, Any]) -> list[str]:
        """`launch_command`, with eagle4-harness's tree shape compiled for the run's concurrency."""
        return launch_command(**args, shape=self.harness_shape(settings))

    def harness_plan(self, settings: Settings) -> tuple[Any, list[list[float]], Any, Any]:
        """eagle4-harness's (TreeShape, acceptance by depth and rank, CostTable, table file) at the run's budget and
        concurrency for the server its options describe, compiled once; a server with no table is refused in one
        line naming the calibrate command (`server_calibrate.harness_table`). Torch-free, as vLLM's."""
        from specbench.runners.harness_policy import sglang_policy
        from specbench.runners.server_calibrate import harness_table

        opts = self._options(settings)
        memo = (settings.budget, settings.concurrency, json.dumps(opts, sort_keys=True, default=str))
        if memo not in self._plans:
            table, path = harness_table(self, opts, HARNESS)
            self._plans[memo] = (*sglang_policy(table, settings.budget, settings.concurrency), table, path)
        return self._plans[memo]

    def harness_shape(self, settings: Settings) -> Any:
        """The compiled tree shape of an eagle4-harness run (None for every other method)."""
        return self.harness_plan(settings)[0] if settings.method == HARNESS else None

    def method_config(self, settings: Settings) -> dict[str, Any]:
        opts = self._options(settings)
        shape, harness = None, {}
        if settings.method == HARNESS:
            from specbench.runners.harness_policy import HARNESS_PARTS

            shape, accept, table, path = self.harness_plan(settings)
            runs, left = HARNESS_PARTS[ENGINE]
            harness = {"harness": {"cost_table": table.key, "table_file": str(path), "table_created": table.created,
                                   **shape.manifest(settings.concurrency, accept), "runs_on_engine": runs,
                                   "not_on_engine": left}}
        return {"name": settings.method, "budget": settings.budget, "engine": ENGINE,
                "speculative_args": spec_args(settings.method, settings.budget, opts.get("drafter"), opts, shape),
                "server_env": spec_env(settings.method),
                "tensor_parallel_size": int(opts.get("tp", 1)), **entropy_config(opts), **harness}

    @classmethod
    def check_options(cls, methods: list[MethodSpec], shared: dict[str, Any]) -> None:
        """Refuse a method SGLang does not run, and any option no method it is given to reads: an entry's own
        options (`--methods m:key=...`) must be read by m, a shared `--option` by one of the compared methods
        (vanilla, which every comparison adds, counts only when it runs alone)."""
        for name, own in methods:
            check_method(name)
            for key in own:
                check_option(key, [name], f"--methods {name}:{key}=...", COMMON_OPTIONS)
        compared = [name for name, _ in methods if name != "vanilla"] or ["vanilla"]
        for key in shared:
            check_option(key, compared, f"--option {key}", COMMON_OPTIONS)
        # the server runner's own checks (fault options) on the options it knows
        known = [(name, {k: v for k, v in own.items() if k in SERVER_OPTIONS}) for name, own in methods]
        super().check_options(known, {k: v for k, v in shared.items() if k in SERVER_OPTIONS})

    def server_info(self, base: str) -> tuple[dict[str, Any] | None, str | None]:
        """The server's resolved arguments and the route that gave them: GET /server_info (SGLang 0.5.23), else
        /get_server_info (its older name); (None, None) from a server with neither. HTTP 5xx is one line."""
        for route in ("/server_info", "/get_server_info"):
            url = base + route
            status, info, text = self.get_json(url)
            if status >= 500:
                raise SpecbenchError(f"GET {url} answered HTTP {status} ({text or 'no body'}); see the server's log")
            if status == 200 and isinstance(info, dict):
                return info, f"GET {route}"
        return None, None

    def server_facts(self, base: str) -> dict[str, Any]:
        """What the server says it runs: {"engine_version", "tensor_parallel_size", "speculative": {"enabled",
        "algorithm", "num_draft_tokens", "num_steps", "eagle_topk", "draft_model_path", "dflash_block_size",
        "dspark_block_size", "dspark_sps_table_path", "ngram_*", "source"}}, None where it does not say
        (`sglang_launch.facts_from_info`)."""
        return facts_from_info(*self.server_info(base))

    def check_server(self, base: str, session: Session) -> None:
        """Refuse a server whose speculative algorithm, draft shape or tensor parallel size contradicts this run,
        and one whose info route fails (HTTP 5xx); a server that reports nothing is taken as it is."""
        s = session.settings
        clash = facts_mismatch(self._facts, s.method, s.budget, self._options(s), self.harness_shape(s))
        if clash:
            raise SpecbenchError(f"{base} {clash}")

    def flush_cache(self, base: str) -> None:
        """Empty the server's radix cache (and the NGRAM trie): POST /flush_cache, which SGLang runs only on an
        idle server, here after waiting up to FLUSH_WAIT_S for running requests to finish
        (entrypoints/http_server.py `flush_cache`, managers/scheduler_components/flush_wrapper.py); it answers
        HTTP 400 when it did not flush."""
        url = f"{base}/flush_cache?timeout={FLUSH_WAIT_S}"
        try:
            resp = self.httpx.post(url, timeout=FLUSH_WAIT_S + 30)
        except self.httpx.HTTPError as err:
            raise SpecbenchError(f"POST {url}: no answer ({describe_error(err)})") from None
        if resp.status_code != 200:
            raise SpecbenchError(f"POST {url} answered HTTP {resp.status_code} "
                                 f"({' '.join(resp.text.split())[:200] or 'no body'}): the cache was not flushed")

    def prepare_requests(self, requests: list[ServerRequest]) -> None:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.target_spec)
        for r in requests:
            if r.prompt_ids is None:
                r.prompt_ids = list(self._tokenizer.apply_chat_template(
                    r.messages, add_generation_prompt=True, tokenize=True, return_dict=False))

    def _body(self, req: ServerRequest, settings: Settings) -> dict[str, Any]:
        sampling: dict[str, Any] = {"max_new_tokens": settings.max_new_tokens, "temperature": settings.temperature,
                                    "top_p": settings.top_p}
        if settings.top_k:
            sampling["top_k"] = settings.top_k
        if settings.temperature > 0:
            sampling["sampling_seed"] = settings.seed          # SGLang's per-request seed (SamplingParams)
        # --option request_extra: merged into the body, its sampling_params into the body's (where SGLang reads
        # ignore_eos and the other sampling fields: srt/sampling/sampling_params.py)
        extra = dict(self._options(settings).get("request_extra") or {})
        sampling.update(extra.pop("sampling_params", None) or {})
        body = {"input_ids": req.prompt_ids, "sampling_params": sampling, "stream": True}
        if entropy_mode(self._options(settings)) == "inline":
            body.update(return_logprob=True, top_logprobs_num=DEFAULT_TOP_LOGPROBS)
        body.update(extra)
        return body

    async def one(self, client: Any, base: str, session: Session, req: ServerRequest) -> dict[str, Any]:
        settings = session.settings
        st = Stream(t_start=time.time())
        ids: list[int] = []
        meta: dict[str, Any] = {}
        top: list[Any] = []                                 # output_top_logprobs rows, one per output token
        chosen: list[Any] = []                              # output_token_logprobs, likewise
        async for event in sse_events(client, base + "/generate", self._body(req, settings),
                                      session.faults.stall_timeout):
            t = time.time()
            meta = event.get("meta_info") or meta
            new = list(event.get("output_ids") or [])
            total = meta.get("completion_tokens")
            if total is not None and len(new) == int(total) and len(new) >= len(ids):
                grew = len(new) > len(ids)
                ids = new                                   # cumulative output_ids (the default)
                top = meta.get("output_top_logprobs") or top
                chosen = meta.get("output_token_logprobs") or chosen
            else:
                grew = bool(new)
                ids = ids + new                             # --incremental-streaming-output
                top += (event.get("meta_info") or {}).get("output_top_logprobs") or []
                chosen += (event.get("meta_info") or {}).get("output_token_logprobs") or []
            if grew:
                st.got_output(t)
        st.t_end = time.time()
        parsed = parse_meta_info(meta, settings.budget, len(ids), settings.method, self._options(settings),
                                 self.harness_shape(settings))
        st.extra = {"meta": meta, "parsed": parsed, "logprobs": sglang_positions(top, chosen)}
        rec = self.record(req, settings, st, ids)
        return rec

    def record(self, req: ServerRequest, settings: Settings, st: Stream, ids: list[int]) -> dict[str, Any]:
        meta, parsed = st.extra["meta"], st.extra["parsed"]
        finish = meta.get("finish_reason")
        t_first = st.t_first or st.t_end
        spec = {k: meta[k] for k in meta if k.startswith("spec_")}
        return {
            "question_id": req.id, "category": req.meta.get("category", ""), "method": settings.method,
            "concurrency": settings.concurrency, "status": "ok", "error": "",
            "prompt_token_ids": req.prompt_ids or [], "output_token_ids": ids,
            "output_text": self._tokenizer.decode(ids, skip_special_tokens=True) if self._tokenizer else "",
            "steps": parsed["steps"], **entropy_fields(None, st.extra.get("logprobs")),
            "t_start": st.t_start, "t_end": st.t_end, "ttft_s": t_first - st.t_start,
            "latency_s": (st.t_last or st.t_end) - st.t_start, "itl_s": st.itl_s(),
            "steps_source": parsed["steps_source"],
            "finish_reason": finish.get("type") if isinstance(finish, dict) else finish,
            "engine_spec": spec, "spec_counters": parsed["counters"],
        }

    async def after_block(self, client: Any, base: str, session: Session, state: Any,
                          records: list[dict[str, Any]]) -> None:
        for rec in records:
            c = rec.get("spec_counters")
            if rec["status"] == "ok" and c:
                session.counters = add_counters(session.counters, c)

    def summarize_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        return sglang_summary(counters)
