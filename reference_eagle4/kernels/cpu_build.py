"""Builds the engine's C kernels for this CPU on first use, with the system C compiler.

Each kernel is one C file beside this module (with the headers there). It is compiled for this CPU (-march=native) into
`$SPECBENCH_CACHE/kernels`, keyed by the source, the flags and the CPU, in about a second, and loaded
with ctypes. The libraries use OpenMP and share torch's runtime, so they run on torch's threads. Where no
compiler works, `load` returns None after one warning and callers keep their PyTorch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC")


def _cpu_identity() -> str:
    """-march=native code may not run on another CPU sharing the cache folder: key the build by it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    keep = [ln for ln in lines if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep))) or platform.machine()


def _build(cc: str, source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        out = Path(tmp) / dest.name
        subprocess.run([cc, *FLAGS, str(source), "-o", str(out), "-lm"], check=True, capture_output=True,
                       timeout=120)
        os.replace(out, dest)          # atomic: concurrent builders (test workers) never load half a file


def load(source: Path, fallback: str) -> ctypes.CDLL | None:
    """The compiled `source`, or None (with a warning naming the reason and `fallback`, what runs instead)."""
    from reference_eagle4.weights import cache_root

    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return _unavailable(source, "no C compiler found (cc, gcc or $CC)", fallback)
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.h")))
    key = hashlib.sha256(source.read_bytes() + headers + " ".join(FLAGS).encode() + _cpu_identity().encode())
    dest = cache_root() / "kernels" / f"{source.stem}-{key.hexdigest()[:16]}.so"
    try:
        if not dest.exists():
            _build(cc, source, dest)
        return ctypes.CDLL(str(dest))
    except subprocess.CalledProcessError as exc:
        return _unavailable(source, f"{cc} failed: {exc.stderr.decode(errors='replace').strip()[-400:]}", fallback)
    except (OSError, subprocess.SubprocessError) as exc:
        return _unavailable(source, str(exc), fallback)


def _unavailable(source: Path, reason: str, fallback: str) -> None:
    warnings.warn(f"{source.name} not built ({reason}): {fallback}; install a C compiler (gcc) for the kernel",
                  stacklevel=4)
    return None
