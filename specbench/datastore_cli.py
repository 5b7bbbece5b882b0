"""`specbench datastore`: build the retrieval datastore the harness drafts from, out of the target's responses."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from specbench.errors import SpecbenchError
from specbench.train_cli import REGEN_METHODS, pool_chat

console = Console()


def register(app: typer.Typer) -> None:
    @app.command()
    def datastore(
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        pool: Optional[Path] = typer.Option(None, help="Training prompts JSONL {id, category, prompt, "
                                            "image_caption} (default: the bundled pool, disjoint from the benchmarks)."),
        work: Path = typer.Option(Path("runs/train"), help="Working folder shared with `specbench train`: "
                                  "regen.jsonl (the target's responses, resumed) and train.log."),
        out: Optional[Path] = typer.Option(None, help="Datastore folder to write (default WORK/datastore); "
                                           "pass it to the harness with --option datastore=FOLDER."),
        minutes: Optional[float] = typer.Option(None, min=0.0, help="At most this many minutes of regeneration "
                                                "in this call (default: until every pool prompt has a response; "
                                                "0: index what WORK/regen.jsonl holds)."),
        max_new_tokens: int = typer.Option(160, min=1, help="Longest regenerated response."),
        regen_method: str = typer.Option("ngram", help="How the target regenerates (greedy, the same tokens): "
                                         + ", ".join(REGEN_METHODS) + "."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
    ) -> None:
        """Regenerate the training pool's responses with the target and index them for retrieval drafting.

        eagle4-harness adds the datastore's continuation of the context's longest suffix to its tree
        (REST-style retrieval); the one for the default target ships in reference_eagle4/drafters/.
        Resumable: Ctrl-C keeps every finished response and a rerun continues.
        Example: specbench datastore --minutes 60, then specbench run --method eagle4-harness
        --option datastore=runs/train/datastore
        """
        if regen_method not in REGEN_METHODS:
            raise SpecbenchError(f"--regen-method {regen_method!r}: choose one of {', '.join(REGEN_METHODS)}")
        if pool is not None and not pool.exists():
            raise SpecbenchError(f"--pool {pool}: no such file")
        if minutes == 0 and not (work / "regen.jsonl").exists():
            raise SpecbenchError(f"--minutes 0: {work / 'regen.jsonl'} does not exist, nothing to index")
        from importlib import resources

        from reference_eagle4.training import build_datastore

        with resources.as_file(resources.files("specbench.bundled") / "train-pool.jsonl") as bundled:
            pool = pool or bundled
            folder = build_datastore(work, out, pool, target, pool_chat(pool), minutes, max_new_tokens,
                                     threads=threads, regen_method=regen_method)
        console.print(f"datastore: {folder}")
