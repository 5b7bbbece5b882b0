"""specbench.runners: one adapter per engine, each behind the `Runner` protocol (`runners/base.py`).

Runners are imported by engine name only when a run asks for that engine, so `--engine vllm` never loads
torch or the reference engine. Engines also bring their own commands (`specbench calibrate`, `serve`,
`engines preset`, ...), registered on the CLI from the modules in `COMMANDS`, which import their engine only
inside the commands themselves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError

if TYPE_CHECKING:
    import typer

    from specbench.runners.base import Runner

# engine name -> "module:class"
ENGINES = {
    "reference": "specbench.runners.reference.runner:ReferenceRunner",
    "vllm": "specbench.runners.vllm:VllmRunner",
    "sglang": "specbench.runners.sglang:SglangRunner",
}

# modules with a `register(app)` that adds an engine's own commands to the CLI
COMMANDS = ("specbench.runners.reference.cli", "specbench.runners.presets")


def runner_class(engine: str) -> type["Runner"]:
    """The runner class of an engine, imported now."""
    if engine not in ENGINES:
        raise SpecbenchError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    module, _, name = ENGINES[engine].partition(":")
    return getattr(importlib.import_module(module), name)


def register_commands(app: "typer.Typer") -> None:
    for module in COMMANDS:
        importlib.import_module(module).register(app)
