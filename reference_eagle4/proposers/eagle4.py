"""EAGLE-4 proposers: `eagle4-chain` (N = L-1 greedy drafts) and `eagle4-tree` (static EAGLE-2 tree), and
the level-by-level drafting that `eagle4-harness` shares with them.

Per engine slot the drafter keeps its own KV cache as a ring of the last W positions (W = the sliding
window; full attention grows a plain buffer instead). After prefill and after each step the engine hands
the target's hidden states of the new tokens; the drafter pairs the feature at position t with the token
at t+1 (EAGLE alignment) and keeps those pairs on the sequence's `SequenceState` until the next drafting
step, whose one batched "catch-up" forward for every live sequence writes them into the cache; its last
row predicts the first draft level. Every further draft level is one batched drafter forward over all
sequences' frontier nodes with tree attention (ancestors + self among the drafted nodes, the window over
the accepted context). Tree K/V live only for the step; the next step recomputes the accepted tokens from
the target's features.

A `TreePolicy` makes the drafting loop's decisions: whether a step runs the drafter at all, whether to
draft another level, which candidates to add to the drafter's, and how many nodes each sequence verifies.
Each `propose` call starts a `DraftStep` (the policy's per-step state), which the loop updates as it drafts
and passes to every decision. `StaticTree` is the policy of `eagle4-tree` and `eagle4-chain`; the
cost-aware policy of `eagle4-harness` is in harness.py.

Static tree (EAGLE-2): the top_k children of the root; at each level every frontier node expands top_k
children scored by cumulative log-probability and the global top_k become the next frontier; finally the
L-1 best recorded nodes (stable sort, so a parent wins ties with its child: the set is closed under
ancestors) are emitted parents first. Expansion stops early once no frontier node can beat the current
(L-1)-th best, which gives the same tree. The chain is the same procedure with top_k = 1.

Verification is lossless whatever the drafter proposes: candidates are deterministic and each emitted token
is drawn from the target's own distribution (verify.py). That is also why, on the CPU, the drafter's layer
keeps int8 weights (`int8`, on by default; `--option int8=off` keeps the model dtype) for its calls of a few
rows: they run right after a target forward has evicted the weights from the caches, so they cost the bytes
they stream, and int8 halves those bytes (larger calls take the model dtype's prepacked weights,
`Int8Linear`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor

from reference_eagle4.device import on_host, upload
from reference_eagle4.drafters import DEFAULT_EAGLE4
from reference_eagle4.drafters.eagle4_model import Eagle4Drafter, fit_rope, load_drafter
from reference_eagle4.linears import Int8Linear
from reference_eagle4.proposers.base import (
    Proposer, dtype_option, flag_option, load_drafter_folder, register, target_embedding_and_head)
from reference_eagle4.retrieval import SequenceRetrieval
from reference_eagle4.tree import Candidates, DraftTree

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer


class DrafterCache:
    """Drafter K/V per slot: a ring of R entries (R = W) or, for full attention, a growing buffer."""

    def __init__(self, nkv: int, hd: int, ring: int | None, dtype: torch.dtype, device: torch.device,
                 slots: int = 1, capacity: int = 512):
        self.ring = ring
        self.R = ring or capacity
        self.nkv, self.hd, self.dtype, self.device = nkv, hd, dtype, device
        self.k = torch.zeros(slots, nkv, self.R, hd, dtype=dtype, device=device)     # [slot, kv_head, R, hd]
        self.v = torch.zeros_like(self.k)
        self.pos = torch.full((slots, self.R), -1, dtype=torch.long, device=device)   # -1 = empty
        self.next = on_host(torch.zeros(slots, dtype=torch.long))   # next pair position (the host's: read each step)

    def ensure(self, slots: int, max_pos: int) -> None:
        """Room for `slots` slots and (full attention) positions up to max_pos."""
        S = self.k.shape[0]
        R = self.R if self.ring else max(self.R, 1 << max(max_pos, 1).bit_length())
        if slots <= S and R == self.R:
            return
        S2 = max(S, slots)
        k = torch.zeros(S2, self.nkv, R, self.hd, dtype=self.dtype, device=self.device)
        v = torch.zeros_like(k)
        pos = torch.full((S2, R), -1, dtype=torch.long, device=self.device)
        nxt = on_host(torch.zeros(S2, dtype=torch.long))
        k[:S, :, : self.R], v[:S, :, : self.R], pos[:S, : self.R], nxt[:S] = self.k, self.v, self.pos, self.next
        self.k, self.v, self.pos, self.next, self.R = k, v, pos, nxt, R

    def reset(self, slot: int) -> None:
        self.pos[slot] = -1
        self.next[slot] = 0

    def move(self, src: int, dst: int) -> None:
        self.k[dst], self.v[dst], self.pos[dst], self.next[dst] = self.k[src], self.v[src], self.pos[src], self.next[src]
        self.reset(src)

    def rows(self, pos: Tensor) -> Tensor:
        """The entry each position [N] is stored at (a ring wraps; a full-attention buffer holds them all)."""
        return pos % self.R


@dataclass
class SequenceState:
    """An EAGLE-4 proposer's state for one sequence, on `seq.state`."""

    pending_features: Tensor | None = None       # [n, 3H] target features of pairs not yet in the drafter's cache
    pending_tokens: Tensor | None = None         # [n] the token that follows each of those positions
    retrieval: SequenceRetrieval | None = None   # eagle4-harness: the lookup index and this step's drafts


@dataclass
class DraftStep:
    """One `propose` call: what the drafting loop has done so far, passed to the policy at each decision."""

    seqs: list["Sequence"]
    levels: int = 0                  # draft levels drafted (the catch-up's last row gives level 1)
    level_ms: float = 0.0            # wall time of the last drafter pass (level 1's includes the catch-up)
    spent_ms: float = 0.0            # drafting time spent so far this step
    scores: list[Tensor] = field(default_factory=list)   # per level, [B, n]: each recorded node's log P_v
    frontier: Tensor | None = None   # [B, k] log P_v of the nodes the next level would expand, best first
    best_child: Tensor | None = None  # [B] conditional log-probability of the best child at the last level


class TreePolicy(Protocol):
    """The decisions of the drafting loop. `start` makes the step's state; the loop fills in the base fields
    of `DraftStep` and passes the same object to every other call of the step."""

    def start(self, seqs: list["Sequence"]) -> DraftStep:
        """This step's state, before anything is drafted."""
        ...

    def use_drafter(self, step: DraftStep) -> bool:
        """Run the drafter this step (False: verify the policy's own candidates alone)."""
        ...

    def keep_drafting(self, step: DraftStep) -> bool:
        """Draft one more level after `step.levels`."""
        ...

    def candidates(self, step: DraftStep, drafted: Candidates) -> Candidates:
        """The drafter's candidates plus any the policy adds."""
        ...

    def tree_sizes(self, step: DraftStep, scores: Tensor) -> list[int]:
        """Drafted nodes each sequence verifies (root excluded, at most L-1), given every candidate's log P_v
        [B, n]."""
        ...

    def tree_info(self, step: DraftStep) -> dict[str, float]:
        """Facts every tree of the step records with the step (empty: none)."""
        ...


class StaticTree:
    """eagle4-tree and eagle4-chain: up to `depth` levels, stopping early once no frontier node can enter the
    L-1 best (the same tree, drafted sooner); every sequence verifies its L-1 best nodes."""

    def __init__(self, budget: int, depth: int, early_stop: bool) -> None:
        self.budget, self.depth, self.early_stop = budget, depth, early_stop

    def start(self, seqs: list["Sequence"]) -> DraftStep:
        return DraftStep(seqs)

    def use_drafter(self, step: DraftStep) -> bool:
        return True

    def keep_drafting(self, step: DraftStep) -> bool:
        if step.levels >= self.depth:
            return False
        n_draft = self.budget - 1
        if self.early_stop and sum(s.shape[1] for s in step.scores) >= n_draft:
            kth = torch.cat(step.scores, 1).topk(n_draft, dim=-1).values[:, -1]
            if bool((step.frontier[:, 0] <= kth).all()):
                return False
        return True

    def candidates(self, step: DraftStep, drafted: Candidates) -> Candidates:
        return drafted

    def tree_sizes(self, step: DraftStep, scores: Tensor) -> list[int]:
        return [self.budget - 1] * scores.shape[0]

    def tree_info(self, step: DraftStep) -> dict[str, float]:
        return {}


class Eagle4Proposer(Proposer):
    """The EAGLE-4 drafter behind a `TreePolicy` (`StaticTree` by default); the registered subclasses fix
    top_k/depth defaults, and `eagle4-harness` passes its own policy."""

    default_top_k = 8
    default_depth: int | None = None          # None: L-1

    def __init__(self, budget: int, drafter: str | Path | Eagle4Drafter | None = None,
                 target: "Transformer | None" = None, top_k: int | None = None, depth: int | None = None,
                 window: Any = "keep", head: str | None = None, rank: int | None = None,
                 topk_candidates: int | None = None, dtype: str | torch.dtype | None = None,
                 early_stop: bool = True, int8: Any = True, **options: Any) -> None:
        super().__init__(budget)
        self.int8 = flag_option(int8)
        if isinstance(drafter, Eagle4Drafter):
            self.drafter, self.drafter_path, self.drafter_sha256 = drafter, None, None
        else:
            self.drafter, self.drafter_path, self.drafter_sha256 = load_drafter_folder(
                "eagle4", drafter, DEFAULT_EAGLE4["smollm2-135m"], load_drafter)
        self._ablations = dict(window=window, head=head, rank=rank, topk_candidates=topk_candidates)
        top_k = None if top_k is None else int(top_k)
        depth = None if depth is None else int(depth)
        early_stop = flag_option(early_stop)
        n = max(budget - 1, 0)
        self.top_k = max(1, min(top_k if top_k is not None else self.default_top_k, max(n, 1)))
        if depth is None:
            depth = n if self.default_depth is None else self.default_depth
        self.depth = max(1, min(depth, max(n, 1)))
        self.dtype = dtype_option(dtype)
        self.early_stop = early_stop
        self.policy: TreePolicy = StaticTree(budget, self.depth, early_stop)
        self.capture = tuple(self.drafter.cfg.capture_layers)
        self.cache: DrafterCache | None = None
        self.target = None
        if target is not None:
            self.bind(target)

    # -- setup -----------------------------------------------------------------------------------------
    def bind(self, target: "Transformer") -> None:
        """Share the target's embedding/lm_head, cast and prepack the drafter (called by the Engine)."""
        if self.target is target:
            return
        d = self.drafter
        args = target.args
        if d.cfg.vocab_size != args.vocab_size or d.cfg.target_hidden_size != args.dim:
            raise ValueError(
                f"drafter (vocab {d.cfg.vocab_size}, hidden {d.cfg.target_hidden_size}) does not fit the "
                f"target (vocab {args.vocab_size}, hidden {args.dim})")
        if not self.capture:
            self.capture = tuple(args.eagle_layers)
        if list(self.capture) != sorted(set(self.capture)) or max(self.capture) > args.n_layers:
            raise ValueError(f"capture layers {self.capture} must be distinct, ascending and <= {args.n_layers}")
        emb, head_w = target_embedding_and_head(target)
        dtype = self.dtype or emb.dtype
        lm = target.lm_head
        d = d.to(emb.device, dtype)                              # the drafter runs where the target does
        d.rope_cos, d.rope_sin = d.rope_cos.float(), d.rope_sin.float()
        fit_rope(d, args.max_position)
        full = lm if head_w.dtype == dtype else None
        d.attach(emb if emb.dtype == dtype else emb.to(dtype),
                 head_w if head_w.dtype == dtype else head_w.to(dtype), full_head=full)
        d.set_options(**self._ablations)
        d.eval().requires_grad_(False)
        d.pack(int8=self.int8)
        self.drafter = d
        self.target = target
        c = d.cfg
        self.cache = DrafterCache(c.num_key_value_heads, c.head_dim, c.window, dtype, emb.device)

    def config(self) -> dict[str, Any]:
        c = self.drafter.cfg
        return {**super().config(), "drafter": str(self.drafter_path) if self.drafter_path else None,
                "drafter_sha256": self.drafter_sha256,
                "top_k": self.top_k, "depth": self.depth, "window": c.window, "head": c.head,
                "rank": c.rank, "topk_candidates": c.topk_candidates, "capture": list(self.capture),
                "int8": isinstance(self.drafter.qkv, Int8Linear)}       # in effect: bf16 on a CPU that runs it

    # -- engine callbacks --------------------------------------------------------------------------------
    def begin(self, seq: "Sequence", hidden: list[Tensor]) -> None:
        self._need_bound()
        feats = torch.cat(hidden, dim=-1)                        # [P, 3H]
        P = feats.shape[0]
        toks = torch.tensor(seq.tokens[1: P + 1], device=feats.device)
        self.cache.ensure(seq.slot + 1, P + 1)
        self.cache.reset(seq.slot)
        if P > 1:       # all but the last pair now (alone); the last one rides with the next batched catch-up
            self._catch_up([seq.slot], [feats[:-1]], [toks[:-1]], last=False)
        seq.state = SequenceState(feats[-1:], toks[-1:])

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        n = len(path)
        feats, toks = torch.cat(hidden, dim=-1), upload(seq.tokens[-n:], hidden[0].device)
        state = seq.state
        if state.pending_features is not None:      # a step that did not draft left its pairs for the next catch-up
            feats, toks = torch.cat([state.pending_features, feats]), torch.cat([state.pending_tokens, toks])
        state.pending_features, state.pending_tokens = feats, toks

    def moved(self, seq: "Sequence", old_slot: int, new_slot: int) -> None:
        if self.cache is not None:
            self.cache.move(old_slot, new_slot)

    def end(self, seq: "Sequence") -> None:
        seq.state = None
        if self.cache is not None and seq.slot < self.cache.k.shape[0]:
            self.cache.reset(seq.slot)

    def _need_bound(self) -> None:
        if self.cache is None:
            raise RuntimeError("EAGLE-4 proposer is not bound to a target (Engine binds it; or pass target=)")

    # -- drafting ----------------------------------------------------------------------------------------
    def catch_up(self, seqs: list["Sequence"]) -> Tensor:
        """Write every sequence's pending pairs into its slot of the drafter's cache (one batched pass) and
        return each last pair's pre-norm output [B, H], which the first draft level reads."""
        last = self._catch_up([s.slot for s in seqs], [s.state.pending_features for s in seqs],
                              [s.state.pending_tokens for s in seqs])
        for s in seqs:
            s.state.pending_features = s.state.pending_tokens = None
        return last

    def _catch_up(self, slots: list[int], feats: list[Tensor], toks: list[Tensor],
                  last: bool = True) -> Tensor | None:
        """Process pending (feature [n, 3H], next token [n]) pairs for each slot: their keys and values join
        the slot's cache. With `last`, also return the last pair's pre-norm output [B, H]. The other pairs'
        outputs feed nothing (a one-layer drafter's keys and values come from its inputs alone), so only the
        last pair attends and runs the MLP, and the pairs of all sequences go through the linears as one set
        of rows, unpadded."""
        drafter, cache = self.drafter, self.cache
        dev = feats[0].device
        if cache.ring:          # a long prompt's pairs: only the last R reach the ring (and none collide there)
            skip = [max(0, f.shape[0] - cache.R) for f in feats]
            feats, toks = [f[s:] for f, s in zip(feats, skip)], [t[s:] for t, s in zip(toks, skip)]
        else:
            skip = [0] * len(feats)
        n_rows = [f.shape[0] for f in feats]                  # counts and positions on the host, uploaded once
        counts = upload(n_rows, dev)                                                     # [B] pairs per slot
        slot_ids = upload(slots, dev)
        cache.ensure(max(slots) + 1, 0)
        first = [int(cache.next[s]) + k for s, k in zip(slots, skip)]
        start = upload(first, dev)                                                       # [B] first pair's position
        cache.ensure(max(slots) + 1, max(f + n for f, n in zip(first, n_rows)) + 1)
        row_seq = torch.repeat_interleave(torch.arange(len(slots), device=dev), counts,
                                          output_size=sum(n_rows))                       # [N] each row's sequence
        ends = counts.cumsum(0)
        pos = start[row_seq] + torch.arange(sum(n_rows), device=dev) - (ends - counts)[row_seq]     # [N]
        # [N, H] residual, [N, 2H] attention input
        residual, layer_in = drafter.inputs(torch.cat(feats).to(cache.dtype), torch.cat(toks), fuse=True)
        entry = cache.rows(pos)
        queries = drafter.project_rows(layer_in, pos, cache.k, cache.v, slot_ids[row_seq], entry)
        cache.pos[slot_ids[row_seq], entry] = pos
        cache.next[slots] = torch.tensor([f + n for f, n in zip(first, n_rows)])
        if not last:
            return None
        # the slot's cache now holds the window of the last pair (a ring of W entries: exactly its window)
        tip = ends - 1                                                                   # [B] each last pair's row
        attn = drafter.attend_cached(queries[tip][:, None], pos[tip][:, None],
                                     (cache.k, cache.v, cache.pos, slot_ids), inclusive=True)
        return drafter.finish(residual[tip][:, None], attn)[:, 0]

    def propose(self, seqs: list["Sequence"]) -> list[DraftTree]:  # type: ignore[override]
        self._need_bound()
        policy = self.policy
        step = policy.start(seqs)
        roots = [s.tokens[-1] for s in seqs]
        if not policy.use_drafter(step):
            drafted = Candidates.empty(len(seqs))
        else:
            t0 = time.perf_counter()
            last = self.catch_up(seqs)
            if self.budget <= 1:
                return self._with_info([DraftTree([r], [-1]) for r in roots], policy.tree_info(step))
            step.level_ms = 1000 * (time.perf_counter() - t0)
            drafted = self._draft(step, last)
        candidates = policy.candidates(step, drafted)
        sizes = [max(0, min(n, self.budget - 1)) for n in policy.tree_sizes(step, candidates.scores)]
        return self._with_info(candidates.trees(roots, sizes), policy.tree_info(step))

    @staticmethod
    def _with_info(trees: list[DraftTree], info: dict[str, float]) -> list[DraftTree]:
        if info:
            for tree in trees:
                tree.info = dict(info)
        return trees

    def _draft(self, step: DraftStep, last: Tensor) -> Candidates:
        """The drafter's candidates, level by level from each sequence's last pair output `last` [B, H] while
        the policy asks for more. Each level expands the k frontier nodes of every sequence into k children
        each, records all k * k, and keeps the k best by cumulative log-probability as the next frontier."""
        drafter, cache = self.drafter, self.cache
        B, H = last.shape
        k = self.top_k                                             # frontier width and children per node
        dev, dtype = last.device, cache.dtype
        n_kv_heads, head_dim = drafter.cfg.num_key_value_heads, drafter.cfg.head_dim
        slot_ids = upload([s.slot for s in step.seqs], dev)
        last_pos = upload([int(cache.next[s.slot]) - 1 for s in step.seqs], dev)   # [B] the last pair's position
        context = (cache.k, cache.v, cache.pos, slot_ids)                 # the accepted context's ring

        logp, ids = drafter.topk(last, k)                                 # [B, k]: level 1
        tokens = [ids]                                  # per level, [B, n]: each recorded node's token
        parents = [torch.full((B, k), -1, dtype=torch.long, device=dev)]   # and its parent's record (-1: the root)
        n_recorded = k
        frontier_token = ids                                              # [B, k]
        frontier_record = torch.arange(k, device=dev).expand(B, k)        # [B, k] their records
        frontier_hidden = last[:, None, :].expand(B, k, H)                # [B, k, H] their parents' output
        frontier_parent_row = torch.full((B, k), -1, dtype=torch.long, device=dev)    # parent's tree-buffer row
        # this step's drafted nodes: keys and values [B, kv_head, row, head_dim], and which rows each row sees
        rows_max = max(k * max(self.depth - 1, 0), 1)
        tree_k = torch.empty(B, n_kv_heads, rows_max, head_dim, dtype=dtype, device=dev)
        tree_v = torch.empty_like(tree_k)
        sees = torch.zeros(B, rows_max, rows_max, dtype=torch.bool, device=dev)      # [B, row, row]
        itself = torch.eye(k, dtype=torch.bool, device=dev)
        batch_index = torch.arange(B, device=dev)[:, None]
        row_seq = batch_index.expand(B, k).reshape(-1)                # a level's rows by sequence: b, b, ...
        step.levels, step.scores, step.frontier, step.best_child = 1, [logp], logp, logp[:, 0]
        step.spent_ms += step.level_ms
        while self.policy.keep_drafting(step):
            t0 = time.perf_counter()
            first_row = (step.levels - 1) * k                     # this level's first row in the tree buffers
            if first_row + k > tree_k.shape[2]:                   # a policy may draft deeper than `depth`
                grow = first_row + k
                tree_k = torch.cat([tree_k, tree_k.new_empty(B, n_kv_heads, grow, head_dim)], 2)
                tree_v = torch.cat([tree_v, tree_v.new_empty(B, n_kv_heads, grow, head_dim)], 2)
                wider = sees.new_zeros(B, sees.shape[1] + grow, sees.shape[2] + grow)
                wider[:, : sees.shape[1], : sees.shape[2]] = sees
                sees = wider
            rows = slice(first_row, first_row + k)
            positions = (last_pos + step.levels)[:, None].expand(B, k)                 # [B, k]
            residual, layer_in = drafter.inputs(frontier_hidden.contiguous(), frontier_token, fuse=False)
            queries = drafter.project_rows(layer_in.view(B * k, -1), positions.reshape(-1), tree_k, tree_v, row_seq,
                                           torch.arange(first_row, first_row + k, device=dev).repeat(B))
            if step.levels > 1:      # each new node sees what its parent sees, and itself
                sees[:, rows, :first_row] = sees[batch_index, frontier_parent_row, :first_row]
            sees[:, rows, rows] = itself
            attn = drafter.attend_cached(queries.view(B, k, *queries.shape[1:]), positions, context,
                                         tree=(tree_k, tree_v, sees[:, rows, : first_row + k]))
            hidden = drafter.finish(residual, attn)                                    # [B, k, H]
            child_logp, child_token = drafter.topk(hidden.reshape(B * k, H), k)        # [B * k, k]
            child_logp = child_logp.view(B, k, k)
            child_score = (step.frontier[:, :, None] + child_logp).reshape(B, k * k)   # cumulative log P_v
            child_token = child_token.view(B, k * k)
            child_parent = frontier_record[:, :, None].expand(B, k, k).reshape(B, k * k)
            step.scores.append(child_score)
            tokens.append(child_token)
            parents.append(child_parent)
            # the next frontier: the global top-k of this level's k * k children
            frontier_score, chosen = child_score.topk(k, dim=-1)                       # [B, k]
            frontier_token = child_token.gather(1, chosen)
            frontier_record = n_recorded + chosen
            chosen_parent = chosen // k                                # which frontier node each came from
            frontier_hidden = hidden.gather(1, chosen_parent[:, :, None].expand(B, k, H))
            frontier_parent_row = first_row + chosen_parent
            n_recorded += k * k
            step.levels += 1
            step.frontier, step.best_child = frontier_score, child_logp[:, 0, 0]
            step.level_ms = 1000 * (time.perf_counter() - t0)
            step.spent_ms += step.level_ms
        return Candidates(torch.cat(step.scores, 1), torch.cat(tokens, 1), torch.cat(parents, 1))


def drafter_level_fn(proposer: Eagle4Proposer, batch: int, width: int, context: int = 256):
    """A callable running ONE draft level (a bound proposer's drafter over `width` nodes for each of `batch`
    sequences, attention over a full window of context plus the nodes, then the head's top-k): what the
    cost table's drafter column measures. Inputs are synthetic; the proposer's own state is untouched."""
    proposer._need_bound()
    d = proposer.drafter
    c = d.cfg
    dev, dt = proposer.cache.device, proposer.cache.dtype
    R = min(context, c.window or context)
    g = torch.Generator(device="cpu").manual_seed(0)
    h = torch.randn(batch, width, c.hidden_size, generator=g).to(dev, dt)
    tok = torch.randint(0, c.vocab_size, (batch, width), generator=g).to(dev)
    rk = torch.randn(batch, c.num_key_value_heads, R, c.head_dim, generator=g).to(dev, dt)
    ring = (rk, torch.randn_like(rk), torch.arange(R, device=dev).expand(batch, R).contiguous(),
            torch.arange(batch, device=dev))
    tk = torch.empty(batch, c.num_key_value_heads, width, c.head_dim, dtype=dt, device=dev)
    tree = (tk, torch.empty_like(tk), torch.ones(batch, width, width, dtype=torch.bool, device=dev))
    qpos = torch.full((batch, width), context, device=dev)
    rows = torch.arange(batch, device=dev).repeat_interleave(width), torch.arange(width, device=dev).repeat(batch)
    k = max(1, min(proposer.top_k, width))

    def run():
        hh, x = d.inputs(h, tok, fuse=False)
        q = d.project_rows(x.view(batch * width, -1), qpos.reshape(-1), tree[0], tree[1], *rows)
        attn = d.attend_cached(q.view(batch, width, *q.shape[1:]), qpos, ring, tree=tree)
        return d.topk(d.finish(hh, attn).reshape(batch * width, -1), k)

    return run


@register("eagle4-tree", "EAGLE-4 drafter, static EAGLE-2 tree: top-k expansion, best L-1 nodes")
class Eagle4Tree(Eagle4Proposer):
    """Static EAGLE-2 tree: top_k = min(8, L-1), depth min(8, L-1), the L-1 best nodes + root.

    Depth 8 rather than L-1 by default: few of the shipped drafter's paths survive past depth 5, so deeper
    levels add drafting time and no accepted tokens; pass `depth` to change it."""

    default_top_k = 8
    default_depth = 8


@register("eagle4-chain", "EAGLE-4 drafter, a chain of L-1 greedy drafts")
class Eagle4Chain(Eagle4Proposer):
    """N = L-1 greedy drafts."""

    default_top_k = 1

    def __init__(self, budget: int, **options: Any) -> None:
        options.pop("top_k", None)
        super().__init__(budget, top_k=1, **options)
