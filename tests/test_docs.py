"""What a newcomer reads stays true: every command in README's code blocks exists with those flags (parsed by the
CLI's own parser, not run), and no file outside BENCHMARKS.md's history speaks of "sessions"."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from typer._click.exceptions import UsageError          # typer 0.29 vendors its own click

from specbench.cli import app

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[tuple[int, list[str]]]:
    """(line number, argv) of every command line in README.md's shell code blocks (```bash)."""
    out, fence = [], None
    for n, line in enumerate((ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence in ("bash", "sh", "console") and line.strip():
            argv = shlex.split(line, comments=True)
            if argv and (argv[0].endswith("specbench") or argv[0] == "make"):
                out.append((n, argv))
    return out


def parse(argv: list[str]) -> Any:
    """Parse a specbench command line down to its leaf command, as the CLI would, without running it."""
    command, name, args, parent = typer.main.get_command(app), "specbench", list(argv), None
    while hasattr(command, "resolve_command"):                 # a group: find the sub-command
        ctx = command.make_context(name, list(args), parent=parent)
        name, command, args = command.resolve_command(ctx, args)
        parent = ctx
    return command.make_context(name, args, parent=parent)


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M))


def test_readme_shows_commands():
    commands = readme_commands()
    assert sum(argv[0] == "make" for _, argv in commands) >= 2
    assert sum(argv[0] != "make" for _, argv in commands) >= 10


@pytest.mark.parametrize("line,argv", readme_commands(), ids=lambda x: str(x) if isinstance(x, int) else None)
def test_every_readme_command_parses(line, argv):
    if argv[0] == "make":
        missing = set(argv[1:]) - make_targets()
        assert not missing, f"README.md:{line}: no Makefile target {missing}"
        return
    try:
        parse(argv[1:])
    except UsageError as err:
        pytest.fail(f"README.md:{line}: {shlex.join(argv)}: {err.format_message()}")


def test_the_parser_check_can_fail():
    with pytest.raises(UsageError):
        parse(["run", "--no-such-flag"])
    with pytest.raises(UsageError):
        parse(["no-such-command"])


# "session" as a time reference (a work session), not an HTTP or test-fixture session.
SESSION = re.compile(r"\bsessions? \d+|\b(this|that|last|next|previous|earlier|one|a) session\b", re.I)


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def test_no_file_speaks_of_sessions():
    """Measurements carry a date and a command; "session N" means nothing to a reader of the repository."""
    hits = []
    for name in tracked_files():
        path = ROOT / name
        if name == "BENCHMARKS.md" or path.suffix not in (".py", ".md", ".c", ".h", ".j2", ".toml", ".json", "") \
                or path.stat().st_size > 2_000_000:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if SESSION.search(line):
                hits.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


# A measured time or speed quoted as a fact: "0.47 ms", "26 us", "60 tok/s", "1.5x faster", "took 93 minutes".
TIMING = re.compile(r"\b\d+(\.\d+)?\s?(ms|us|µs|ns|tok/s|seconds|minutes)\b|\b\d+(\.\d+)?x (faster|slower|cheaper|dearer)\b")
SOURCES = ("specbench", "runners", "analysis", "reference_eagle4", "tools")


def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file."""
    import ast
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                first = node.body[0].lineno
                out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def test_no_docstring_or_comment_quotes_a_timing():
    """Measurements live in BENCHMARKS.md with their command; code says what and why."""
    hits = [f"{path.relative_to(ROOT)}:{n}: {text.strip()[:100]}"
            for folder in SOURCES for path in sorted((ROOT / folder).rglob("*.py"))
            for n, text in comments_and_docstrings(path) if TIMING.search(text)]
    assert not hits, "\n".join(hits)
