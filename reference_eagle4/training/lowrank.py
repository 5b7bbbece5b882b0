"""The low-rank candidate head, measured and distilled against the drafter's own full head.

At draft time the head scores the draft vocabulary through rank r (lr_b(lr_a(hn))), keeps the top K and
computes exact logits only for those rows, so a draft equals the full head's argmax only when that token is
among the K. `recall` measures how often it is (and how often the target's argmax is) on the drafter's
normed states at every TTT step of held-out samples; `distil` fits A and B to the full head's distribution
on training states, the rest of the drafter frozen.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.training.train import TTT, TrainConfig, build_drafter


def load_ttt(folder: str | Path, target) -> TTT:
    """The TTT unroll of a saved EAGLE-4 drafter over `target` (the trainer's own code path)."""
    from reference_eagle4.drafters.eagle4_model import load_drafter

    src = load_drafter(folder)
    c = src.cfg
    cfg = TrainConfig(window=c.window, rank=c.rank, topk_candidates=c.topk_candidates,
                      mlp_width=c.intermediate_size, init_from=str(folder))
    embed = target.embed.weight.detach().float()
    head = getattr(target.lm_head, "weight", None)
    head = (head if head is not None else target.embed.weight).detach().float()
    d = build_drafter(target.args, cfg, embed, head, src.d2t).eval().requires_grad_(False)
    return TTT(d, embed, head, cfg)


@torch.no_grad()
def states(ttt: TTT, samples: Sequence[dict[str, Any]], max_rows: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(normed drafter states [N, H], TTT step of each, the target's argmax in draft-vocabulary ids or -1)."""
    hs, js, args = [], [], []
    for s in samples:
        top_i = s["top_i"].long()
        for j, g, rows in ttt.steps(s):
            hs.append(ttt.d.norm(g))
            js.append(torch.full((len(rows),), j))
            a = top_i[rows, 0]
            args.append(ttt.t2d[a] if ttt.t2d is not None else a)
        if max_rows is not None and sum(len(h) for h in hs) >= max_rows:
            break
    return torch.cat(hs), torch.cat(js), torch.cat(args)


@torch.no_grad()
def recall(ttt: TTT, hn: Tensor, target_arg: Tensor, ks: Sequence[int], chunk: int = 2048) -> dict[str, float]:
    """Share of rows whose full-head argmax is in the low-rank top-K, for each K; target@K: the same for the
    target's argmax, over the rows where it lies in the draft vocabulary."""
    d, top = ttt.d, max(ks)
    hit_full = torch.zeros(len(ks))
    hit_tgt = torch.zeros(len(ks))
    for lo in range(0, len(hn), chunk):
        h = hn[lo: lo + chunk]
        full = (h @ ttt.W.float().T).argmax(-1)
        cand = d.lowrank_scores(h).topk(top, -1).indices
        tgt = target_arg[lo: lo + chunk]
        for n, k in enumerate(ks):
            hit_full[n] += (cand[:, :k] == full[:, None]).any(-1).sum()
            hit_tgt[n] += ((cand[:, :k] == tgt[:, None]).any(-1) & (tgt >= 0)).sum()
    inside = int((target_arg >= 0).sum())             # rows whose target argmax is in the draft vocabulary
    out = {f"full@{k}": round(float(hit_full[n]) / len(hn), 4) for n, k in enumerate(ks)}
    out.update({f"target@{k}": round(float(hit_tgt[n]) / max(inside, 1), 4) for n, k in enumerate(ks)})
    return out


def distil(ttt: TTT, hn: Tensor, steps: int = 2000, batch: int = 512, lr: float = 2e-3, seed: int = 0,
           log: Callable[[str], None] = print) -> None:
    """Fit the drafter's A, B (in place) to softmax of the full head on training states `hn`."""
    d = ttt.d
    params = [d.lr_a.weight, d.lr_b.weight]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    W = ttt.W.float()
    t0 = time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + torch.cos(torch.tensor(step / steps * torch.pi))).item()
        h = hn[torch.randint(0, len(hn), (batch,), generator=g)]
        with torch.no_grad():
            teacher = (h @ W.T).softmax(-1)
        loss = F.cross_entropy(d.lowrank_scores(h), teacher)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"distil: step {step} loss {float(loss.detach()):.4f} ({time.time() - t0:.0f} s)")
    for p in params:
        p.requires_grad_(False)
