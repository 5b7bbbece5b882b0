"""`specbench engines preset`: the launch commands of a vLLM or SGLang server for a method, on a known hardware
preset, and the `specbench run` commands that benchmark it.

For `--method eagle4-harness` it prints one script a user runs on a node of the preset: calibrate the server's cost
table (`specbench calibrate --engine vllm|sglang`), print the serve command compiled from it (`--serve`, which reads
the table on that node), one harness run, and the seed comparison (harness, DSpark, DFlash2 and the EAGLE-4 chain
with vanilla, L = 8 and 16, C = 1 and 8, both prompt sets, three interleaved repeats). On vLLM the harness is a
batch-aware chain (one serve command covers every batch size); on SGLang it is a tree shape compiled for one
expected concurrency (`harness_policy.sglang_shape`), so the script prints one serve command per concurrency of the
preset (`--serve --concurrency C`), and SGLang's DSpark takes its profiled SPS table from $SPS_TABLE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import typer
from rich.console import Console

from specbench.errors import SpecbenchError

console = Console(soft_wrap=True, highlight=False)
app = typer.Typer(help="Launch commands for vLLM / SGLang servers and the specbench runs against them.",
                  no_args_is_help=True)

DRAFTER_METHODS = ("eagle3", "eagle4-chain", "eagle4-tree", "dflash", "dspark", "draft_model")
HARNESS = "eagle4-harness"
# the seed comparison: each method with the placeholder of its checkpoint (the harness plans with the chain's drafter)
SEED_METHODS = {HARNESS: "$DRAFTER", "dspark": "$DSPARK", "dflash2": "$DFLASH2", "eagle4-chain": "$DRAFTER"}
SEED_BUDGETS, SEED_DATASETS, SEED_REPEATS = (8, 16), ("prompt-enhancement", "fireworks"), 3


@dataclass(frozen=True)
class Preset:
    description: str
    tp: int
    dtype: str
    host: str
    concurrency: tuple[int, ...]


# The seed analysis: B300 GPUs, tensor parallel 4, concurrency 1 and 8, tree L=8 vs chain N=7.
PRESETS = {
    "b300-tp4": Preset("4x NVIDIA B300, tensor parallel 4", tp=4, dtype="bfloat16", host="0.0.0.0",
                       concurrency=(1, 8)),
}
PORTS = {"vllm": 8000, "sglang": 30000}


def preset_commands(preset: str, engine: str, method: str, budget: int = 8, target: str = "$TARGET",
                    drafter: str | None = None, dataset: str = "prompt-enhancement") -> tuple[str, list[str]]:
    """(server launch command, specbench run commands) of a preset, as shell lines."""
    from specbench.runners.server import shell_join

    if preset not in PRESETS:
        raise SpecbenchError(f"unknown preset {preset!r} (have: {', '.join(PRESETS)})")
    p = PRESETS[preset]
    if method in DRAFTER_METHODS and drafter is None:
        drafter = "$DRAFTER"
    port = PORTS.get(engine)
    if engine == "vllm":
        from specbench.runners.vllm import launch_command
    elif engine == "sglang":
        from specbench.runners.sglang import launch_command
    else:
        raise SpecbenchError(f"--engine must be vllm or sglang, got {engine!r}")
    server = launch_command(target, method, budget, tp=p.tp, drafter=drafter, host=p.host, port=port,
                            dtype=p.dtype)
    runs = []
    for c in p.concurrency:
        argv = ["specbench", "run", "--engine", engine, "--endpoint", f"http://127.0.0.1:{port}", "--target", target,
                "--method", method, "--budget", str(budget), "--concurrency", str(c), "--dataset", dataset,
                "--dtype", p.dtype, "--option", f"tp={p.tp}"]      # the manifest's tensor_parallel_size
        if drafter:
            argv += ["--option", f"drafter={drafter}"]
        argv += ["--out", f"runs/{preset}-{engine}-{method}-L{budget}-C{c}"]
        runs.append(shell_join(argv))
    return shell_join(server), runs


def harness_script(preset: str, engine: str, target: str = "$TARGET", drafter: str = "$DRAFTER") -> list[str]:
    """The eagle4-harness script of a preset: calibrate, serve, run, and the seed comparison, as bash lines."""
    from specbench.runners.server import shell_join

    if preset not in PRESETS:
        raise SpecbenchError(f"unknown preset {preset!r} (have: {', '.join(PRESETS)})")
    if engine not in PORTS:
        raise SpecbenchError(f"--engine must be vllm or sglang, got {engine!r}")
    p = PRESETS[preset]
    model = ["--target", target, "--dtype", p.dtype]
    top = max(SEED_BUDGETS)
    serve = [f"serve-{preset}-{engine}-{HARNESS}.sh"]
    seed = dict(SEED_METHODS)
    needs = ': "${DSPARK:?a DSpark checkpoint}" "${DFLASH2:?a DFlash2 checkpoint}"'
    if engine == "sglang":           # one shape per expected concurrency; SGLang's DSpark needs its SPS table
        serve = [f"serve-{preset}-{engine}-{HARNESS}-C{c}.sh" for c in p.concurrency]
        seed["dspark"] += ":sps_table=$SPS_TABLE"
        needs += ' "${SPS_TABLE:?its SPS cost table (python -m sglang.benchmark.dspark_sps_profiler)}"'
    methods = ",".join(f"{m}:drafter={d}" for m, d in seed.items())
    compiled = ("the K per batch size" if engine == "vllm" else
                "the tree shape for each expected concurrency (" + ", ".join(f"C={c}" for c in p.concurrency) + ")")
    return [
        "#!/usr/bin/env bash",
        f"# eagle4-harness on {engine}, {p.description}: calibrate, serve, run, then the seed comparison.",
        "set -euo pipefail",
        ': "${TARGET:?the target model (Hub id or folder)}" "${DRAFTER:?its EAGLE-3 drafter}"',
        needs,
        "# 1. the server's cost table: one launch per K (1, 3, 7, 15), minutes each; kept once it exists",
        shell_join(["specbench", "calibrate", "--engine", engine, *model, "--drafter", drafter, "--tp", str(p.tp),
                    "--if-missing"]),
        f"# 2. the {engine} serve command with {compiled} compiled from that table, for serving with "
        + " or ".join(f"`bash {f}`" for f in serve) + " (the runs below launch their own)",
        *(shell_join(["specbench", "engines", "preset", preset, "--engine", engine, "--method", HARNESS, "--serve",
                      "--budget", str(top), *(["--concurrency", str(c)] if engine == "sglang" else []),
                      "--target", target, "--drafter", drafter]) + f" > {f}"
          for c, f in zip(p.concurrency, serve)),
        f"# 3. one harness run, L={top}, C={max(p.concurrency)}",
        shell_join(["specbench", "run", "--engine", engine, *model, "--method", HARNESS, "--budget", str(top),
                    "--concurrency", str(max(p.concurrency)), "--option", f"tp={p.tp}", "--option",
                    f"drafter={drafter}", "--out", f"runs/{preset}-{engine}-{HARNESS}-L{top}-C{max(p.concurrency)}"]),
        "# 4. the seed comparison on each prompt set: vanilla is added; every variant repeated, interleaved",
        *(shell_join(["specbench", "compare", "--engine", engine, *model, "--methods", methods, "--budget",
                      ",".join(map(str, SEED_BUDGETS)), "--concurrency", ",".join(map(str, p.concurrency)),
                      "--dataset", dataset, "--repeats", str(SEED_REPEATS), "--option", f"tp={p.tp}", "--out",
                      f"runs/{preset}-{engine}-seed-{dataset}"]) for dataset in SEED_DATASETS),
    ]


def harness_serve_command(preset: str, engine: str, budget: int, target: str, drafter: str,
                          concurrency: int | None = None) -> str:
    """The preset's server command for eagle4-harness, compiled from this node's cost table: vLLM's K schedule,
    or SGLang's tree shape for the expected `concurrency` (default: the preset's largest)."""
    from specbench.runners import runner_class
    from specbench.runners.server import shell_join
    from specbench.settings import Settings

    if preset not in PRESETS or engine not in PORTS:
        harness_script(preset, engine)                     # the same one-line refusals
    if concurrency is not None and engine != "sglang":
        raise SpecbenchError("--concurrency is for --engine sglang: vLLM's schedule covers every batch size")
    p = PRESETS[preset]
    runner = runner_class(engine)(target, p.dtype)
    options = {"drafter": drafter, "tp": p.tp, "host": p.host, "port": PORTS[engine]}
    return shell_join(runner.launch_command(Settings(method=HARNESS, budget=budget, options=options,
                                                     concurrency=concurrency or max(p.concurrency))))


@app.command("preset")
def preset_cmd(
    name: str = typer.Argument(..., help=f"Preset: {', '.join(PRESETS)}."),
    engine: str = typer.Option(..., help="vllm or sglang."),
    method: str = typer.Option(..., help="vanilla, ngram, eagle3 / eagle4-chain, eagle4-tree (sglang), dflash, "
                                         "dspark, draft_model (vllm)."),
    budget: int = typer.Option(8, min=1, help="Budget L (vLLM num_speculative_tokens = L-1; SGLang "
                                              "num-draft-tokens = L)."),
    drafter: Optional[str] = typer.Option(None, help="Draft checkpoint (default: the placeholder $DRAFTER)."),
    target: str = typer.Option("$TARGET", help="Target model (HF id or folder; default: the placeholder $TARGET)."),
    dataset: str = typer.Option("prompt-enhancement", help="Dataset for the run commands."),
    serve: bool = typer.Option(False, help="eagle4-harness: print the server command compiled from this node's "
                               "calibrated cost table (the script's step 2)."),
    concurrency: Optional[int] = typer.Option(None, min=1, help="eagle4-harness --serve on sglang: the expected "
                                              "concurrency its tree shape is compiled for (default: the preset's "
                                              "largest)."),
) -> None:
    """Print the server launch command and the specbench runs (one per concurrency) of a preset; for
    eagle4-harness, the whole script: calibrate, serve, run and the seed comparison.

    Example: specbench engines preset b300-tp4 --engine vllm --method eagle3 --drafter /ckpt/eagle3
    """
    if method == HARNESS:
        if concurrency is not None and not serve:
            raise SpecbenchError("--concurrency is for --serve: the script prints a serve command per concurrency")
        lines = ([harness_serve_command(name, engine, budget, target, drafter or "$DRAFTER", concurrency)] if serve
                 else harness_script(name, engine, target, drafter or "$DRAFTER"))
        for line in lines:
            console.print(line, markup=False)
        return
    if serve or concurrency is not None:
        raise SpecbenchError(f"--{'serve' if serve else 'concurrency'} is for --method {HARNESS}, whose server "
                             "command depends on a calibration")
    server, runs = preset_commands(name, engine, method, budget, target, drafter, dataset)
    p = PRESETS[name]
    console.print(f"# {engine} on {p.description}: {method}, L={budget}")
    console.print("# 1. start the server and leave it running (it is ready when GET /health answers 200):")
    console.print(server)
    console.print("# 2. run the benchmark against it:")
    for line in runs:
        console.print(line)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="engines")
