"""Measure (and optionally distil) an EAGLE-4 drafter's low-rank candidate head on a feature store.

Recall@K: the share of drafter states (every TTT step, held-out pool rows of the store) whose full-head
argmax, and whose target argmax, is among the low-rank head's top K.

    .venv/bin/python tools/lowrank_head.py --features runs/train-data-heldout/features --ks 32,64,128,256
    .venv/bin/python tools/lowrank_head.py --features F --distil-from runs/train-data/features --steps 2000 \\
        --out runs/lowrank-distilled      # the drafter with distilled A, B (the bundled one is left alone)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_eagle4.training.lowrank import distil, load_ttt, recall, states  # noqa: E402
from reference_eagle4.training.store import FeatureStore  # noqa: E402


def store_folder(ap: argparse.ArgumentParser, path: Path, flag: str) -> Path:
    """The feature store at `path`, or in the `specbench train-data` folder's features/; else a one-line error."""
    for folder in (path, path / "features"):
        if (folder / "meta.json").exists():
            return folder
    ap.error(f"{flag} {path}: no feature store there (run `specbench train-data features --out {path}` first)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", type=Path, default=ROOT / "reference_eagle4/drafters/smollm2-135m-eagle4")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--features", type=Path, required=True,
                    help="feature store measured (its held-out rows): a `specbench train-data` folder or its features/")
    ap.add_argument("--all-rows", action="store_true", help="measure on every row of --features, not the held-out")
    ap.add_argument("--ks", default="32,64,128,256")
    ap.add_argument("--distil-from", type=Path, help="feature store (as --features) whose training rows A, B are "
                                                     "distilled on")
    ap.add_argument("--rows", type=int, default=60000, help="most training states used for distillation")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", type=Path, help="save the distilled drafter here")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    for flag in ("features", "distil_from"):
        if getattr(a, flag) is not None:
            setattr(a, flag, store_folder(ap, getattr(a, flag), "--" + flag.replace("_", "-")))
    torch.set_num_threads(a.threads)
    from reference_eagle4.model import load_transformer
    from reference_eagle4.weights import resolve_target

    ks = [int(k) for k in a.ks.split(",")]
    ttt = load_ttt(a.drafter, load_transformer(resolve_target(a.target), torch.float32))
    samples = FeatureStore(a.features).samples()
    held = samples if a.all_rows else samples.split(ttt.cfg.eval_frac)[1]
    t0 = time.time()
    hn, step, tgt = states(ttt, held)
    print(f"{len(held)} records, {len(hn)} drafter states (steps 0-{int(step.max())}), {time.time() - t0:.0f} s")
    before = recall(ttt, hn, tgt, ks)
    print("before:", json.dumps(before))
    print("step 0 only:", json.dumps(recall(ttt, hn[step == 0], tgt[step == 0], ks)))
    if a.distil_from is None:
        return
    train = FeatureStore(a.distil_from).samples().split(ttt.cfg.eval_frac)[0]
    hn_train, _, _ = states(ttt, train, max_rows=a.rows)
    print(f"distilling on {len(hn_train)} training states")
    distil(ttt, hn_train, steps=a.steps)
    print("after:", json.dumps(recall(ttt, hn, tgt, ks)))
    if a.out:
        ttt.d.save(a.out, torch.float16, extra={"lowrank_distilled": {"from": str(a.drafter), "steps": a.steps,
                                                                     "rows": len(hn_train), "before": before}})
        print(f"saved {a.out}")


if __name__ == "__main__":
    main()
