"""Would more data lift a trained drafter? Its agreement on greedy training responses beside held-out ones.

    .venv/bin/python tools/drafter_fit.py --kind eagle4 --data runs/train-data --rows 89
    .venv/bin/python tools/drafter_fit.py --kind dspark --drafter reference_eagle4/drafters/smollm2-135m-dspark

Both sets are greedy responses of a `specbench train-data` store: held out = the pool rows the trainer holds
out, training = a seeded random draw of `--rows` of the others. A drafter that fits the responses it was trained
on far better than held-out ones is short of data; one that fits neither (no gap) is short of capacity or of
training compute, and more data alone will not lift it. The figures are the trainer's own evaluation
(`train.evaluate`: the same positions for every drafter, the frozen head in the trainer's dtype). A drafter
trained on another machine's store has read most of these training responses, not all: greedy decoding in bf16
differs between CPUs where logits nearly tie.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_eagle4.training.store import FeatureStore  # noqa: E402
from reference_eagle4.training.train import KINDS, TrainConfig, evaluate, make_objective, sampled  # noqa: E402


def objective(kind: str, folder: Path, target):
    """The trainer's objective around the saved drafter in `folder` (its shape and draft vocabulary)."""
    from reference_eagle4.drafters.dflash_model import load_dflash
    from reference_eagle4.drafters.eagle4_model import load_drafter

    src = (load_drafter if kind == "eagle4" else load_dflash)(folder)
    c = src.cfg
    shape = (dict(window=c.window, rank=c.rank, topk_candidates=c.topk_candidates, mlp_width=c.intermediate_size)
             if kind == "eagle4" else dict(layers=c.num_layers, block_size=c.block_size))
    return make_objective(kind, target, TrainConfig(init_from=str(folder), **shape), src.d2t, torch.device("cpu"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kind", choices=KINDS, default="eagle4")
    ap.add_argument("--drafter", type=Path, help="drafter folder (default: the bundled one of --kind)")
    ap.add_argument("--data", type=Path, default=Path("runs/train-data"), help="a `specbench train-data` folder")
    ap.add_argument("--rows", type=int, default=89, help="greedy training responses drawn (held out: all)")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    folder = a.drafter or ROOT / f"reference_eagle4/drafters/smollm2-135m-{a.kind}"
    for path, what in ((folder / "config.json", "--drafter"), (a.data / "features", "--data")):
        if not path.exists():
            sys.exit(f"drafter_fit: {what}: {path} does not exist")
    torch.set_num_threads(a.threads)
    from reference_eagle4.model import load_transformer
    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        target = load_transformer(resolve_target(a.target), torch.float32)
    except WeightsError as e:
        sys.exit(f"drafter_fit: --target: {e}")
    try:
        obj = objective(a.kind, folder, target)
    except (ValueError, KeyError) as e:
        sys.exit(f"drafter_fit: --drafter {folder}: not a {a.kind} drafter ({e})")
    train_set, held = FeatureStore(a.data / "features").samples().split(obj.cfg.eval_frac)
    held = [s for s in held if not sampled(s)]
    seen = [s for s in train_set if not sampled(s)]
    random.Random(0).shuffle(seen)
    if not held or not seen:
        sys.exit(f"drafter_fit: --data {a.data}: no greedy {'held-out' if not held else 'training'} responses")
    t0 = time.time()
    out = {"drafter": str(folder), "data": str(a.data), "held_out": {**evaluate(obj, held), "rows": len(held)},
           "training": {**evaluate(obj, seen[: a.rows]), "rows": len(seen[: a.rows])}}
    out["seconds"] = round(time.time() - t0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
