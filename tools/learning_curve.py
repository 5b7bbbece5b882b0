"""The EAGLE-4 learning curve: drafters trained from scratch on growing prefixes of a feature store (the order
the data was generated: greedy responses first, then sampled rounds), the same optimizer steps per training
token, each judged on the same held-out pool rows (top-1 agreement with the target at TTT steps 0-4).

    .venv/bin/python tools/learning_curve.py --features runs/train-data/features --sizes 120000,500000,2000000

Each size trains in OUT/<size>/ (checkpointed, so a rerun resumes), exports OUT/<size>/drafter and appends its
row to OUT/curve.jsonl; sizes the store cannot fill yet are skipped and named. Decoding AL: run
`specbench compare --methods eagle4-tree:drafter=OUT/<size>/drafter,... --budget 16 --concurrency 1` (printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_eagle4.training.store import FeatureStore, Samples, held_out  # noqa: E402
from reference_eagle4.training.train import TrainConfig, train  # noqa: E402


def prefix(store: FeatureStore, tokens: int, eval_frac: float) -> tuple[list[str], list[str], int]:
    """(training keys of the store's first `tokens` response tokens, every held-out key, tokens taken)."""
    train_keys, held, have = [], [], 0
    for key, e in store.entries.items():              # insertion order: the order the data was generated
        if e["prompt"] not in store.prompts:
            continue
        if held_out(e["prompt"], eval_frac):
            held.append(key)
        elif have < tokens:
            train_keys.append(key)
            have += e["n_out"]
    return train_keys, held, have


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", type=Path, required=True)
    ap.add_argument("--sizes", default="120000,500000,2000000", help="training response tokens per point")
    ap.add_argument("--steps-per-ktok", type=float, default=25.6,
                    help="optimizer steps per 1000 training tokens (the bundled drafter: 2995 on 117k)")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--out", type=Path, default=Path("runs/curve"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from reference_eagle4.model import load_transformer
    from reference_eagle4.weights import resolve_target

    store = FeatureStore(a.features)
    target = load_transformer(resolve_target(a.target), torch.float32)
    cfg0 = TrainConfig(seed=a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in a.sizes.split(",")):
        keys, held, have = prefix(store, size, cfg0.eval_frac)
        if have < size:
            print(f"size {size}: the store holds {have} training tokens; skipped (generate more, then rerun)")
            continue
        cfg = TrainConfig(seed=a.seed, steps=max(1, round(have / 1000 * a.steps_per_ktok)))
        folder = a.out / str(size)
        drafter, state = train(Samples(store, keys + held), target, folder, cfg, progress=False,
                               log=lambda m, f=folder: print(f"[{f.name}] {m}", flush=True))
        drafter.save(folder / "drafter", torch.float16,
                     extra={"curve": {"tokens": have, "records": len(keys), "steps": state["step"]}})
        row = {"size": size, "tokens": have, "records": len(keys), "held_out_records": len(held),
               "steps": state["step"], "seconds": round(state["elapsed"]), "eval": state["eval"]}
        with open(a.out / "curve.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        acc = ", ".join(f"{state['eval'][f'acc{j}']:.3f}" for j in range(cfg.ttt_steps) if f"acc{j}" in state["eval"])
        print(f"size {size}: {have} tokens, {state['step']} steps, held-out top-1 steps 0-4: {acc}")
        print(f"  AL: specbench compare --methods eagle4-tree:drafter={folder / 'drafter'} --budget 16 "
              "--concurrency 1 --max-new-tokens 128")


if __name__ == "__main__":
    main()
