"""Would more data lift a trained drafter? Its agreement on greedy training responses beside held-out ones.

    .venv/bin/python tools/drafter_fit.py --kind eagle4 --data runs/train-data --rows 89
    .venv/bin/python tools/drafter_fit.py --kind dspark --drafter reference_eagle4/drafters/smollm2-135m-dspark
    .venv/bin/python tools/drafter_fit.py --drafter runs/e4-t05/eagle4/drafter --against runs/e4-t1/eagle4/drafter

Both sets are greedy responses of a `specbench train-data` store: held out = the pool rows the trainer holds
out, training = a seeded random draw of `--rows` of the others. A drafter that fits the responses it was trained
on far better than held-out ones is short of data; one that fits neither (no gap) is short of capacity or of
training compute, and more data alone will not lift it. The figures are the trainer's own evaluation
(`train.evaluate`: the same positions for every drafter, the frozen head in the trainer's dtype). A drafter
trained on another machine's store has read most of these training responses, not all: greedy decoding in bf16
differs between CPUs where logits nearly tie.

`--against` scores a second drafter of the same kind on the same held-out responses and prints the paired
difference (drafter minus against) of each agreement figure: the mean over responses and a 95% bootstrap
interval over them, so two training runs that differ by a point can be told apart from noise.
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


def paired(a: list[dict[str, float]], b: list[dict[str, float]], draws: int = 2000,
           seed: int = 0) -> dict[str, list[float]]:
    """Per agreement key, [mean, 2.5%, 97.5%] of a - b over paired responses, the interval by bootstrap."""
    rng = random.Random(seed)
    n, out = len(a), {}
    for key in sorted(k for k in a[0] if k.startswith("acc")):
        d = [x[key] - y[key] for x, y in zip(a, b)]
        means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
        out[key] = [round(sum(d) / n, 4), round(means[int(0.025 * draws)], 4), round(means[int(0.975 * draws) - 1], 4)]
    return out


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    """The figures of `evaluate(obj, samples)` from each sample's own `evaluate(obj, [sample])`."""
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--kind", choices=KINDS, default="eagle4")
    ap.add_argument("--drafter", type=Path, help="drafter folder (default: the bundled one of --kind)")
    ap.add_argument("--against", type=Path, help="a second drafter folder of --kind: paired differences held out")
    ap.add_argument("--data", type=Path, default=Path("runs/train-data"), help="a `specbench train-data` folder")
    ap.add_argument("--rows", type=int, default=89, help="greedy training responses drawn (held out: all)")
    ap.add_argument("--category", action="append", help="only responses to rows of this category (repeatable)")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    folder = a.drafter or ROOT / f"reference_eagle4/drafters/smollm2-135m-{a.kind}"
    checks = [(folder / "config.json", "--drafter"), (a.data / "features", "--data")]
    if a.against:
        checks.append((a.against / "config.json", "--against"))
    for path, what in checks:
        if not path.exists():
            sys.exit(f"drafter_fit: {what}: {path} does not exist")
    torch.set_num_threads(a.threads)
    from reference_eagle4.model import load_transformer
    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        target = load_transformer(resolve_target(a.target), torch.float32)
    except WeightsError as e:
        sys.exit(f"drafter_fit: --target: {e}")

    def load(flag: str, path: Path):
        try:
            return objective(a.kind, path, target)
        except (ValueError, KeyError) as e:
            sys.exit(f"drafter_fit: {flag} {path}: not a {a.kind} drafter ({e})")

    obj = load("--drafter", folder)
    other = load("--against", a.against) if a.against else None
    train_set, held = FeatureStore(a.data / "features").samples().split(obj.cfg.eval_frac)
    wanted = set(a.category or ())

    def greedy(samples):
        return [s for s in samples if not sampled(s) and (not wanted or s["category"] in wanted)]

    held, seen = greedy(held), greedy(train_set)
    random.Random(0).shuffle(seen)
    if not held or not seen:
        of = f" of {', '.join(sorted(wanted))}" if wanted else ""
        sys.exit(f"drafter_fit: --data {a.data}: no greedy {'held-out' if not held else 'training'} responses{of}")
    t0 = time.time()
    mine = [evaluate(obj, [s]) for s in held] if other else None       # per response, for the paired figures
    out = {"drafter": str(folder), "data": str(a.data),
           "held_out": {**(mean(mine) if mine else evaluate(obj, held)), "rows": len(held)},
           "training": {**evaluate(obj, seen[: a.rows]), "rows": len(seen[: a.rows])}}
    if other is not None and mine:
        theirs = [evaluate(other, [s]) for s in held]
        out["against"] = {"drafter": str(a.against), "held_out": mean(theirs),
                          "difference_held_out": paired(mine, theirs)}
    out["seconds"] = round(time.time() - t0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
