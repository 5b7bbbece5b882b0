"""The `specbench` command: a thin face over the dataset, run, analysis and report modules."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from specbench import (ablate_cli, calibrate_cli, data_cli, datastore_cli, engines_cli, report_cli, run_cli, serve_cli,
                       train_cli)
from specbench.errors import SpecbenchError

app = typer.Typer(
    help="Benchmark speculative decoding on prompt-enhancement and general prompts.\n\n"
    "Typical session:  specbench run --method eagle4-harness --budget 16  "
    "then  specbench report runs/<id> --out reports/",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data_cli.app, name="data")
run_cli.register(app)
report_cli.register(app)
calibrate_cli.register(app)
ablate_cli.register(app)
train_cli.register(app)
datastore_cli.register(app)
serve_cli.register(app)
engines_cli.register(app)


def main() -> None:
    try:
        app()
    except SpecbenchError as err:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {err}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
