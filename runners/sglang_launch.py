"""SGLang 0.5.23's launch flags for specbench's methods, and what a running SGLang server must report to match them.

Launch command (`launch_command`): `python -m sglang.launch_server --model-path TARGET --tensor-parallel-size N`
plus, per method, the flags below. SGLang's `--speculative-num-draft-tokens` counts the root, so it is budget L
itself. Each rule names the SGLang file it follows (paths under python/sglang/srt/); tests/runners/
test_sglang_args.py feeds every command through SGLang 0.5.23's own parser and speculative checks.

    vanilla        nothing
    sglang-ngram   --speculative-algorithm NGRAM --speculative-num-draft-tokens L, plus SGLang's own n-gram
                   knobs where given (--option max_bfs_breadth, min_bfs_breadth, max_trie_depth, capacity,
                   match_type). SGLang's NGRAM drafts from a trie of the recent tokens of every request the
                   server has decoded (speculative/ngram_worker.py `_update_ngram_corpus`), not from the
                   request's own prompt, so it is not specbench's `ngram` (prompt lookup), which SGLang refuses.
                   It has no n-gram size bounds: max_n / min_n are refused (max_trie_depth bounds the match
                   plus the draft).
    eagle3, eagle4-chain
                   --speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFTER
                   --speculative-num-steps L-1 --speculative-eagle-topk 1 --speculative-num-draft-tokens L
    eagle4-tree    the same with --speculative-eagle-topk min(8, L-1) (--option top_k, depth override the
                   EAGLE-2 defaults); the tree must hold L-1 candidates (speculative/eagle_utils.py
                   `organize_draft_results` takes the top L-1 of topk + (steps-1) * topk^2)
    eagle4-harness the same EAGLE3 flags with the shape the harness's planner compiles from the server's cost
                   table for the run's concurrency (`specbench calibrate --engine sglang`,
                   `runners.harness_policy.sglang_shape`): --speculative-num-steps S --speculative-eagle-topk T
                   --speculative-num-draft-tokens N, N <= L (with T = 1, N = S + 1, as
                   arg_groups/speculative_hook.py `_handle_eagle_family` sets it); refused in one line when the
                   server has no table. One launch serves one expected concurrency.
    dflash, dflash2
                   --speculative-algorithm DFLASH --speculative-draft-model-path DRAFTER
                   --speculative-dflash-block-size L --speculative-num-draft-tokens L (equal, or SGLang
                   refuses: arg_groups/speculative_hook.py `_handle_dflash`). DFlash2 is a draft architecture
                   that SGLang runs on the DFLASH worker (models/dflash.py `DFlash2DraftModel`: the DFlash
                   backbone plus a candidate selector), so the two differ only in the checkpoint, which is
                   checked where it is a local folder. SGLang picks the draft's attention backend itself
                   (`_resolve_dflash_draft_attention_backend`) and needs no batching flag; the DFlash authors'
                   hardware-specific --attention-backend choices go through --option server_args.
    dspark         SGLANG_RAGGED_VERIFY_MODE=compact, --speculative-algorithm DSPARK
                   --speculative-draft-model-path DRAFTER --speculative-dspark-block-size L-1
                   --speculative-num-draft-tokens L --speculative-dspark-sps-table-path TABLE
                   (`_handle_dspark`: num-draft-tokens must equal gamma + 1, gamma from the block size or else
                   the checkpoint). The confidence-gated DSpark verifies a per-request number of tokens only
                   when the ragged-verify scheduler runs (speculative/dspark_components/dspark_planner.py: the
                   default mode `static` verifies all) and has a profiled SPS cost table (without one "the
                   budget degenerates to verify-all", arg_groups/fields/spec.py), so --option sps_table=PATH
                   is required: build it with `python -m sglang.benchmark.dspark_sps_profiler`. --option
                   sts_table=PATH adds the optional confidence calibration.

The environment a method needs (`spec_env`) leads the command as `env K=V`, so it is one argv list to launch
and one shell line to print. Every option is checked against the method it is given to (`check_option`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError

ENGINE_VERSION = "0.5.23"             # the SGLang release these flags follow
MODULE = "sglang.launch_server"

# specbench method -> SGLang --speculative-algorithm (None: no speculation)
METHOD_ALGORITHM: dict[str, str | None] = {
    "vanilla": None, "sglang-ngram": "NGRAM", "eagle3": "EAGLE3", "eagle4-chain": "EAGLE3", "eagle4-tree": "EAGLE3",
    "eagle4-harness": "EAGLE3", "dflash": "DFLASH", "dflash2": "DFLASH", "dspark": "DSPARK"}
METHODS = tuple(METHOD_ALGORITHM)

# SGLang's n-gram knobs (arg_groups/fields/spec.py): --option name -> (flag, kind); kind an int's least value
# or the allowed words
NGRAM_OPTIONS: dict[str, tuple[str, int | tuple[str, ...]]] = {
    "max_bfs_breadth": ("--speculative-ngram-max-bfs-breadth", 1),
    "min_bfs_breadth": ("--speculative-ngram-min-bfs-breadth", 1),
    "max_trie_depth": ("--speculative-ngram-max-trie-depth", 2),     # ngram.cpp: "must be greater than 1"
    "capacity": ("--speculative-ngram-capacity", 1),
    "match_type": ("--speculative-ngram-match-type", ("BFS", "PROB")),
}
# the options each method reads beyond those every server method takes (port, tp, retries, ...)
METHOD_OPTIONS: dict[str, tuple[str, ...]] = {
    "vanilla": (), "sglang-ngram": tuple(NGRAM_OPTIONS), "eagle3": ("drafter",), "eagle4-chain": ("drafter",),
    "eagle4-tree": ("drafter", "top_k", "depth"), "eagle4-harness": ("drafter",), "dflash": ("drafter",),
    "dflash2": ("drafter",),
    "dspark": ("drafter", "sps_table", "sts_table")}
# the server runners' method options (runners/server.py SERVER_OPTIONS) that no SGLang method reads, and why
NOT_ON_SGLANG = {
    "max_n": "SGLang's NGRAM has no n-gram size bounds; --option max_trie_depth bounds its match plus draft",
    "min_n": "SGLang's NGRAM has no n-gram size bounds; --option max_trie_depth bounds its match plus draft",
    "matches": "SGLang's NGRAM tree width is --option max_bfs_breadth",
    "token_cost": "only vLLM's harness-retrieval proposer reads it",
    "datastore": "only vLLM's harness-retrieval proposer reads it",
}
METHOD_SPECIFIC = frozenset({*NOT_ON_SGLANG, *(k for keys in METHOD_OPTIONS.values() for k in keys)})
REFUSED_METHODS = {
    "ngram": "is prompt lookup, which SGLang does not have; SGLang's NGRAM (a trie over the tokens of every "
             "request the server decoded) runs as --method sglang-ngram",
}
HARNESS = "eagle4-harness"
# models/dflash.py EntryClass: the DFlash2 architectures (a selector on the DFlash backbone)
DFLASH2_ARCHITECTURES = frozenset({"DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"})
# speculative/ragged_verify.py: the mode whose budget planner packs each request's verify length
DSPARK_ENV = {"SGLANG_RAGGED_VERIFY_MODE": "compact"}


def check_method(method: str) -> None:
    """Refuse a method SGLang does not run, in one line naming what runs instead."""
    if method in REFUSED_METHODS:
        raise SpecbenchError(f"--method {method} {REFUSED_METHODS[method]}")
    if method not in METHOD_ALGORITHM:
        raise SpecbenchError(f"--method {method!r} does not run on SGLang (choose from {', '.join(METHODS)})")


def check_option(key: str, methods: list[str], flag: str, common: tuple[str, ...]) -> None:
    """Refuse `key` unless one of `methods` reads it: `common` holds the options every method takes."""
    if key in NOT_ON_SGLANG:
        raise SpecbenchError(f"{flag}: not on SGLang ({NOT_ON_SGLANG[key]})")
    if key in common or any(key in METHOD_OPTIONS[m] for m in methods):
        return
    own = sorted({k for m in methods for k in METHOD_OPTIONS[m]})
    readers = [m for m, keys in METHOD_OPTIONS.items() if key in keys]
    raise SpecbenchError(f"{flag}: --method {', '.join(methods)} on SGLang takes no option {key!r}"
                         + (f" (only {', '.join(readers)} does)" if readers else "")
                         + f"; it takes {', '.join(own + list(common))}")


def option_value(options: dict[str, Any], key: str, default: Any, kind: int | tuple[str, ...]) -> Any:
    """`options[key]` (or `default`) as an integer of at least `kind`, or one of the words `kind`; anything
    else is a one-line error naming the option."""
    value = options.get(key, default)
    if isinstance(kind, tuple):
        if value not in kind:
            raise SpecbenchError(f"--option {key}={value}: expected one of {', '.join(kind)}")
        return value
    if isinstance(value, bool) or not str(value).lstrip("-").isdigit() or int(value) < kind:
        raise SpecbenchError(f"--option {key}={value}: expected an integer >= {kind}")
    return int(value)


def tree_shape(method: str, budget: int, options: dict[str, Any] | None = None,
               shape: Any = None) -> tuple[int, int]:
    """(topk, num_steps) of the EAGLE draft for a method at budget L; a tree too small to hold L-1 candidates
    is refused (SGLang would fail its first step). eagle4-harness takes them from its compiled `shape`."""
    options = options or {}
    n = budget - 1
    if method == HARNESS:
        return harness_shape(shape)[:2]
    if method != "eagle4-tree":
        return 1, n
    topk = option_value(options, "top_k", min(8, n), 1)
    steps = option_value(options, "depth", n, 1)
    if topk + (steps - 1) * topk * topk < n:
        raise SpecbenchError(f"--option top_k={topk} depth={steps}: an EAGLE tree of that shape holds "
                             f"{topk + (steps - 1) * topk * topk} candidates, fewer than the {n} drafts "
                             f"--budget {budget} verifies")
    return topk, steps


def harness_shape(shape: Any) -> tuple[int, int, int]:
    """(topk, num_steps, num_draft_tokens) of eagle4-harness's compiled shape (`harness_policy.TreeShape`); without
    one (no cost table for the server) a one-line refusal naming the command that makes one."""
    if shape is None:
        raise SpecbenchError(f"--method {HARNESS} on SGLang launches with a shape compiled from the server's cost "
                             "table: run `specbench calibrate --engine sglang --target T --drafter D` first")
    return shape.topk, shape.num_steps, shape.num_draft_tokens


def draft_tokens(method: str, budget: int, shape: Any = None) -> int:
    """--speculative-num-draft-tokens of a method at budget L: L itself (the root counted), or the harness's
    compiled num_draft_tokens (<= L)."""
    return harness_shape(shape)[2] if method == HARNESS else budget


def ngram_values(options: dict[str, Any]) -> dict[str, Any]:
    """The n-gram knobs the options set, checked (SGLang's defaults stand for the others)."""
    values = {key: option_value(options, key, None, kind) for key, (_, kind) in NGRAM_OPTIONS.items()
              if key in options}
    low, high = values.get("min_bfs_breadth", 1), values.get("max_bfs_breadth", 10)     # fields/spec.py defaults
    if low > high:                                                    # ngram.cpp: min <= max breadth
        raise SpecbenchError(f"--option min_bfs_breadth={low} is above max_bfs_breadth={high}")
    return values


def ngram_args(options: dict[str, Any]) -> list[str]:
    """The n-gram flags the options ask for."""
    return [a for key, value in ngram_values(options).items() for a in (NGRAM_OPTIONS[key][0], str(value))]


def check_drafter(method: str, drafter: str) -> None:
    """Refuse a local checkpoint that would make SGLang run another method than `method`: DFlash and DFlash2
    share the DFLASH algorithm and differ only in the checkpoint's architecture."""
    config = Path(drafter) / "config.json"
    if method not in ("dflash", "dflash2") or not config.is_file():
        return
    try:
        archs = set(json.loads(config.read_text()).get("architectures") or [])
    except (ValueError, OSError, AttributeError):
        raise SpecbenchError(f"{config}: not a readable JSON config") from None
    if method == "dflash2" and not archs & DFLASH2_ARCHITECTURES:
        raise SpecbenchError(f"--option drafter={drafter}: --method dflash2 needs a DFlash2 checkpoint "
                             f"(architectures {', '.join(sorted(DFLASH2_ARCHITECTURES))}), this one declares "
                             f"{', '.join(sorted(archs)) or 'none'}; run it as --method dflash")
    if method == "dflash" and archs & DFLASH2_ARCHITECTURES:
        raise SpecbenchError(f"--option drafter={drafter} is a DFlash2 checkpoint ({', '.join(sorted(archs))}); "
                             "run it as --method dflash2")


def spec_args(method: str, budget: int, drafter: str | None = None, options: dict[str, Any] | None = None,
              shape: Any = None) -> list[str]:
    """SGLang's speculative flags for a specbench method at budget L (empty for vanilla); eagle4-harness takes its
    compiled `shape` (`harness_policy.TreeShape`)."""
    options = options or {}
    check_method(method)
    algorithm = METHOD_ALGORITHM[method]
    if algorithm is None:
        return []
    if budget < 2:
        raise SpecbenchError(f"--method {method} needs --budget >= 2 (L = drafted tokens + 1)")
    L = str(budget)
    if algorithm == "NGRAM":
        return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", L, *ngram_args(options)]
    if not drafter:
        raise SpecbenchError(f"--method {method} on SGLang needs the draft checkpoint: --option drafter=PATH")
    check_drafter(method, str(drafter))
    args = ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(drafter)]
    if algorithm == "EAGLE3":
        topk, steps = tree_shape(method, budget, options, shape)
        return args + ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                       "--speculative-num-draft-tokens", str(draft_tokens(method, budget, shape))]
    if algorithm == "DFLASH":
        return args + ["--speculative-dflash-block-size", L, "--speculative-num-draft-tokens", L]
    if not options.get("sps_table"):
        raise SpecbenchError("--method dspark on SGLang needs a profiled SPS cost table, --option sps_table=PATH "
                             "(python -m sglang.benchmark.dspark_sps_profiler builds one): without it SGLang "
                             "verifies every drafted token, which is not DSpark's confidence-gated verification")
    args += ["--speculative-dspark-block-size", str(budget - 1), "--speculative-num-draft-tokens", L,
             "--speculative-dspark-sps-table-path", str(options["sps_table"])]
    if options.get("sts_table"):
        args += ["--speculative-dspark-confidence-sts-path", str(options["sts_table"])]
    return args


def spec_env(method: str) -> dict[str, str]:
    """The environment SGLang reads for a method's speculation (set on the server's command line)."""
    return dict(DSPARK_ENV) if method == "dspark" else {}


def launch_command(target: str, method: str, budget: int, *, tp: int = 1, drafter: str | None = None,
                   host: str = "127.0.0.1", port: int = 30000, dtype: str = "auto",
                   max_model_len: int | None = None, python: str = "python",
                   extra: list[str] | tuple[str, ...] = (), options: dict[str, Any] | None = None,
                   shape: Any = None) -> list[str]:
    """The SGLang server command for one method (argv list; `runners.server.shell_join` prints it); `shape` is
    eagle4-harness's compiled tree shape."""
    spec = spec_args(method, budget, drafter, options, shape)
    env = [f"{k}={v}" for k, v in spec_env(method).items()]
    cmd = (["env", *env] if env else []) + [
        python, "-m", MODULE, "--model-path", str(target), "--host", host, "--port", str(port),
        "--tensor-parallel-size", str(option_value({"tp": tp}, "tp", 1, 1)), "--dtype", dtype]
    if max_model_len:
        cmd += ["--context-length", str(max_model_len)]
    return cmd + spec + list(extra)


# What `server_facts` reports of a server's speculation: ServerArgs fields (`speculative_<name>`) that decide it.
SPEC_FACTS = ("algorithm", "num_draft_tokens", "num_steps", "eagle_topk", "draft_model_path", "dflash_block_size",
              "dspark_block_size", "dspark_sps_table_path", *(f"ngram_{k}" for k in NGRAM_OPTIONS))


def facts_from_info(info: dict[str, Any] | None, source: str | None) -> dict[str, Any]:
    """`server_facts` from SGLang's server info: its resolved ServerArgs plus "version" (entrypoints/http_server.py
    `server_info`, utils/common.py `build_server_info`; SGLang 0.5.23 has no /version route, the version rides
    here). `speculative.enabled` is None when the server did not report its algorithm, and every value None that
    it did not report."""
    info = info if isinstance(info, dict) else {}
    speculative = {name: info.get(f"speculative_{name}") for name in SPEC_FACTS}
    reported = "speculative_algorithm" in info
    speculative.update(enabled=bool(speculative["algorithm"]) if reported else None, source=source)
    return {"engine_version": info.get("version"), "tensor_parallel_size": info.get("tp_size"),
            "speculative": speculative}


def facts_mismatch(facts: dict[str, Any], method: str, budget: int, options: dict[str, Any],
                   shape: Any = None) -> str | None:
    """What a server's facts contradict of this run (--method, --budget, the options that shape the draft,
    --option tp, eagle4-harness's compiled `shape`), in words, or None when they agree or the server does not say."""
    spec = facts["speculative"]
    want, have = METHOD_ALGORITHM.get(method), spec["algorithm"]
    tp = facts["tensor_parallel_size"]
    if "tp" in options and tp is not None and int(tp) != option_value(options, "tp", 1, 1):
        return f"runs tensor parallel size {tp}, but this run has --option tp={options['tp']}"
    if want is None:
        return f"runs speculative algorithm {have}, but this run is --method {method}" if have else None
    if spec["enabled"] is False:
        return f"runs no speculative decoding, but this run is --method {method} --budget {budget}"
    if have and str(have).upper() != want:
        return f"runs speculative algorithm {have}, but --method {method} is SGLang's {want}"
    width, wanted = spec["num_draft_tokens"], draft_tokens(method, budget, shape)
    if str(width).isdigit() and int(width) != wanted:
        return (f"verifies {width} tokens per step (speculative_num_draft_tokens), "
                f"but this run has --budget {budget}"
                + (f" compiled to {wanted} (its cost table's shape)" if method == HARNESS else ""))
    expected: dict[str, Any] = {}
    if want == "EAGLE3":
        expected["eagle_topk"], expected["num_steps"] = tree_shape(method, budget, options, shape)
    if want == "NGRAM":
        expected.update({f"ngram_{k}": v for k, v in ngram_values(options).items()})
    for name, value in expected.items():
        if spec[name] is not None and str(spec[name]) != str(value):
            return f"runs speculative_{name}={spec[name]}, but --method {method} --budget {budget} needs {value}"
    if want == "DSPARK" and spec["enabled"] and not spec["dspark_sps_table_path"]:
        return ("runs DSpark without an SPS cost table (speculative_dspark_sps_table_path is null), so it verifies "
                "every drafted token: not the confidence-gated dspark")
    return None
