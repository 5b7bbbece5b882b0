"""`specbench run` and `specbench compare` (placeholder until the engine lands)."""

import typer


def register(app: typer.Typer) -> None:
    pass
