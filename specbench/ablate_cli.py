"""`specbench ablate`: what the EAGLE-4 drafter's low-rank head and sliding window save per drafting step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from specbench.errors import SpecbenchError

console = Console()


def register(app: typer.Typer) -> None:
    @app.command()
    def ablate(
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        drafter: Optional[str] = typer.Option(None, help="EAGLE-4 drafter folder (default: the shipped one)."),
        method: str = typer.Option("eagle4-tree", help="eagle4-tree or eagle4-chain: whose drafting is timed."),
        budget: int = typer.Option(16, min=2, help="Budget L (the tree drafts min(8, L-1) levels; a chain L-1)."),
        batch: int = typer.Option(1, min=1, help="Sequences drafted together."),
        dataset: str = typer.Option("prompt-enhancement", help="Where the context's prompt comes from."),
        continue_tokens: int = typer.Option(64, min=1, help="Greedy tokens generated after the prompt so that "
                                            "the context ends inside an answer, as in a run."),
        reps: int = typer.Option(30, min=1, help="Timed repeats per variant (the median is kept)."),
        dtype: str = typer.Option("auto", help="auto, float32 or bfloat16."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        out: Optional[Path] = typer.Option(None, help="Also write the timings as JSON here."),
    ) -> None:
        """Time one drafting step (catch-up + every draft level) with the shipped low-rank head and sliding
        window against the full head and full attention, interleaved on the same real context.

        Acceptance under each ablation comes from a comparison, e.g.
        specbench compare --methods eagle4-tree --budget 16 --option head=full
        """
        from reference_eagle4.drafter_cost import ABLATIONS, propose_ms
        from specbench.dataset import load_rows
        from specbench.runners.reference import ReferenceRunner, Settings

        if method not in ("eagle4-tree", "eagle4-chain"):
            raise SpecbenchError(f"--method must be eagle4-tree or eagle4-chain, got {method!r}")
        runner = ReferenceRunner(target, dtype, threads)
        request = runner.requests(load_rows(dataset, limit=1, seed=0))[0]
        settings = Settings(method="vanilla", budget=1, max_new_tokens=continue_tokens)
        engine = runner.engine(settings, runner.max_len([request], settings))
        done = []
        engine.generate([request], done.append)
        context = request.prompt_ids + done[0].output
        try:
            ms = propose_ms(runner.model, context, drafter=drafter, method=method, budget=budget, batch=batch,
                            reps=reps)
        except FileNotFoundError as err:
            raise SpecbenchError(f"--drafter: {err}") from None
        base = next(iter(ms.values()))
        table = Table(title=f"{method}, L = {budget}, batch {batch}, context {len(context)} tokens, "
                      f"{runner.dtype_name}: one drafting step")
        for col in ("variant", "options", "ms per step", "vs shipped"):
            table.add_column(col, justify="right" if col in ("ms per step", "vs shipped") else "left")
        for name, t in ms.items():
            opts = " ".join(f"{k}={v}" for k, v in ABLATIONS[name].items()) or "-"
            table.add_row(name, opts, f"{t:.2f}", f"{t / base:.2f}x")
        console.print(table)
        if out is not None:
            out.write_text(json.dumps({"method": method, "budget": budget, "batch": batch, "context": len(context),
                                       "dtype": runner.dtype_name, "ms_per_step": ms}, indent=1) + "\n")
            console.print(f"written: {out}")
