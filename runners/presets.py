"""`specbench engines preset`: the launch commands of a vLLM or SGLang server for a method, on a known hardware
preset, and the `specbench run` commands that benchmark it."""

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
) -> None:
    """Print the server launch command and the specbench runs (one per concurrency) of a preset.

    Example: specbench engines preset b300-tp4 --engine vllm --method eagle3 --drafter /ckpt/eagle3
    """
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
