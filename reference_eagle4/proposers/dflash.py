"""`dflash` and `dspark`: block drafters that propose a whole chain in one forward.

Both keep, per KV slot and drafter layer, the keys/values of the context (the verified positions' target
features), append the newly verified rows each step, and run one batched forward over
[root, MASK x (B - 1)] for every live sequence.

dflash verifies the first L - 1 drafts. dspark drafts left to right through its Markov head, predicts
each draft's acceptance with its confidence head, and verifies for each sequence the chain prefix that,
with the other sequences' prefixes, maximises expected emitted tokens per millisecond under the measured
cost table at the current batch size (the harness's `TreePlanner` with one candidate per depth): long
chains when the drafter is confident and the batch is small, short ones at C = 8 where every verified
token costs more, and none for a sequence whose first draft is unlikely. Each step records the planned length
and the predicted acceptance (`pred_accept`: the expected accepted drafts of the verified prefix).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from reference_eagle4.calibration import CostTable, table_for
from reference_eagle4.device import upload
from reference_eagle4.drafters import DEFAULT_DFLASH, DEFAULT_DSPARK
from reference_eagle4.drafters.dflash_model import DFlashDrafter, load_dflash
from reference_eagle4.drafters.eagle4_model import fit_rope
from reference_eagle4.planner import TreePlanner
from reference_eagle4.proposers.base import (
    Proposer, dtype_option, load_drafter_folder, register, target_embedding_and_head)
from reference_eagle4.tree import DraftTree

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer


class ContextCache:
    """Per slot and layer: RoPE'd keys and values of the context rows, [layer, slot, kv_head, pos, hd]."""

    def __init__(self, layers: int, nkv: int, hd: int, dtype: torch.dtype, device: torch.device):
        self.k = torch.zeros(layers, 0, nkv, 0, hd, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.n: list[int] = []

    def ensure(self, slots: int, length: int) -> None:
        L, S, nkv, cap, hd = self.k.shape
        if slots <= S and length <= cap:
            return
        S2, cap2 = max(S, slots), max(cap, length if length <= cap else max(length, 2 * cap))
        for name in ("k", "v"):
            old = getattr(self, name)
            new = old.new_zeros(L, S2, nkv, cap2, hd)
            new[:, :S, :, :cap] = old
            setattr(self, name, new)
        self.n += [0] * (S2 - S)

    def move(self, old: int, new: int) -> None:
        n = self.n[old]
        self.k[:, new, :, :n] = self.k[:, old, :, :n]
        self.v[:, new, :, :n] = self.v[:, old, :, :n]
        self.n[new] = n


class DFlashProposer(Proposer):
    default_drafter = DEFAULT_DFLASH

    def __init__(self, budget: int, drafter: str | Path | DFlashDrafter | None = None,
                 dtype: str | torch.dtype | None = None, **options: Any) -> None:
        super().__init__(budget)
        if isinstance(drafter, DFlashDrafter):
            self.drafter, self.drafter_path, self.drafter_sha256 = drafter, None, None
        else:
            self.drafter, self.drafter_path, self.drafter_sha256 = load_drafter_folder(
                self.name, drafter, self.default_drafter["smollm2-135m"], load_dflash)
        if self.name == "dspark" and not self.drafter.is_dspark:
            raise ValueError(f"{self.drafter_path}: a dflash checkpoint has no Markov/confidence heads for dspark")
        block = self.drafter.cfg.block_size
        if budget > block:
            raise ValueError(f"budget L={budget} exceeds the drafter's block size {block} (L <= {block})")
        self.dtype = dtype_option(dtype)
        self.capture = tuple(self.drafter.cfg.capture_layers)
        self.cache: ContextCache | None = None
        self.target = None

    def config(self) -> dict[str, Any]:
        path = self.drafter_path
        c = self.drafter.cfg
        return {**super().config(), "drafter": str(path) if path else None, "drafter_sha256": self.drafter_sha256,
                "block_size": c.block_size, "layers": c.num_layers, "markov_rank": c.markov_rank,
                "capture": list(self.capture)}

    def bind(self, target: "Transformer") -> None:
        if self.target is target:
            return
        d, args = self.drafter, target.args
        if d.cfg.vocab_size != args.vocab_size or d.cfg.target_hidden_size != args.dim:
            raise ValueError(f"drafter (vocab {d.cfg.vocab_size}, hidden {d.cfg.target_hidden_size}) does not fit "
                             f"the target (vocab {args.vocab_size}, hidden {args.dim})")
        emb, head = target_embedding_and_head(target)
        dtype = self.dtype or emb.dtype
        d = d.to(emb.device, dtype)                              # the drafter runs where the target does
        d.rope_cos, d.rope_sin = d.rope_cos.float(), d.rope_sin.float()
        fit_rope(d, args.max_position)
        d.attach(emb.to(dtype), head.to(dtype)).eval().requires_grad_(False).pack()
        self.drafter, self.target = d, target
        c = d.cfg
        self.cache = ContextCache(c.num_layers, c.num_key_value_heads, c.head_dim, dtype, emb.device)

    # -- engine callbacks ----------------------------------------------------------------------------
    def begin(self, seq: "Sequence", hidden: list[Tensor]) -> None:
        if self.cache is None:
            raise RuntimeError(f"{self.name} proposer is not bound to a target (the Engine binds it)")
        self.cache.ensure(seq.slot + 1, 0)
        self.cache.n[seq.slot] = 0
        seq.state = torch.cat(hidden, dim=-1)          # pending context rows at positions 0..P-1

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        seq.state = torch.cat(hidden, dim=-1)          # rows of the root and the accepted drafts

    def moved(self, seq: "Sequence", old_slot: int, new_slot: int) -> None:
        if self.cache is not None:
            self.cache.move(old_slot, new_slot)

    def end(self, seq: "Sequence") -> None:
        seq.state = None

    # -- drafting ------------------------------------------------------------------------------------
    def _extend_context(self, seqs: list["Sequence"]) -> None:
        """Write the pending rows of every sequence into the context cache (one batched pass)."""
        d, c = self.drafter, self.cache
        todo = [s for s in seqs if s.state is not None and s.state.shape[0]]
        if not todo:
            return
        m = max(s.state.shape[0] for s in todo)
        c.ensure(max(s.slot for s in todo) + 1, max(c.n[s.slot] + s.state.shape[0] for s in todo) + 1)
        dev = todo[0].state.device
        feats = torch.zeros(len(todo), m, todo[0].state.shape[-1], dtype=c.k.dtype, device=dev)
        pos = torch.zeros(len(todo), m, dtype=torch.long, device=dev)
        for b, s in enumerate(todo):
            n = s.state.shape[0]
            feats[b, :n] = s.state
            pos[b, :n] = c.n[s.slot] + torch.arange(n, device=dev)
        ctx = d.context(feats)
        for li, layer in enumerate(d.layers):
            k, v = d.ctx_kv(layer, ctx, pos)
            for b, s in enumerate(todo):
                n, start = s.state.shape[0], c.n[s.slot]
                c.k[li, s.slot, :, start: start + n] = k[b, :, :n]
                c.v[li, s.slot, :, start: start + n] = v[b, :, :n]
        for s in todo:
            c.n[s.slot] += s.state.shape[0]
            s.state = None

    def _backbone(self, seqs: list["Sequence"]) -> Tensor:
        """Pre-norm block outputs [B, block_size, H] for every sequence's [root, MASK, ...]."""
        self._extend_context(seqs)
        d, c = self.drafter, self.cache
        B = len(seqs)
        slots = [s.slot for s in seqs]
        dev = c.k.device
        lens = [c.n[s] for s in slots]
        n_max = max(lens)
        idx = slice(0, B) if slots == list(range(B)) else upload(slots, dev)
        roots = upload([s.tokens[-1] for s in seqs], dev)
        t = upload([len(s.tokens) - 1 for s in seqs], dev)
        pos = t[:, None] + torch.arange(d.cfg.block_size, device=dev)[None]
        mask = None
        if min(lens) != n_max:
            mask = (torch.arange(n_max, device=dev)[None, :] < upload(lens, dev)[:, None])
            mask = mask[:, None, :].expand(B, d.cfg.block_size, n_max)
        h = d.block_inputs(roots)
        for li, layer in enumerate(d.layers):
            h = d.layer_forward(layer, h, pos, c.k[li, idx, :, :n_max], c.v[li, idx, :, :n_max], mask)
        return h

    def propose(self, seqs: list["Sequence"]) -> list[DraftTree]:
        n = self.budget - 1
        if n == 0:
            return [DraftTree.chain(s.tokens[-1], []) for s in seqs]
        h = self._backbone(seqs)[:, 1: n + 1]
        drafts = self.drafter.to_target_ids(self.drafter.base_logits(h).argmax(-1)).tolist()
        return [DraftTree.chain(s.tokens[-1], row) for s, row in zip(seqs, drafts)]


register("dflash", "block drafter: one parallel forward drafts L-1 tokens from target features (chain)")(
    DFlashProposer)


@register("dspark", "DFlash + Markov head; verifies the chain prefix its confidence head says pays for its cost")
class DSparkProposer(DFlashProposer):
    default_drafter = DEFAULT_DSPARK

    def __init__(self, budget: int, table: CostTable | str | None = None, **options: Any) -> None:
        super().__init__(budget, **options)
        self.table = CostTable.load(table) if isinstance(table, str) else table
        self.table_source = "given" if table is not None else ""
        self._draft_ms = 0.0                     # running estimate of one drafting pass (measured)

    def bind(self, target: "Transformer") -> None:
        super().bind(target)
        if self.table is None:
            self.table, self.table_source = table_for(target, "dspark")

    def config(self) -> dict[str, Any]:
        return {**super().config(), "cost_table": self.table_source,
                "cost_table_key": self.table.key if self.table else None}

    def draft_block(self, seqs: list["Sequence"], n: int) -> tuple[list[list[int]], Tensor]:
        """Drafts [B][n] (target ids) left to right through the Markov head, and each draft's predicted
        acceptance given its prefix was accepted [B, n]."""
        d = self.drafter
        h = self._backbone(seqs)[:, 1: n + 1]
        base = d.base_logits(h)                                            # [B, n, V_draft]
        prev = upload([s.tokens[-1] for s in seqs], h.device)
        drafts, conf = [], []
        for k in range(n):
            pe = d.prev_features(prev)
            conf.append(d.confidence_logit(h[:, k], pe).sigmoid())
            pick = (base[:, k] + d.markov_bias(pe).to(base.dtype)).argmax(-1)
            prev = d.to_target_ids(pick)
            drafts.append(prev)
        return torch.stack(drafts, 1).tolist(), torch.stack(conf, 1).float()

    def propose(self, seqs: list["Sequence"]) -> list[DraftTree]:
        n = self.budget - 1
        if n == 0:
            return [DraftTree.chain(s.tokens[-1], []) for s in seqs]
        t0 = time.perf_counter()
        drafts, conf = self.draft_block(seqs, n)
        ms = (time.perf_counter() - t0) * 1000
        self._draft_ms = ms if not self._draft_ms else 0.8 * self._draft_ms + 0.2 * ms
        cum = conf.cumprod(1)                                              # P(draft k and all before accepted)
        planner = TreePlanner(self.table, self.budget, len(seqs), max(len(s.tokens) for s in seqs))
        plan = planner.best_sizes(cum.tolist(), self._draft_ms)
        trees = []
        for b, (s, row) in enumerate(zip(seqs, drafts)):
            n = plan.sizes[b]
            tree = DraftTree.chain(s.tokens[-1], row[:n])
            tree.info = {"planned": n, "pred_accept": round(float(cum[b, :n].sum()), 3),
                         "conf1": round(float(conf[b, 0]), 3)}
            trees.append(tree)
        return trees
