"""`specbench calibrate`: measure the cost table the harness plans trees with, on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specbench.errors import SpecbenchError

console = Console()


def _ints(flag: str, text: str) -> tuple[int, ...]:
    from specbench.run_cli import parse_ints

    return tuple(parse_ints(flag, text))


def register(app: typer.Typer) -> None:
    @app.command()
    def calibrate(
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        dtype: str = typer.Option("auto", help="auto, float32 or bfloat16: time what runs will use."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        # the grid of reference_eagle4.calibration's DEFAULT_* (kept literal here: --help imports no torch)
        batches: str = typer.Option("1,2,3,4,5,6,7,8,16", help="Batch sizes (sequences per step). Every size up "
                                    "to 8 is timed: a step's cost jumps where its rows cross a block of the "
                                    "linears, which interpolating between 4 and 8 smooths over."),
        contexts: str = typer.Option("256,1024,2048", help="Context lengths (cached tokens per sequence)."),
        tokens: str = typer.Option("1,2,3,4,6,8,16,32,64", help="Tokens verified per sequence per step."),
        widths: str = typer.Option("1,4,8,16", help="Draft-level widths (nodes per sequence) to time the drafter at."),
        drafter: Optional[str] = typer.Option(None, help="EAGLE-4 drafter folder to time (default: the shipped "
                                              "one, when it fits the target; 'none' skips drafter timing)."),
        repeats: int = typer.Option(3, min=1, help="Timed rounds per point: each round times every token count (or width) of a row once, so drift touches them alike; the median is kept. Token counts up to 16 and draft levels get 3x the rounds."),
        out: Optional[Path] = typer.Option(None, help="Table file (default: the cache, where runs look it up)."),
        if_missing: bool = typer.Option(False, help="Do nothing when a table for this device already exists."),
    ) -> None:
        """Time the target's verification step over (batch, context, tokens) on this device.

        The harness reads the table matching this device, dtype and thread count; without one it
        calibrates a small grid in-process and says so. Takes a few minutes on a 2-core CPU.
        """
        from reference_eagle4.calibration import calibrate as measure, device_key, find_table, grid_points, slug, table_dir
        from specbench.runners.reference import ReferenceRunner

        b, c, t = _ints("--batches", batches), _ints("--contexts", contexts), _ints("--tokens", tokens)
        w = _ints("--widths", widths)
        runner = ReferenceRunner(target, dtype, threads)
        if if_missing and (out.exists() if out else find_table(device_key(runner.model)) is not None):
            console.print(f"table: {out or table_dir() / (slug(device_key(runner.model)) + '.json')} (exists; kept)")
            return
        step = _drafter_step(runner, drafter)
        total = grid_points(b, c, t, w, step is not None)
        with Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
            task = bar.add_task("", total=total)
            table = measure(runner.model, b, c, t, drafter_step=step, widths=w, repeats=repeats,
                            on_point=lambda: bar.advance(task))
        path = table.save(out or table_dir() / f"{slug(table.key)}.json")
        one = table.verify(1, table.contexts[0], 1)
        shape = ", ".join(f"{n}: {table.verify(1, table.contexts[0], n) / one:.2f}x" for n in table.tokens)
        console.print(f"verification cost vs 1 token (batch 1, context {table.contexts[0]}): {shape}")
        if table.draft_ms:
            console.print(f"one draft level (batch 1, width {w[0]}): {table.draft(1, w[0]):.1f} ms")
        console.print(f"table: {path}")


def _drafter_step(runner, drafter: str | None):
    """A (batch, width) -> callable timing one EAGLE-4 draft level, or None when there is no drafter."""
    from reference_eagle4.proposers.eagle4 import Eagle4Proposer, drafter_level_fn

    if drafter == "none":
        return None
    try:
        proposer = Eagle4Proposer(budget=16, drafter=drafter, target=runner.model)
    except (FileNotFoundError, ValueError) as err:      # ValueError: a drafter for another target
        if drafter is not None:
            raise SpecbenchError(f"--drafter {drafter}: {err}") from None
        console.print(f"the shipped drafter does not fit this target ({err}): timing the target only")
        return None
    return lambda batch, width: drafter_level_fn(proposer, batch, width)
