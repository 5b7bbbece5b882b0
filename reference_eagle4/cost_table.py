"""Cost tables: measured step times by batch size, context and tokens per sequence, and their lookup.

The planner (`reference_eagle4.planner`) reads these tables, and so do runners that compile the planner's policy
for a server engine, which must not import torch: this module holds the table and its interpolation with no
engine dependency. `reference_eagle4.calibration` measures the reference engine's tables;
`specbench.runners.server_calibrate` a server's. Both are saved in `table_dir()`.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def _interp(xs: list[int], x: float) -> tuple[int, int, float]:
    """Bracketing grid indices and weight for x; linear extrapolation past the last two points."""
    if len(xs) == 1:
        return 0, 0, 0.0
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    return i, i + 1, (x - xs[i]) / (xs[i + 1] - xs[i])


def _mix(a: float, b: float, w: float) -> float:
    return a + (b - a) * w


@dataclass
class CostTable:
    key: dict[str, Any]
    batches: list[int]
    contexts: list[int]
    tokens: list[int]
    verify_ms: list[list[list[float]]]          # [batch][context][tokens per sequence]
    draft_batches: list[int] = field(default_factory=list)
    draft_widths: list[int] = field(default_factory=list)
    draft_ms: list[list[float]] = field(default_factory=list)   # [batch][width]: one drafter forward
    created: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def verify(self, batch: float, context: float, tokens: float) -> float:
        """Milliseconds of one verification forward where every sequence appends `tokens` tokens."""
        bi, bj, bw = _interp(self.batches, batch)
        ci, cj, cw = _interp(self.contexts, context)
        ti, tj, tw = _interp(self.tokens, tokens)
        v = self.verify_ms

        def at(b: int, c: int) -> float:
            return _mix(v[b][c][ti], v[b][c][tj], tw)

        return max(_mix(_mix(at(bi, ci), at(bi, cj), cw), _mix(at(bj, ci), at(bj, cj), cw), bw), 1e-3)

    def draft(self, batch: float, width: float) -> float:
        """Milliseconds of one drafter forward over `width` nodes per sequence."""
        if not self.draft_ms:
            return 0.0
        bi, bj, bw = _interp(self.draft_batches, batch)
        wi, wj, ww = _interp(self.draft_widths, width)
        d = self.draft_ms
        return max(_mix(_mix(d[bi][wi], d[bi][wj], ww), _mix(d[bj][wi], d[bj][wj], ww), bw), 0.0)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        return cls(**json.loads(Path(path).read_text()))


def table_dir() -> Path:
    """Where cost tables live: `calibration/` in specbench's cache (SPECBENCH_CACHE)."""
    from reference_eagle4.weights import cache_root

    return cache_root() / "calibration"
