"""Training-time test (TTT) training of the EAGLE-4 drafter against the target's own distributions.

Per sample (prompt + regenerated response, features from features.py):
  step 0: pairs (feature_t, token_{t+1}) at position t for every t; causal sliding-window attention.
  step j: row t takes step j-1's pre-norm output at row t and token_{t+1+j}, at position t+j; it sees the
          step-0 keys at positions <= t inside the window (p > t+j-W) plus only the DIAGONAL keys of steps
          1..j at row t (its own chain), exactly what a depth-j node sees at draft time.
  loss:   soft cross-entropy against the target's next-token distribution (top-k cached, optionally
          sharpened: `teacher`), on rows whose predicted token lies in the response; total = sum_j 0.8^j L_j.
  head:   the low-rank factors A, B get their own loss on the (detached) normed drafter states:
          cross-entropy of softmax((h A) B) against the drafter's own full-head distribution, which keeps
          the token the full head would draft among the low-rank top-K that serving scores exactly. Recall@K
          of the full head's argmax and of the target's is logged.
AdamW (betas 0.9/0.95), linear warmup + cosine decay, gradient clipping, a seed for init and data order,
checkpoints every few minutes (atomic), exact resume (step, epoch, cursor, optimizer, RNG), a rich progress
bar and a plain log file.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.device import resolve_device, resolve_dtype, upload
from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
from reference_eagle4.training.store import is_sampled

if TYPE_CHECKING:
    from reference_eagle4.training.block import BlockObjective


@dataclass
class TrainConfig:
    ttt_steps: int = 5
    decay: float = 0.8
    lr: float = 2e-3
    lr_lowrank: float = 1e-3
    weight_decay: float = 0.0
    feature_noise: float = 0.0        # eagle4: Gaussian noise on the target features while training, relative to
                                      # each feature's RMS at its position (a regulariser; EAGLE adds uniform noise)
    warmup_frac: float = 0.04
    min_lr_ratio: float = 0.1
    accum: int = 1                    # samples per optimizer step
    steps: int | None = None          # optimizer steps; None = `epochs` passes, else as many as `minutes` allow
    epochs: float | None = None       # passes over the training records (steps = epochs x records / accum)
    minutes: float | None = None
    curve_tokens: tuple[int, ...] = ()  # evaluate once training has read each of these many response tokens
    seed: int = 0
    ckpt_every_s: float = 180.0
    lowrank_weight: float = 1.0
    window: int | None = 256
    rank: int = 64
    topk_candidates: int = 64
    mlp_width: int | None = None      # eagle4 MLP intermediate size; None = the target's. Wider than init_from's
                                      # grows that drafter: its function is kept, the new channels start silent
    init_std: float = 0.02
    init_passthrough: bool = True     # fc starts as [0, 0, I]: the residual stream begins at the high feature
    eval_frac: float = 0.05
    max_rows: int = 384               # loss rows per sample (longer responses use their first rows)
    lowrank_rows: int = 96            # rows per sample for the low-rank head loss (random subset)
    vocab: int | None = 32768         # draft vocabulary size (d2t, most teacher mass); None = full vocabulary
    threads: int | None = None
    dtype: str = "auto"              # the frozen head's matmuls: auto = bf16 with native CPU support, else fp32
    device: str = "cpu"               # where the drafter trains: auto, cpu, cuda or cuda:N
    # dflash / dspark (training/block.py)
    block_size: int = 16
    layers: int = 2
    anchors: int = 32                 # blocks per sample and optimizer step
    teacher_temp: float = 1.0         # the teacher's temperature (`teacher`): below 1 sharpens it, 0 = hard labels
    gamma: float = 2.0                # row k's loss weight exp(-(k-1)/gamma): the first rows decide acceptance
    markov_rank: int = 64             # dspark's Markov head rank
    confidence_weight: float = 1.0
    init_from: str | None = None      # a trained drafter folder to continue from (eagle4: same shape and draft
                                      # vocabulary; dflash/dspark: a dflash drafter whose backbone starts this one)


class HeadSoftCE(torch.autograd.Function):
    """Per-row soft cross-entropy of softmax(hn @ W.T) against a sparse teacher (top_p at top_i), fused.

    The logits are one matmul in W's dtype (bf16 where the CPU has it natively); backward forms
    softmax - teacher in place and multiplies back by W, so the [rows, V] tensor is touched a handful
    of times instead of once per autograd op. W gets a
    gradient only when it requires one (DSpark's Markov factor rides in W's last columns).
    Returns (loss per row, argmax per row).
    """

    @staticmethod
    def forward(ctx, hn: Tensor, W: Tensor, top_p: Tensor, top_i: Tensor):  # type: ignore[override]
        z = (hn.to(W.dtype) @ W.T).float()
        lse = z.logsumexp(-1)
        loss = lse - (z.gather(1, top_i) * top_p).sum(-1)
        arg = z.argmax(-1)
        ctx.save_for_backward(z, lse, W, top_p, top_i, hn)
        ctx.hn_dtype = hn.dtype
        ctx.mark_non_differentiable(arg)
        return loss, arg

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_arg: Tensor):  # type: ignore[override]
        z, lse, W, top_p, top_i, hn = ctx.saved_tensors
        grad = z.sub_(lse[:, None]).exp_().mul_(g_loss[:, None])
        grad.scatter_add_(1, top_i, -top_p * g_loss[:, None])
        grad = grad.to(W.dtype)
        g_w = (grad.T @ hn.to(W.dtype)) if ctx.needs_input_grad[1] else None
        return (grad @ W).to(ctx.hn_dtype), g_w, None, None


def teacher(tp: Tensor, ti: Tensor, t2d: Tensor | None, temp: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """(probabilities, draft ids, keep): the teacher rows a drafter learns from, out of the target's cached
    top-k (tp [..., k] probabilities of the target ids ti, best first).

    With a draft vocabulary (t2d: target id -> draft index or -1) the ids are mapped into it and the mass
    outside it dropped; a row whose argmax lies outside is not kept (EAGLE-3 masks it). Then the rows are
    sharpened: tp^(1/temp) renormalised, temp = 0 the argmax alone (hard labels). Greedy verification accepts
    only the target's argmax, so a sharper teacher spends the drafter's capacity on that token rather than on
    the shape of the tail."""
    keep = torch.ones(ti.shape[:-1], dtype=torch.bool, device=ti.device)
    if t2d is not None:
        ti = t2d[ti]
        tp = tp * (ti >= 0)
        keep = ti[..., 0] >= 0
        ti = ti.clamp(min=0)
    if temp == 0:
        tp = torch.zeros_like(tp)
        tp[..., 0] = 1.0
    elif temp != 1:
        tp = tp ** (1.0 / temp)
    return tp / tp.sum(-1, keepdim=True).clamp(min=1e-9), ti, keep


def draft_vocab(samples: list[dict[str, Any]], size: int, vocab_size: int) -> Tensor:
    """The `size` tokens with the most teacher probability mass in the data (ascending ids, like EAGLE-3).

    Tokens the data never shows are ranked by id (BPE merge order, roughly frequency) through a tiny prior."""
    mass = 1e-9 * (1.0 - torch.arange(vocab_size, dtype=torch.float64) / vocab_size)
    for s in samples:
        mass.index_add_(0, s["top_i"].reshape(-1).long(), s["top_p"].reshape(-1).double())
        mass.index_add_(0, s["tokens"].long(), torch.full((len(s["tokens"]),), 1e-3, dtype=torch.float64))
    return mass.topk(min(size, vocab_size)).indices.sort().values


def draft_index(d2t: Tensor | None, head: Tensor, vocab_size: int) -> tuple[Tensor, Tensor | None]:
    """(head rows of the draft vocabulary, target id -> draft index or -1); (head, None) for the full one."""
    if d2t is None:
        return head, None
    t2d = torch.full((vocab_size,), -1, dtype=torch.long, device=head.device)
    t2d[d2t] = torch.arange(d2t.numel(), device=head.device)
    return head[d2t].contiguous(), t2d


def split(samples: Sequence[dict[str, Any]], eval_frac: float) -> tuple[Sequence[dict], Sequence[dict]]:
    """Deterministic train/eval split by pool row (independent of the seed and of the sample count); a
    FeatureStore's samples split themselves (every response to a prompt on one side)."""
    from reference_eagle4.training.store import held_out

    if hasattr(samples, "split"):
        return samples.split(eval_frac)
    ev = [s for s in samples if held_out(s["id"], eval_frac)]
    tr = [s for s in samples if not held_out(s["id"], eval_frac)]
    return tr, ev


class TTT:
    """The unrolled forward over one sample; shared by training and evaluation. It runs on the device of
    `embed`, where the drafter must be too; samples stay on the CPU and their tensors are uploaded per use."""

    def __init__(self, drafter: Eagle4Drafter, embed: Tensor, head: Tensor, cfg: TrainConfig):
        self.d, self.E, self.cfg = drafter, embed, cfg
        self.device = embed.device
        c = drafter.cfg
        self.W, self.t2d = draft_index(drafter.d2t, head, c.vocab_size)
        self.rep = c.num_attention_heads // c.num_key_value_heads
        self.scale = 1.0 / math.sqrt(c.head_dim)

    def _qkv(self, h: Tensor, tok: Tensor, pos: Tensor, fuse: bool) -> tuple[Tensor, ...]:
        d = self.d
        if fuse:
            h = d.fc(h)
        e = F.embedding(tok, self.E)
        x = torch.cat([d.input_norm(e), d.hidden_norm(h)], -1)
        q, k, v = d.project(x[None], pos[None])
        return h, q, k.repeat_interleave(self.rep, 1), v.repeat_interleave(self.rep, 1)

    def unroll(self, feats: Tensor, tokens: Tensor, r0: int, r1: int):
        """Yield (j, Q, g_j) for j = 0..ttt_steps-1: the pre-norm outputs of rows Q = r0..r1-1 at step j.

        Row t at step j holds token x_{t+1+j} at position t+j (the depth-j node after accepted position t)."""
        cfg, d = self.cfg, self.d
        T = tokens.numel()
        n = feats.shape[0]                           # pairs 0..n-1 serve as step-0 keys
        Q = torch.arange(r0, r1, device=self.device)
        W = cfg.window
        key = torch.arange(n, device=self.device)
        h0, q, K0, V0 = self._qkv(feats, tokens[1: n + 1], key, fuse=True)
        diag_k: list[Tensor] = []
        diag_v: list[Tensor] = []
        g = h0[Q]
        for j in range(cfg.ttt_steps):
            h_in = g
            if j == 0:
                qj = q[:, :, Q]
            else:
                tok = tokens[(Q + 1 + j).clamp(max=T - 1)]
                _, qj, kj, vj = self._qkv(h_in, tok, Q + j, fuse=False)
                diag_k.append(kj)
                diag_v.append(vj)
            vis = key[None, :] <= Q[:, None]
            if W is not None:
                vis = vis & (key[None, :] > Q[:, None] + j - W)
            s0 = (qj @ K0.transpose(-1, -2)) * self.scale
            s0 = s0.masked_fill(~vis, float("-inf"))
            if j == 0:
                attn = s0.softmax(-1) @ V0
            else:
                sd = torch.stack([(qj * kk).sum(-1) for kk in diag_k], -1) * self.scale
                p = torch.cat([s0, sd], -1).softmax(-1)
                attn = p[..., :n] @ V0 + (p[..., n:, None] * torch.stack(diag_v, -2)).sum(-2)
            g = d.finish(h_in[None], attn.transpose(1, 2).flatten(2))[0]
            yield j, Q, g

    def perturb(self, feats: Tensor) -> Tensor:
        """feats [n, layers x H] plus noise of std `feature_noise` x the RMS of each layer's feature at that
        position: the captured layers differ tenfold in scale, and a first-token feature a hundredfold."""
        f = feats.view(feats.shape[0], -1, self.d.cfg.target_hidden_size)            # [n, layers, H]
        rms = f.pow(2).mean(-1, keepdim=True).sqrt()
        return (f + torch.randn_like(f) * rms * self.cfg.feature_noise).reshape(feats.shape)

    def steps(self, s: dict[str, Any]) -> Iterator[tuple[int, Tensor, Tensor]]:
        """Yield (j, g_j at the rows whose prediction lies in the response, their teacher rows) for j = 0..;
        the teacher row indexes s["top_p"] / s["top_i"] (the target distribution at position t+1+j)."""
        tokens = upload(s["tokens"], self.device).long()
        T, P = tokens.numel(), s["prompt_len"]
        r0 = max(P - 2, 0)
        r1 = min(T - 2, r0 + self.cfg.max_rows)      # rows r0..r1-1 (predict x_{t+2}, inside the response)
        if r1 <= r0:
            return
        n = min(T - 1, r1)
        feats = upload(s["feats"][:n], self.device).float().reshape(n, -1)
        if self.cfg.feature_noise > 0 and torch.is_grad_enabled():    # training only: evaluate runs without grad
            feats = self.perturb(feats)
        for j, Q, g in self.unroll(feats, tokens, r0, r1):
            valid = min(r1, T - 2 - j) - r0          # the first rows, whose predicted token x_{t+2+j} exists
            if valid <= 0:
                return
            yield j, g[:valid], Q[:valid] + 1 + j - (P - 1)

    def run(self, s: dict[str, Any], stats: dict[str, list[Tensor]] | None = None) -> Tensor:
        cfg, d = self.cfg, self.d
        top_p, top_i = upload(s["top_p"], self.device).float(), upload(s["top_i"], self.device).long()
        total = torch.zeros((), requires_grad=True, device=self.device)
        for j, g, rows in self.steps(s):
            tp, ti, keep = teacher(top_p[rows], top_i[rows], self.t2d, cfg.teacher_temp)
            hn = d.norm(g)
            if self.t2d is not None:
                if not bool(keep.any()):
                    continue
                hn, tp, ti = hn[keep], tp[keep], ti[keep]
            per_row, arg = HeadSoftCE.apply(hn, self.W, tp, ti)
            lj = per_row.mean()
            total = total + (cfg.decay ** j) * lj
            if stats is not None:
                stats.setdefault(f"loss{j}", []).append(lj.detach())
                stats.setdefault(f"acc{j}", []).append((arg == ti[:, 0]).float().mean())
            if j == 0 and cfg.lowrank_weight > 0:
                sub = upload(torch.randperm(hn.shape[0])[: cfg.lowrank_rows], self.device)
                h_sub = hn.detach()[sub]
                with torch.no_grad():                      # [rows, draft vocab]: what the full head drafts from
                    full = (h_sub.to(self.W.dtype) @ self.W.T).float().softmax(-1)
                sc = d.lowrank_scores(h_sub)
                ll = F.cross_entropy(sc, full)
                total = total + cfg.lowrank_weight * ll
                if stats is not None:
                    K = d.cfg.topk_candidates
                    cand = sc.detach().topk(K, -1).indices
                    stats.setdefault("lr_loss", []).append(ll.detach())
                    stats.setdefault("lr_recall", []).append((cand == ti[sub, :1]).any(-1).float().mean())
                    stats.setdefault("lr_recall_draft", []).append((cand == arg[sub, None]).any(-1).float().mean())
        return total


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    warm = max(1, int(cfg.warmup_frac * total))
    if step < warm:
        return (step + 1) / warm
    prog = min(1.0, (step - warm) / max(1, total - warm))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))


def planned_total(step: int, per_step_s: float, left_s: float) -> int:
    """The step count a time-budgeted run plans its schedule for: the steps done plus those the time left
    allows at the measured pace, with 3% to spare, so the cosine reaches its floor as the budget runs out."""
    return step + max(2, int(left_s / per_step_s * 0.97))


def build_drafter(target_args, cfg: TrainConfig, embed: Tensor, head: Tensor,
                  d2t: Tensor | None = None) -> Eagle4Drafter:
    torch.manual_seed(cfg.seed)
    width = {"intermediate_size": cfg.mlp_width} if cfg.mlp_width else {}
    dcfg = Eagle4Config.for_target(target_args, window=cfg.window, rank=cfg.rank,
                                   topk_candidates=cfg.topk_candidates, **width,
                                   draft_vocab_size=None if d2t is None else int(d2t.numel()))
    d = Eagle4Drafter(dcfg)
    if d2t is not None:
        d.d2t = d2t.clone()
    g = torch.Generator().manual_seed(cfg.seed)
    d.reset_parameters(std=cfg.init_std, generator=g)
    if cfg.init_from:
        continue_from(d, cfg.init_from)
    elif cfg.init_passthrough:
        H, Ht = d.cfg.hidden_size, d.cfg.target_hidden_size
        with torch.no_grad():
            d.fc.weight[:, -Ht:] += torch.eye(H, Ht)
    d.attach(embed, head)                        # SVD init of A, B from the target's lm_head (when untrained)
    return d.train()


def continue_from(d: Eagle4Drafter, folder: str) -> None:
    """Start from a trained EAGLE-4 drafter: more training on new data costs a fraction of starting over.
    Shape, window and draft vocabulary must match (the low-rank head rows are indexed through it); a wider MLP
    than the saved one grows it (`grow_mlp`), so added capacity starts from what was already learnt."""
    from reference_eagle4.drafters.eagle4_model import load_drafter

    src = load_drafter(folder)
    keys = ("hidden_size", "intermediate_size", "capture_layers", "window", "rank", "topk_candidates",
            "draft_vocab_size", "kind")
    diff = [k for k in keys if getattr(src.cfg, k) != getattr(d.cfg, k)]
    grow = src.cfg.intermediate_size < d.cfg.intermediate_size
    if grow:
        diff.remove("intermediate_size")
    if diff:
        raise ValueError(f"{folder}: its {', '.join(diff)} differ from this run's; continue only a drafter of the "
                         "same configuration (or a narrower MLP)")
    state = src.state_dict()
    if grow:
        state.update(grow_mlp(state["gate_up.weight"], state["down.weight"], d.gate_up.weight, d.down.weight))
    d.load_state_dict(state)
    d.lowrank_ready = src.lowrank_ready


def grow_mlp(gate_up: Tensor, down: Tensor, new_gate_up: Tensor, new_down: Tensor) -> dict[str, Tensor]:
    """A wider MLP computing the same function: the old channels first, the new ones with the fresh gate and
    up rows of `new_gate_up` and zero down columns (they learn from the first step, as LoRA's B = 0 does)."""
    inter = down.shape[1]
    wide = new_down.shape[1]
    g, u = gate_up.split(inter)
    ng, nu = new_gate_up.detach().split(wide)
    down_w = torch.zeros_like(new_down)
    down_w[:, :inter] = down
    return {"gate_up.weight": torch.cat([g, ng[inter:], u, nu[inter:]]), "down.weight": down_w}


def _optimizer(d: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    lowrank = list(d.lr_a.parameters()) + list(d.lr_b.parameters()) if isinstance(d, Eagle4Drafter) else []
    ids = {id(p) for p in lowrank}
    rest = [p for p in d.parameters() if id(p) not in ids and p.requires_grad]
    return torch.optim.AdamW([{"params": rest, "lr": cfg.lr}, {"params": lowrank, "lr": cfg.lr_lowrank}],
                             betas=(0.9, 0.95), weight_decay=cfg.weight_decay)


def sampled(s: Any) -> bool:
    return is_sampled(str(s["id"]))


def _mean(xs: Sequence[Tensor]) -> float:
    """The mean of logged values; the objectives log 0-d tensors, read here rather than where they are made,
    so the device is not waited for inside a step."""
    return sum(float(x) for x in xs) / len(xs) if xs else float("nan")


@torch.no_grad()
def evaluate(ttt: TTT, samples: list[dict[str, Any]]) -> dict[str, float]:
    """Mean metrics over `samples`. The rows an objective samples (block anchors, TTT rows) come from a fixed
    seed, so two drafters evaluated on the same records are scored on the same positions; the caller's random
    streams (the CPU's, and the GPU's the objective runs on) are left as they were."""
    stats: dict[str, list[Tensor]] = {}
    ttt.d.eval()
    with torch.random.fork_rng(devices=[ttt.device] if ttt.device.type == "cuda" else []):
        torch.manual_seed(0)
        for s in samples:
            ttt.run(s, stats)
    ttt.d.train()
    return {k: round(_mean(v), 4) for k, v in sorted(stats.items())}


def read_greedy(train_set: Sequence[Any], perm: list[int], state: dict[str, Any],
                rows: int = 64) -> list[Any]:
    """Up to `rows` greedy training responses this run has read: the current pass's first, then, once a whole
    pass is done, any. Agreement on them beside the held-out figure shows how much of what the run fits carries
    over to unseen prompts (responses read minutes ago score above older ones: `tools/drafter_fit.py` draws
    training responses at random instead)."""
    order = perm[: state["cursor"]] + (perm[state["cursor"]:] if state["epoch"] > 0 else [])
    return list(islice((s for s in (train_set[i] for i in order) if not sampled(s)), rows))


def curve_point(ttt: TTT, at: int, state: dict[str, Any], held: Sequence[Any], train_set: Sequence[Any],
                perm: list[int]) -> dict[str, Any]:
    """One learning-curve point: agreement on the greedy held-out responses and on greedy training responses
    this pass has already read (`read_greedy`)."""
    seen = read_greedy(train_set, perm, state)
    return {"at": at, "tokens": state["tokens"], "step": state["step"], "held_out": evaluate(ttt, held),
            "seen": evaluate(ttt, seen) if seen else {}, "seen_rows": len(seen)}


KINDS = ("eagle4", "dflash", "dspark")


def target_weights(target) -> tuple[Tensor, Tensor]:
    """The target's embedding (fp32) and lm_head ([V, H], its dtype), on the CPU: drafters are built there, so
    a seed gives the same drafter whatever device trains it."""
    head = getattr(target.lm_head, "weight", None)
    head = head if head is not None else target.embed.weight
    return target.embed.weight.detach().float().cpu(), head.detach().cpu()


def make_objective(kind: str, target, cfg: TrainConfig, d2t: Tensor | None,
                   device: torch.device) -> TTT | BlockObjective:
    """A fresh drafter of `kind` (or cfg.init_from's) and its training objective, both on `device`: TTT for
    eagle4, the block objective for dflash / dspark. The frozen head's matmuls run in cfg.dtype there."""
    embed, head = target_weights(target)
    head32 = head.float()
    if kind == "eagle4":
        d = build_drafter(target.args, cfg, embed, head32, d2t)
    else:
        from reference_eagle4.training.block import build_block_drafter
        d = build_block_drafter(target.args, cfg, kind, embed, head32, d2t)
    embed = embed.to(device)
    if device.type != "cpu":         # attach()'s shared weights are plain attributes, which .to() leaves behind
        d = d.to(device).attach(embed, head32.to(device))
    head_w = head.to(device, resolve_dtype(cfg.dtype, device)).contiguous()
    if kind == "eagle4":
        return TTT(d, embed, head_w, cfg)
    from reference_eagle4.training.block import BlockObjective
    return BlockObjective(d, embed, head_w, cfg)


def rng_state(device: torch.device) -> dict[str, Tensor]:
    """The random streams a checkpoint keeps: the CPU's, and the GPU's when training on one."""
    return {"rng": torch.get_rng_state(), **({"cuda_rng": torch.cuda.get_rng_state(device)}
                                             if device.type == "cuda" else {})}


def set_rng_state(ck: dict[str, Any], device: torch.device) -> None:
    """Restore what `rng_state` kept (a checkpoint written on a GPU resumes on the CPU too)."""
    torch.set_rng_state(ck["rng"])
    if device.type == "cuda" and "cuda_rng" in ck:
        torch.cuda.set_rng_state(ck["cuda_rng"], device)


def train(samples: list[dict[str, Any]], target, out_dir: str | Path, cfg: TrainConfig, resume: bool = True,
          log: Callable[[str], None] = print, progress: bool = True,
          stop_after: int | None = None, kind: str = "eagle4") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train (or resume) a drafter of `kind` on feature samples; checkpoints live in out_dir/ckpt.pt.

    stop_after: leave after this many steps of this call (checkpointed), as an interruption would."""
    if kind not in KINDS:
        raise ValueError(f"drafter kind must be one of {KINDS}, got {kind!r}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "ckpt.pt"
    d2t = None
    if cfg.vocab and cfg.vocab < target.args.vocab_size:
        ck_vocab = torch.load(ckpt_path, weights_only=False, map_location="cpu")["drafter"].get("d2t") \
            if resume and ckpt_path.exists() else None
        if ck_vocab is None and cfg.init_from:          # continued training keeps the drafter's vocabulary
            from reference_eagle4.drafters.dflash_model import load_dflash
            from reference_eagle4.drafters.eagle4_model import load_drafter
            ck_vocab = (load_drafter if kind == "eagle4" else load_dflash)(cfg.init_from).d2t
        d2t = ck_vocab if ck_vocab is not None else draft_vocab(samples, cfg.vocab, target.args.vocab_size)
    ttt = make_objective(kind, target, cfg, d2t, device)
    d = ttt.d
    opt = _optimizer(d, cfg)
    train_set, eval_set = split(samples, cfg.eval_frac)
    if not train_set:
        train_set = samples
    held_apart = bool(eval_set)
    if not eval_set:                     # nothing held out: report on (part of) the training data
        eval_set = train_set[:16]
    # decoding is greedy: the headline agreement is on greedy held-out responses, sampled ones beside it
    eval_sampled = [s for s in eval_set if sampled(s)]
    eval_set = [s for s in eval_set if not sampled(s)] or eval_set
    total = cfg.steps or (math.ceil(cfg.epochs * len(train_set) / cfg.accum) if cfg.epochs else None)
    state = {"step": 0, "epoch": 0, "cursor": 0, "total": total, "elapsed": 0.0, "history": [], "tokens": 0,
             "curve": []}
    if resume and ckpt_path.exists():
        ck = torch.load(ckpt_path, weights_only=False, map_location="cpu")
        d.load_state_dict(ck["drafter"])
        opt.load_state_dict(ck["optimizer"])       # its state moves to the parameters' device
        state = {"tokens": 0, "curve": [], **ck["state"]}    # checkpoints from before the curve lack these
        set_rng_state(ck, device)
        log(f"train: resumed at step {state['step']}/{state['total']} (epoch {state['epoch']}, "
            f"{state['elapsed']:.0f} s trained)")
    else:
        log(f"train: {len(train_set)} train / {len(eval_set)} eval samples, config {json.dumps(asdict(cfg))}")
        if cfg.init_from:                # the starting point on this run's held-out split, for comparison
            state["eval_start"] = evaluate(ttt, eval_set)
            log(f"train: held-out eval of {cfg.init_from} before training {json.dumps(state['eval_start'])}")

    def order(epoch: int) -> list[int]:
        idx = list(range(len(train_set)))
        random.Random(cfg.seed * 1000 + epoch).shuffle(idx)
        return idx

    def save() -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"drafter": d.state_dict(), "optimizer": opt.state_dict(), "state": state, **rng_state(device),
                    "config": asdict(cfg), "drafter_config": d.cfg.to_json()}, tmp)
        tmp.replace(ckpt_path)

    budget_s = cfg.minutes * 60 if cfg.minutes else float("inf")
    t_start = time.time() - state["elapsed"]
    last_ckpt = time.time()
    if state["total"] is None and not cfg.minutes:
        raise ValueError("give steps or minutes")
    timed = not (cfg.steps or cfg.epochs)                 # the time budget sets the step count
    perm = order(state["epoch"])
    start_step = state["step"]
    t_mark, mark = time.time(), 0
    window: dict[str, list[Tensor]] = {}
    bar = Progress(TextColumn(f"[bold]{kind} train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                   TimeElapsedColumn(), TimeRemainingColumn(), disable=not progress)
    with bar:
        task = bar.add_task("train", total=state["total"] or 1, completed=state["step"], info="")
        while True:
            total = state["total"]
            if total is not None and state["step"] >= total:
                break
            if time.time() - t_start > budget_s:
                log("train: time budget reached")
                break
            if stop_after is not None and state["step"] - start_step >= stop_after:
                save()
                log(f"train: stopped after {stop_after} steps (step {state['step']})")
                return d, state
            t0 = time.time()
            for group, base in zip(opt.param_groups, (cfg.lr, cfg.lr_lowrank)):
                group["lr"] = base * lr_at(state["step"], total or 1000, cfg)
            opt.zero_grad(set_to_none=True)
            for _ in range(cfg.accum):
                if state["cursor"] >= len(perm):
                    state["epoch"] += 1
                    state["cursor"] = 0
                    perm = order(state["epoch"])
                s = train_set[perm[state["cursor"]]]
                state["cursor"] += 1
                state["tokens"] += len(s["tokens"]) - s["prompt_len"]
                loss = ttt.run(s, window) / cfg.accum
                loss.backward()
            torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            state["elapsed"] = time.time() - t_start
            for at in cfg.curve_tokens:
                if state["tokens"] >= at and all(p["at"] != at for p in state["curve"]):
                    state["curve"].append(curve_point(ttt, at, state, eval_set, train_set, perm))
                    log(f"train: curve {json.dumps(state['curve'][-1])}")
            done = state["step"] - start_step
            if timed and done >= 8 and (done - 8) % 50 == 0:
                # plan the schedule from the recent pace (first steps 3..8, past the first-call warm-up), again
                # every 50 steps: a few early steps misjudge it, and a run cut by the budget mid-cosine ends with
                # its learning rate still high
                per = (time.time() - t_mark) / (done - mark)
                state["total"] = planned_total(state["step"], per, budget_s - (time.time() - t_start))
                if done == 8:
                    log(f"train: {per:.2f} s/step measured -> {state['total']} steps in the time budget")
                bar.update(task, total=state["total"])
                t_mark, mark = time.time(), done
            if done == 2:
                t_mark, mark = time.time(), done
            key = "loss0" if kind == "eagle4" else "loss"
            acc = "acc0" if kind == "eagle4" else "acc1"
            info = f"{key} {_mean(window.get(key, [])[-20:]):.3f} {acc} {_mean(window.get(acc, [])[-20:]):.3f}"
            bar.update(task, completed=state["step"], info=info)
            if state["step"] % 20 == 0:
                summary = {k: round(_mean(v), 4) for k, v in sorted(window.items())}
                summary.update(step=state["step"], epoch=state["epoch"], lr=round(opt.param_groups[0]["lr"], 6),
                               s_per_step=round(time.time() - t0, 2), elapsed=round(state["elapsed"]))
                state["history"].append(summary)
                log("train: " + json.dumps(summary))
                window = {}
            if time.time() - last_ckpt > cfg.ckpt_every_s:
                save()
                last_ckpt = time.time()
                log(f"train: checkpoint at step {state['step']}")
    save()
    metrics = evaluate(ttt, eval_set)
    state["eval"] = metrics
    if eval_sampled:
        state["eval_sampled"] = evaluate(ttt, eval_sampled)
    seen = read_greedy(train_set, perm, state)
    if seen and held_apart:
        state["eval_seen"] = {**evaluate(ttt, seen), "rows": len(seen)}
        log(f"train: on {len(seen)} greedy training responses it read {json.dumps(state['eval_seen'])}")
    save()
    log(f"train: done at step {state['step']} ({state['elapsed']:.0f} s); eval {json.dumps(metrics)}")
    if device.type != "cpu":         # back on the CPU, as a loaded drafter is: exports hold CPU tensors
        embed, head = target_weights(target)
        d = d.cpu().attach(embed, head.float())
    d.eval().requires_grad_(False)
    if isinstance(d, Eagle4Drafter):
        d.lowrank_ready = True
    return d, state
