"""Training objective of the DFlash / DSpark block drafters (same samples and loop as the EAGLE-4 TTT).

Per sample, `anchors` random response positions a (the root: the last verified token) each get a block
[x_a, MASK x (B - 1)] at positions a .. a+B-1; the block sees the context rows at positions < a (the
verified prefix's target features) and the whole block, exactly the view the proposer has at run time.
Row k >= 1 is trained towards the target's distribution for x_{a+k} (soft cross-entropy on the cached
top-k), weighted exp(-(k - 1) / gamma) so early rows, which decide acceptance, count most.

DSpark adds the Markov bias from the teacher-forced previous token x_{a+k-1} to row k's logits (at run
time the previous token is the previous draft, which equals x_{a+k-1} whenever row k can still be
accepted), and trains the confidence head by binary cross-entropy on whether row k's argmax is the
target's argmax (its inputs detached: the head reads the backbone, it does not steer it).

Logged: loss, acc1 (row 1 top-1 = the target's), al (mean accepted drafts of a full-block greedy chain
under teacher forcing, i.e. leading correct rows), and for DSpark conf_bce.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.device import upload
from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter
from reference_eagle4.training.train import HeadSoftCE, TrainConfig, draft_index, teacher


class BlockObjective:
    """The block forward over one sample with many anchors; shared by training and evaluation. It runs on the
    device of `embed`, where the drafter must be too; anchors and the rows they pick are chosen on the CPU
    (no wait for the device) and uploaded."""

    def __init__(self, drafter: DFlashDrafter, embed: Tensor, head: Tensor, cfg: TrainConfig):
        self.d, self.cfg = drafter, cfg
        self.device = embed.device
        self.W, self.t2d = draft_index(drafter.d2t, head, drafter.cfg.vocab_size)
        B = drafter.cfg.block_size
        self.row_w = torch.tensor([math.exp(-(k - 1) / cfg.gamma) for k in range(1, B)], device=self.device)

    def block_hidden(self, s: dict[str, Any], anchors: Tensor) -> Tensor:
        """Pre-norm block outputs [n_a, B, H] for roots at the (ascending) positions `anchors` (on the CPU)."""
        d, dev = self.d, self.device
        Bk = d.cfg.block_size
        n_a, Tc = anchors.numel(), int(anchors.max())
        ctx = d.context(upload(s["feats"][:Tc], dev).to(d.fc.weight.dtype).reshape(Tc, -1))[None]
        on_dev = upload(anchors, dev)
        pos = on_dev[:, None] + torch.arange(Bk, device=dev)[None]
        ctx_pos = torch.arange(Tc, device=dev)
        mask = (ctx_pos[None, None, :] < on_dev[:, None, None]).expand(n_a, Bk, Tc)
        h = d.block_inputs(upload(s["tokens"].long()[anchors], dev))
        for layer in d.layers:
            k, v = d.ctx_kv(layer, ctx, ctx_pos[None])
            h = d.layer_forward(layer, h, pos, k.expand(n_a, -1, -1, -1), v.expand(n_a, -1, -1, -1), mask)
        return h

    def run(self, s: dict[str, Any], stats: dict[str, list[Tensor]] | None = None) -> Tensor:
        d, cfg, dev = self.d, self.cfg, self.device
        Bk = d.cfg.block_size
        tokens = s["tokens"].long()
        T, P = tokens.numel(), s["prompt_len"]
        cand = torch.arange(P, T - 1)                           # roots with at least one target token
        if cand.numel() == 0:
            return torch.zeros((), requires_grad=True, device=dev)
        anchors = cand[torch.randperm(cand.numel())[: cfg.anchors]].sort().values
        n_a = anchors.numel()
        h = self.block_hidden(s, anchors)[:, 1:]                # rows k = 1 .. B-1
        tgt = anchors[:, None] + torch.arange(1, Bk)[None]      # position of the token row k drafts
        valid = upload(tgt <= T - 1, dev)
        rows_at = (tgt - 1 - (P - 1)).clamp(max=s["top_p"].shape[0] - 1)     # their teacher rows
        tp, ti, keep = teacher(upload(s["top_p"][rows_at], dev).float(),     # [n_a, B-1, topk]
                               upload(s["top_i"][rows_at], dev).long(), self.t2d, cfg.teacher_temp)
        valid = valid & keep                                    # teacher argmax outside the vocabulary: masked
        hn = d.norm(h)
        W = self.W
        pe = None
        if d.is_dspark:
            prev = upload(tokens[(tgt - 1).clamp(max=T - 1)], dev)
            pe = d.prev_features(prev)
            # logits = hn W^T + (pe U) M^T: one fused soft-CE over [hn, pe U] and [W, M]
            hn = torch.cat([hn, d.markov_u(pe)], -1)
            W = torch.cat([W, d.markov_m.weight.to(W.dtype)], 1)
        rows = valid.reshape(-1)
        per_row, arg = HeadSoftCE.apply(hn.reshape(-1, hn.shape[-1])[rows], W, tp.reshape(-1, tp.shape[-1])[rows],
                                        ti.reshape(-1, ti.shape[-1])[rows])
        w = self.row_w[None].expand(n_a, -1).reshape(-1)[rows]
        loss = (w * per_row).sum() / w.sum()
        correct = torch.zeros(n_a * (Bk - 1), dtype=torch.bool, device=dev)
        correct[rows] = arg == ti.reshape(-1, ti.shape[-1])[rows, 0]
        correct = correct.view(n_a, Bk - 1)
        total = loss
        if d.is_dspark:
            logit = d.confidence_logit(h.detach(), pe.detach())[valid]
            bce = F.binary_cross_entropy_with_logits(logit, correct[valid].float())
            total = total + cfg.confidence_weight * bce
        if stats is not None:
            stats.setdefault("loss", []).append(loss.detach())
            stats.setdefault("acc1", []).append(correct[:, 0][valid[:, 0]].float().mean())
            stats.setdefault("al", []).append(correct.int().cumprod(1).sum(1).float().mean())
            if d.is_dspark:
                stats.setdefault("conf_bce", []).append(bce.detach())
        return total


def build_block_drafter(target_args, cfg: TrainConfig, kind: str, embed: Tensor, head: Tensor,
                        d2t: Tensor | None = None) -> DFlashDrafter:
    torch.manual_seed(cfg.seed)
    dcfg = DFlashConfig.for_target(target_args, num_layers=cfg.layers, block_size=cfg.block_size,
                                   markov_rank=cfg.markov_rank if kind == "dspark" else 0,
                                   draft_vocab_size=None if d2t is None else int(d2t.numel()))
    d = DFlashDrafter(dcfg)
    if d2t is not None:
        d.d2t = d2t.clone()
    d.reset_parameters(std=cfg.init_std, generator=torch.Generator().manual_seed(cfg.seed))
    if cfg.init_from:
        init_backbone(d, cfg.init_from)
    elif cfg.init_passthrough:
        H, Ht = dcfg.hidden_size, dcfg.target_hidden_size
        with torch.no_grad():
            d.fc.weight[:, -Ht:] += torch.eye(H, Ht)
    return d.attach(embed, head).train()


def init_backbone(d: DFlashDrafter, folder: str) -> None:
    """Start from a trained drafter's backbone (e.g. DSpark from DFlash): every tensor the two share by name
    and shape is copied; the rest (DSpark's heads) keeps its fresh initialisation. The draft vocabularies
    must agree, since the head rows are indexed through them."""
    from reference_eagle4.drafters.dflash_model import load_dflash

    src = load_dflash(folder)
    if (src.d2t is None) != (d.d2t is None) or (src.d2t is not None and not torch.equal(src.d2t, d.d2t)):
        raise ValueError(f"{folder}: its draft vocabulary differs from this run's; train both on the same data")
    if src.cfg.num_layers != d.cfg.num_layers or src.cfg.block_size != d.cfg.block_size:
        raise ValueError(f"{folder}: {src.cfg.num_layers} layers / block {src.cfg.block_size}, this run wants "
                         f"{d.cfg.num_layers} / {d.cfg.block_size}")
    own = d.state_dict()
    shared = {k: v for k, v in src.state_dict().items() if k in own and own[k].shape == v.shape}
    d.load_state_dict({**own, **shared})
