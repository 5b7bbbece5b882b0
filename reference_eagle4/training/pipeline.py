"""`train_drafter`: the whole self-distillation pipeline (regenerate -> features -> TTT train -> export).

Everything lives in one folder and every stage resumes: regen.jsonl (rows appended as they finish),
features.pt (rebuilt only when the regenerated rows change), ckpt.pt (every few minutes), train.log,
state.json (seconds spent per stage, summed over resumed runs) and drafter/ (the fp16 export: config.json,
model.safetensors without the target's embedding or lm_head, README.md model card).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.training.train import TrainConfig

DEFAULT_POOL = Path(__file__).resolve().parents[2] / "data" / "train-pool.jsonl"


class _Log:
    def __init__(self, path: Path, echo: bool):
        self.fh = open(path, "a", encoding="utf-8")
        self.echo = echo

    def __call__(self, msg: str) -> None:
        line = time.strftime("%Y-%m-%d %H:%M:%S ") + msg
        self.fh.write(line + "\n")
        self.fh.flush()
        if self.echo:
            print(line, flush=True)


def _state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"seconds": {}}


def _save_state(path: Path, st: dict[str, Any]) -> None:
    path.write_text(json.dumps(st, indent=2) + "\n")


def train_drafter(kind: str = "eagle4", out_dir: str | Path = "runs/train-eagle4",
                  pool_path: str | Path | None = None, target: str = "smollm2-135m",
                  minutes: float | None = 90.0, steps: int | None = None, seed: int = 0, resume: bool = True,
                  regen_minutes: float | None = None, regen_limit: int | None = None,
                  max_new_tokens: int = 160, concurrency: int = 8, threads: int | None = 2,
                  regen_method: str = "ngram",
                  train_config: TrainConfig | None = None, progress: bool = True, echo: bool = True,
                  log: Callable[[str], None] | None = None) -> Path:
    """Train a drafter for `target` from `pool_path`; return the exported drafter folder.

    minutes: wall budget for the whole pipeline (regen gets `regen_minutes`, default a third; training
    gets what is left after the features, minus a small export margin). The defaults reproduce the shipped
    drafter (TrainConfig defaults; greedy regeneration with prompt-lookup speculation, 160 new tokens). steps: fixed optimizer steps
    instead of a time-based schedule. resume=False starts over (the folder's files are replaced).
    """
    if kind != "eagle4":
        raise ValueError(f"train_drafter knows kind='eagle4' only, got {kind!r}")
    from reference_eagle4.model import load_transformer
    from reference_eagle4.training.features import build_features
    from reference_eagle4.training.regenerate import regenerate
    from reference_eagle4.training.train import train
    from reference_eagle4.weights import resolve_target, weights_sha256

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in ("regen.jsonl", "features.pt", "ckpt.pt", "state.json"):
            (out / name).unlink(missing_ok=True)
    say = log or _Log(out / "train.log", echo)
    if threads:
        torch.set_num_threads(threads)
    pool = Path(pool_path) if pool_path else DEFAULT_POOL
    folder = resolve_target(target)
    st_path = out / "state.json"
    st = _state(st_path)
    secs = st["seconds"]
    say(f"pipeline: target {target} ({folder}), pool {pool}, budget {minutes} min, steps {steps}, seed {seed}")

    # 1. regenerate responses with the target
    if regen_minutes is None:
        regen_minutes = (minutes or 90.0) / 3
    left = regen_minutes - secs.get("regen", 0.0) / 60
    if left > 0.05:
        t0 = time.time()
        regenerate(pool, out / "regen.jsonl", folder, max_new_tokens=max_new_tokens, concurrency=concurrency,
                   seed=seed, limit=regen_limit, minutes=left, method=regen_method,
                   budget=8 if regen_method == "ngram" else 1, log=say)
        secs["regen"] = secs.get("regen", 0.0) + time.time() - t0
        _save_state(st_path, st)

    # 2. teacher-forced features
    t0 = time.time()
    samples = build_features(out / "regen.jsonl", folder, out / "features.pt", log=say)
    if time.time() - t0 > 5:
        secs["features"] = secs.get("features", 0.0) + time.time() - t0
        _save_state(st_path, st)

    # 3. TTT training
    cfg = train_config or TrainConfig()
    cfg.seed = seed
    if steps is not None:
        cfg.steps = steps
    if minutes is not None:
        spent = sum(v for k, v in secs.items() if k != "train") / 60
        cfg.minutes = max(1.0, minutes - spent - 3.0)
    t0 = time.time()
    tgt = load_transformer(folder, torch.float32)
    drafter, state = train(samples, tgt, out, cfg, resume=resume, log=say, progress=progress)
    secs["train"] = state["elapsed"]
    _save_state(st_path, st)

    # 4. export (fp16, no embedding / lm_head) + model card
    n_tok = sum(len(s["tokens"]) - s["prompt_len"] for s in samples)
    info = {
        "target": target, "target_weights_sha256": weights_sha256(folder), "pool": str(pool),
        "samples": len(samples), "response_tokens": n_tok, "steps": state["step"], "epochs": state["epoch"],
        "seconds": {k: round(v) for k, v in secs.items()}, "wall_minutes": round(sum(secs.values()) / 60, 1),
        "eval": state.get("eval", {}), "train_config": asdict(cfg), "regen": {
            "max_new_tokens": max_new_tokens, "concurrency": concurrency, "decoding": f"greedy ({regen_method})",
            "dtype": "bfloat16 (packed)"},
        "last_log": state["history"][-1] if state["history"] else {},
    }
    dest = export(drafter, out / "drafter", info)
    st["info"] = info
    _save_state(st_path, st)
    say(f"pipeline: exported {dest} ({json.dumps(info['eval'])})")
    return dest


def export(drafter, folder: str | Path, info: dict[str, Any]) -> Path:
    from reference_eagle4.weights import sha256_file

    folder = Path(folder)
    drafter.save(folder, torch.float16, extra={"training": info})
    sha = sha256_file(folder / "model.safetensors")
    (folder / "README.md").write_text(model_card(drafter, info, sha))
    return folder


def model_card(drafter, info: dict[str, Any], sha: str) -> str:
    c = drafter.cfg
    ev = info.get("eval", {})
    acc = ", ".join(f"step {k[3:]}: {v:.3f}" for k, v in ev.items() if k.startswith("acc"))
    measured = info.get("measured", {})
    lines = [
        f"# EAGLE-4 drafter for {info['target']}",
        "",
        "An EAGLE-3 style one-layer drafter (fc over the hidden states entering target layers "
        f"{list(c.capture_layers)}, input [norm(embed(x_t+1)), norm(h_t)]) with sliding-window attention "
        f"(W = {c.window}) and a low-rank candidate head (rank {c.rank}, K = {c.topk_candidates} exact rows). "
        "The target's embedding and lm_head are shared at run time and are not in this checkpoint.",
        "",
        "| | |", "|---|---|",
        f"| target | {info['target']} (weights sha256 `{info['target_weights_sha256'][:16]}…`) |",
        f"| parameters | {sum(p.numel() for p in drafter.parameters()) / 1e6:.2f} M (fp16) |",
        f"| draft vocabulary | {c.draft_vocab_size or c.vocab_size} tokens"
        + (" (d2t: the ids with the most teacher mass)" if c.draft_vocab_size else "") + " |",
        f"| model.safetensors sha256 | `{sha}` |",
        f"| training data | {info['samples']} prompts from `{Path(info['pool']).name}` (disjoint from the "
        f"benchmark sets), responses regenerated greedily by the target (≤ {info['regen']['max_new_tokens']} new "
        f"tokens), {info['response_tokens']} response tokens |",
        f"| training | TTT {info['train_config']['ttt_steps']} unrolled steps, soft CE vs the target's top-32 "
        f"distribution, weights 0.8^j; AdamW lr {info['train_config']['lr']}; {info['steps']} steps "
        f"({info['epochs']} full epochs), seed {info['train_config']['seed']} |",
        f"| wall time | {info['wall_minutes']} min on a 2-core CPU ({info['seconds']}) |",
        f"| held-out top-1 agreement with the target | {acc or 'n/a'} |",
        f"| low-rank recall@K (held out) | target argmax {ev.get('lr_recall', float('nan')):.3f}, "
        f"drafter argmax {ev.get('lr_recall_draft', float('nan')):.3f} |",
    ]
    for k, v in measured.items():
        lines.append(f"| {k} | {v} |")
    lines += ["", "Load it with `reference_eagle4.drafters.load_drafter(folder)`; the `eagle4-chain` and "
              "`eagle4-tree` methods use it by default for this target.", ""]
    return "\n".join(lines)
