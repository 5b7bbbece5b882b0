"""The `specbench` command: a thin face over the dataset, run, analysis and report modules.

The core commands (data, run, compare, summarize, report) live here; each engine's own commands (calibrate,
serve, engines preset, ...) come from its runner package (`specbench.runners.COMMANDS`).
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

from specbench import data_cli, report_cli, run_cli
from specbench.errors import SpecbenchError
from specbench.runners import register_commands

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
register_commands(app)


def main() -> None:
    try:
        app()
    except SpecbenchError as err:
        # A Text, not markup: messages quote user input, where `[x]` or `hf:a:b` must print as written.
        Console(stderr=True, soft_wrap=True).print(Text.assemble(("error:", "bold red"), f" {err}"))
        sys.exit(2)


if __name__ == "__main__":
    main()
