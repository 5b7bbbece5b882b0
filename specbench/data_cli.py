"""`specbench data ...`: list, show, validate, export and import prompt sets, all through specbench.dataset."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specbench import exporters, importers
from specbench.dataset import bundled_names, load_rows, read_set, summary

app = typer.Typer(
    help="Prompt sets: list the bundled ones, show rows, validate a file, export to Spec-Bench or the Hub, "
    "import public prompt files.\n\nNAME is a bundled set (prompt-enhancement, fireworks), a .jsonl/.parquet "
    "file (Spec-Bench and MT-Bench question.jsonl load as they are), a folder of such shards, or "
    "hf:<repo_id>[:<split>] (hf:<repo_id>:<config>:<split> for a repo with several configs).",
    no_args_is_help=True,
)

_PROMPT_CHARS = 160


class ExportFormat(str, Enum):
    spec_bench = "spec-bench"
    hub = "hub"


ImportKind = Enum("ImportKind", {kind: kind for kind in importers.IMPORTERS}, type=str)  # type: ignore[misc]


@app.command("list")
def list_sets(
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")] = False,
) -> None:
    """List the bundled prompt sets with row counts per category and per family."""
    counts = {name: summary(load_rows(name)) for name in bundled_names()}
    if as_json:
        typer.echo(json.dumps(counts, indent=2))
        return
    console = Console()
    for name, count in counts.items():
        console.print(_counts_table(name, count))


def _counts_table(name: str, count: dict) -> Table:
    """Categories, then families, of one set in one table."""
    table = Table(title=f"{name}: {count['rows']} rows")
    for column, justify in (("by", "left"), ("name", "left"), ("rows", "right")):
        table.add_column(column, justify=justify)
    for by, key in (("category", "categories"), ("family", "families")):
        for value, rows in count[key].items():
            table.add_row(by, value, str(rows))
        table.add_section()
    return table


@app.command()
def show(
    name: Annotated[str, typer.Argument(help="Bundled set, .jsonl/.parquet file or hf:<repo_id>[:<split>].")],
    category: Annotated[
        list[str] | None, typer.Option("--category", "-c", help="Only this category (repeat for several).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Show at most this many rows.", min=1)] = None,
    seed: Annotated[int | None, typer.Option(help="Shuffle deterministically with this seed before --limit.")] = None,
) -> None:
    """Show rows of a prompt set as a table (prompts cut to 160 characters)."""
    rows = load_rows(name, categories=category, limit=limit, seed=seed)
    table = Table(title=f"{name}: {len(rows)} rows", show_lines=True)
    for column in ("question_id", "category", "family", "prompt"):
        table.add_column(column, overflow="fold")
    for row in rows:
        # Text cells, not strings: rich would read brackets as markup and `:name:` as an emoji code.
        text = Text(_cut(row.prompt))
        if row.image_caption is not None:
            text.append(f"\nimage: {_cut(row.image_caption)}", style="dim")
        table.add_row(Text(row.question_id), Text(row.category), Text(row.source_dataset), text)
    Console().print(table)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PROMPT_CHARS else text[: _PROMPT_CHARS - 1] + "…"


@app.command()
def validate(
    name: Annotated[
        str, typer.Argument(help="Bundled set, .jsonl/.parquet file, folder of shards or hf:<repo_id>[:<split>].")
    ],
) -> None:
    """Check every row of a prompt set; exit 0 with one OK line, or exit 2 printing WHERE:LINE: problem for each."""
    records, problems = read_set(name)
    if problems:
        for problem in problems:
            typer.echo(problem)
        typer.echo(f"{name}: {len(problems)} problem(s) in {len(records)} row(s)", err=True)
        raise typer.Exit(code=2)
    typer.echo(f"OK {name}: {len(records)} rows")


@app.command()
def export(
    name: Annotated[str, typer.Argument(help="Bundled set, .jsonl/.parquet file or hf:<repo_id>[:<split>].")],
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", help="spec-bench: question.jsonl for vLLM/Spec-Bench; hub: Parquet + card."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (created if missing).")],
    split: Annotated[str, typer.Option(help="Split name of the hub export (data/<split>.parquet).")] = "test",
) -> None:
    """Export a prompt set as Spec-Bench question.jsonl or as a Hub-ready folder."""
    rows = load_rows(name)
    if fmt is ExportFormat.spec_bench:
        written = exporters.export_spec_bench(rows, out)
        # vLLM's spec_bench loader sends turns[0] alone (vllm/benchmarks/datasets/datasets.py, SpecBench.load_data).
        typer.echo("warning: Spec-Bench's question.jsonl carries no system prompt, so engines reading it (vLLM's "
                   "spec_bench loader) send the user turn alone, without the enhancer system prompts specbench "
                   "sends; `--format hub` keeps them", err=True)
    else:
        bundled = name in bundled_names()
        written = exporters.export_hub(rows, out, name=Path(name).stem, split=split,
                                       license="cc-by-4.0" if bundled else "unknown", bundled=bundled)
    typer.echo(f"wrote {len(rows)} rows to {written}")


@app.command("import")
def import_file(
    kind: Annotated[
        ImportKind, typer.Argument(help="spec-bench (also MT-Bench), vbench, partiprompts, geneval or humaneval.")
    ],
    path: Annotated[
        Path,
        typer.Argument(help="question.jsonl, VBench_full_info.json, PartiPrompts TSV, evaluation_metadata.jsonl or "
                       "HumanEval.jsonl.gz."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output .jsonl file in the specbench schema.")],
    source: Annotated[
        str | None, typer.Option(help="source_dataset (family) prefix and id prefix; default: KIND (e.g. mt-bench).")
    ] = None,
) -> None:
    """Convert a public prompt file into the specbench schema."""
    rows = importers.import_file(kind.value, path, source)
    exporters.write_jsonl(rows, out)
    typer.echo(f"wrote {len(rows)} rows to {out}")
