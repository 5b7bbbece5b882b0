"""The project's layers, checked on its import graph: the core and the analysis import no engine and no torch,
only runners touch an engine, the reference engine imports nothing of specbench.

Every import statement counts, those inside functions too: a lazy import of the engine from the core is still
the core depending on the engine.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "specbench"
ANALYSIS = ROOT / "analysis"
ENGINE = ROOT / "reference_eagle4"
# What the core may import of the runners: the registry (engines imported by name) and the protocol.
CORE_MAY_IMPORT = {"specbench.runners", "specbench.runners.base"}


def imports(folder: Path) -> list[tuple[str, int, str]]:
    """(file, line, imported module) for every import statement under `folder`."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found += [(str(path.relative_to(ROOT)), node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((str(path.relative_to(ROOT)), node.lineno, node.module))
                # `from specbench.runners import vllm` imports a module too
                found += [(str(path.relative_to(ROOT)), node.lineno, f"{node.module}.{a.name}") for a in node.names
                          if is_module(f"{node.module}.{a.name}")]
    return found


def is_module(name: str) -> bool:
    """Whether a dotted name is one of the repository's modules or packages (not a name defined in one)."""
    parts = name.split(".")
    if parts[:2] == ["specbench", "runners"]:
        folder = ROOT / "runners" / Path(*parts[2:]) if parts[2:] else ROOT / "runners"
    elif parts[:2] == ["specbench", "analysis"]:
        folder = ROOT / "analysis" / Path(*parts[2:]) if parts[2:] else ROOT / "analysis"
    else:
        folder = ROOT / Path(*parts)
    return folder.is_dir() or folder.with_suffix(".py").is_file()


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_core_and_the_analysis_import_no_engine_and_no_torch():
    bad = [f"{f}:{line}: imports {m}" for f, line, m in imports(CORE) + imports(ANALYSIS)
           if top(m) in ("reference_eagle4", "torch")]
    assert not bad, "\n".join(bad)


def test_the_core_depends_on_the_runner_protocol_only():
    bad = [f"{f}:{line}: imports {m}" for f, line, m in imports(CORE)
           if m.startswith("specbench.runners") and m not in CORE_MAY_IMPORT]
    assert not bad, "\n".join(bad)


def test_the_analysis_reads_records_and_imports_no_runner():
    bad = [f"{f}:{line}: imports {m}" for f, line, m in imports(ANALYSIS)
           if m.startswith("specbench.runners") or top(m) == "runners"]
    assert not bad, "\n".join(bad)


def test_the_reference_engine_imports_nothing_of_specbench():
    bad = [f"{f}:{line}: imports {m}" for f, line, m in imports(ENGINE) if top(m) in ("specbench", "runners")]
    assert not bad, "\n".join(bad)


def core_modules() -> list[str]:
    names = [f"specbench.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__main__"]
    return sorted(names + [f"specbench.analysis.{p.stem}" for p in ANALYSIS.glob("*.py")])


def test_importing_the_core_loads_neither_torch_nor_the_engine():
    code = ("import importlib, sys\n"
            f"for m in {core_modules()!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'reference_eagle4') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("argv", [["--help"], ["run", "--engine", "vllm", "--help"], ["compare", "--help"],
                                  ["engines", "preset", "b300-tp4", "--engine", "vllm", "--method", "ngram"],
                                  ["engines", "preset", "b300-tp4", "--engine", "vllm", "--method", "eagle4-harness"]])
def test_the_cli_works_where_the_reference_engine_cannot_be_imported(env_without, argv):
    out = subprocess.run([sys.executable, "-m", "specbench.cli", *argv], capture_output=True, text=True,
                         env=env_without("reference_eagle4", "torch"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert any(s in out.stdout for s in ("Usage", "--speculative-config", "specbench calibrate --engine vllm"))


RUNNERS = ROOT / "runners"
# What a server runner may import of the reference engine: the modules that import no torch (a server run's
# planner and cost table, and the weights module that resolves a default target to a folder).
TORCH_FREE_ENGINE = ("reference_eagle4.cost_table", "reference_eagle4.planner", "reference_eagle4.weights")


def test_server_runners_import_no_torch_and_only_the_engines_torch_free_modules():
    bad = [f"{f}:{line}: imports {m}" for f, line, m in imports(RUNNERS)
           if not f.startswith("runners/reference/")
           and (top(m) == "torch" or top(m) == "reference_eagle4" and m not in TORCH_FREE_ENGINE)]
    assert not bad, "\n".join(bad)


def test_the_engines_torch_free_modules_import_without_torch(env_without):
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in TORCH_FREE_ENGINE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_without("torch"))
    assert out.returncode == 0, out.stderr
