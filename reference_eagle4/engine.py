"""Continuous-batching speculative decoding over the reference target.

Up to C sequences live in KV slots 0..C-1. Each step the proposer drafts one tree per sequence, one
batched target forward scores every tree, the shared verifier walks each tree, and the accepted path is
kept in the cache. A finished sequence frees its slot for the next waiting request (prefilled on its
own, after whatever prefix it shares with a recent prompt: prefix_cache.py); when none waits, the last
live sequence moves into the hole so the live slots stay a prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Callable, Iterable

import torch
from torch import Tensor

from reference_eagle4.cuda_graphs import DecodeGraph
from reference_eagle4.device import upload
from reference_eagle4.model import KVCache, Transformer, TreeLayout
from reference_eagle4.prefix_cache import PrefixCache
from reference_eagle4.proposers.base import Proposer
from reference_eagle4.tree import DraftTree
from reference_eagle4.verify import Sampling, TokenLogprobs, draw, entropy, greedy_tokens, top_logprobs, walk


@dataclass
class Request:
    id: str
    prompt_ids: list[int]
    meta: dict[str, Any] = field(default_factory=dict)
    max_new_tokens: int | None = None        # this request's output cap (None: GenerationConfig's)
    top_logprobs: int | None = None          # k: keep each output token's logprob and the top k (Sequence.logprobs)


# A request source passed to `Engine.generate` may yield PENDING to say "nothing waiting right now": the
# scheduler keeps stepping the live sequences and asks again after the next step (a server feeds requests
# as they arrive this way). With nothing live it asks again at once, so such a source should block briefly
# before yielding PENDING. Yielding nothing more (StopIteration) still means "no more requests".
PENDING: Any = object()


@dataclass
class Sequence:
    request: Request
    slot: int
    generator: torch.Generator | None
    tokens: list[int]                       # prompt + output so far; tokens[-1] is the next root
    output: list[int] = field(default_factory=list)
    steps: list[dict[str, int]] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)   # per output token, when the request asks
    t_start: float = 0.0
    t_first: float = 0.0
    t_end: float = 0.0
    state: Any = None                        # the proposer's own per-sequence state
    cached_tokens: int = 0                   # prompt positions taken from the prefix cache, not prefilled
    done: bool = False
    error: str | None = None                 # why the engine gave up on it (`generate(isolate_failures=True)`)


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    sampling: Sampling = Sampling()
    eos_ids: tuple[int, ...] = ()
    concurrency: int = 1
    seed: int = 0
    prefix_cache: int = 8192                 # prompt tokens whose KV is kept for reuse (0: prefill every prompt whole)
    cuda_graphs: bool = True                 # on CUDA, replay batch-1 one-token steps from a graph (cuda_graphs.py)


def seed_for(seed: int, request_id: str) -> int:
    """A per-request seed, so a request's samples do not depend on what it was batched with."""
    h = 1469598103934665603
    for ch in f"{seed}:{request_id}".encode():
        h = ((h ^ ch) * 1099511628211) % (1 << 63)
    return h


class Engine:
    def __init__(self, target: Transformer, proposer: Proposer, config: GenerationConfig, max_len: int):
        self.target = target
        self.proposer = proposer
        self.config = config
        self.cache: KVCache = target.new_cache(config.concurrency, max_len)
        self.prefix = PrefixCache(config.prefix_cache) if config.prefix_cache > 0 else None
        proposer.bind(target)
        self.capture = proposer.capture
        self.device = target.embed.weight.device
        # a step of one sequence and one token has fixed shapes; one that returns hidden states is not replayed
        self.decode_graph = DecodeGraph(target, self.cache) if (
            config.cuda_graphs and self.device.type == "cuda" and not self.capture) else None

    # -- one sequence ------------------------------------------------------------------------------
    def _emit(self, seq: Sequence, tokens: list[int]) -> int:
        """Append tokens until EOS or max_new_tokens; return how many were emitted."""
        n = 0
        for tok in tokens:
            if seq.done:
                break
            seq.output.append(tok)
            seq.tokens.append(tok)
            n += 1
            cap = self.config.max_new_tokens if seq.request.max_new_tokens is None else seq.request.max_new_tokens
            if tok in self.config.eos_ids or len(seq.output) >= cap:
                seq.done = True
        return n

    def _admit(self, request: Request, slot: int) -> Sequence:
        cfg = self.config
        gen = None
        if not cfg.sampling.greedy:
            gen = torch.Generator(self.device).manual_seed(seed_for(cfg.seed, request.id))
        seq = Sequence(request, slot, gen, list(request.prompt_ids), t_start=time.time())
        prompt = torch.tensor(request.prompt_ids, device=self.device)
        reuse, entry = self.prefix.match(prompt) if self.prefix is not None else (0, None)
        if entry is not None:
            self.cache.load(slot, entry.k, entry.v, reuse)
        else:
            self.cache.lengths[slot] = 0
        ids = prompt[None, reuse:]
        logits, hidden = self.target.prefill(ids, self.cache, slot, self.capture)     # the last token's logits
        self.cache.keep(slot, range(ids.shape[1]))
        rows = [h[0] for h in hidden]
        if entry is not None:
            rows = [torch.cat([saved[:reuse], new]) for saved, new in zip(entry.hidden, rows)]
        if self.prefix is not None:
            self.prefix.store(prompt, *self.cache.rows(slot), rows)
        seq.cached_tokens = reuse
        seq.entropies.append(float(entropy(logits)[0]))
        first = int(draw(logits, cfg.sampling, gen)[0])
        if request.top_logprobs is not None:
            seq.logprobs += top_logprobs(logits, [first], request.top_logprobs)
        self._emit(seq, [first])
        seq.t_first = time.time()
        self.proposer.begin(seq, rows)
        return seq

    # -- one step for all live sequences -------------------------------------------------------------
    def _step(self, seqs: list[Sequence]) -> None:
        """Draft, verify and walk one step of every live sequence. The host waits for the device once for the
        verification: the greedy tokens and the entropies of every node come back together (sampling adds one
        wait per sequence for its draws); the proposer's own waits are its drafts' (`propose`)."""
        t0 = time.perf_counter()
        trees = self.proposer.propose(seqs)
        draft_ms = 1000 * (time.perf_counter() - t0)
        sizes = [len(t) for t in trees]
        B, T = len(seqs), max(sizes)
        tokens = torch.zeros(B, T, dtype=torch.long)
        depths = torch.zeros(B, T, dtype=torch.long)
        masks = torch.empty(B, T, T, dtype=torch.bool)
        for b, tree in enumerate(trees):
            n = len(tree)
            tokens[b, :n] = torch.tensor(tree.tokens)
            depths[b, :n] = torch.tensor(tree.depths)
            masks[b] = tree.mask(T)
        dev = self.device
        ragged = min(sizes) < T          # trees of different sizes: skip the padding in every matmul
        valid = torch.arange(T)[None, :] < torch.tensor(sizes)[:, None] if ragged else None
        t0 = time.perf_counter()
        if self.decode_graph is not None and B == T == 1:
            logits, hidden = self.decode_graph(tokens), []
        else:
            layout = TreeLayout(upload(masks, dev), upload(depths, dev), valid)
            logits, hidden = self.target.verify(upload(tokens, dev), self.cache, layout, self.capture)
        logits = logits.reshape(-1, logits.shape[-1])              # one row per tree node, tree after tree
        starts = [0, *accumulate(sizes[:-1])]          # packed or not, each tree's rows follow the last one's
        greedy = self.config.sampling.greedy
        argmax, ents = self._node_facts(logits, greedy)
        timing = {"draft_ms": round(draft_ms, 3), "verify_ms": round(1000 * (time.perf_counter() - t0), 3)}
        rows: list[tuple[int, int]] = []                            # (sequence, logits row) of emitted tokens
        emitted_tokens: list[int] = []
        for b, (seq, tree) in enumerate(zip(seqs, trees)):
            lo = starts[b]
            targets = argmax[lo: lo + len(tree)] if argmax is not None else \
                draw(logits[lo: lo + len(tree)], self.config.sampling, seq.generator).tolist()
            verdict = walk(tree, targets)
            emitted = self._emit(seq, verdict.tokens)
            self.cache.keep(seq.slot, verdict.path)
            rows.extend((b, lo + node) for node in verdict.path[:emitted])
            seq.entropies += [ents[lo + node] for node in verdict.path[:emitted]]
            emitted_tokens += verdict.tokens[:emitted]
            seq.steps.append({**self._step_record(tree, verdict.path, emitted), **timing})
            if not seq.done:
                path = upload(verdict.path, dev) if hidden else None
                self.proposer.accepted(seq, verdict.path, [h[b, path] for h in hidden])
        self._keep_logprobs(seqs, logits, rows, emitted_tokens)

    @staticmethod
    def _node_facts(logits: Tensor, greedy: bool) -> tuple[list[int] | None, list[float]]:
        """(greedy token of every node, or None when sampling; the entropy of every node) in one copy to
        the host: the step's one wait for the device. The entropies of the nodes that end up emitted are
        the records'; computing the others too costs a pass over a few rows more, a second wait would cost
        the device's idle time."""
        ent = entropy(logits)
        if not greedy:
            return None, ent.tolist()
        both = torch.cat([greedy_tokens(logits).double(), ent.double()]).tolist()   # int64 ids are exact in fp64
        n = logits.shape[0]
        return [int(t) for t in both[:n]], both[n:]

    @staticmethod
    def _keep_logprobs(seqs: list[Sequence], logits: Tensor, rows: list[tuple[int, int]], tokens: list[int]) -> None:
        """Top logprobs of the emitted tokens of the sequences whose requests ask for them (one pass for all)."""
        asked = [j for j, (b, _) in enumerate(rows) if seqs[b].request.top_logprobs is not None]
        if not asked:
            return
        k = max(seqs[rows[j][0]].request.top_logprobs for j in asked)
        picked = upload([rows[j][1] for j in asked], logits.device)
        for j, (lp, top) in zip(asked, top_logprobs(logits[picked], [tokens[j] for j in asked], k)):
            seq = seqs[rows[j][0]]
            seq.logprobs.append((lp, top[: seq.request.top_logprobs]))

    @staticmethod
    def _step_record(tree: DraftTree, path: list[int], emitted: int) -> dict[str, int]:
        return {"emitted": emitted, "accepted": len(path) - 1, "drafted": len(tree) - 1,
                "budget": len(tree), "depth": tree.depth, **tree.info}

    # -- the scheduler ---------------------------------------------------------------------------------
    def generate(self, requests: Iterable[Request], on_done: Callable[[Sequence], None],
                 on_progress: Callable[[Sequence], None] | None = None, isolate_failures: bool = False) -> None:
        """Decode every request, calling `on_done` as each finishes (in finishing order).

        `on_progress(seq)`, when given, is called after a sequence's prefill and after every step it took
        part in (before `on_done`), so a caller can stream tokens as they are emitted. `requests` may yield
        PENDING (see above).

        `isolate_failures` (a server): an exception while admitting a request finishes that request alone, and
        one in a step finishes the sequences of that step, each with `seq.error` saying why, and the scheduler
        goes on with the rest. Off (a benchmark run), every exception propagates: a run that broke must not
        look finished.
        """
        waiting = iter(requests)
        live: list[Sequence] = []
        exhausted = False
        with torch.inference_mode():
            while True:
                while not exhausted and len(live) < self.config.concurrency:
                    req = next(waiting, None)
                    if req is None:
                        exhausted = True
                        break
                    if req is PENDING:
                        break
                    try:
                        seq = self._admit(req, len(live))
                    except Exception as err:
                        if not isolate_failures:
                            raise
                        seq = Sequence(req, len(live), None, list(req.prompt_ids), t_start=time.time(), done=True,
                                       error=f"its prefill failed: {type(err).__name__}: {err}")
                    if on_progress is not None:
                        on_progress(seq)
                    if seq.done:
                        self._finish(seq, on_done)
                    else:
                        live.append(seq)
                if not live:
                    if exhausted:
                        return
                    continue
                try:
                    self._step(live)
                except Exception as err:
                    if not isolate_failures:
                        raise
                    for seq in live:
                        seq.done = True
                        seq.error = (f"a decoding step of its batch of {len(live)} failed: "
                                     f"{type(err).__name__}: {err}")
                if on_progress is not None:
                    for seq in live:
                        on_progress(seq)
                finished = [s for s in live if s.done]
                if finished:
                    live = [s for s in live if not s.done]
                    for seq in finished:
                        self._finish(seq, on_done)
                    self._compact_slots(live)

    def _finish(self, seq: Sequence, on_done: Callable[[Sequence], None]) -> None:
        seq.t_end = time.time()
        try:
            self.proposer.end(seq)
        except Exception:
            if seq.error is None:               # a failed sequence's state may be half-built: drop it regardless
                raise
        on_done(seq)

    def _compact_slots(self, live: list[Sequence]) -> None:
        for new_slot, seq in enumerate(live):
            if seq.slot != new_slot:
                self.cache.move(seq.slot, new_slot)
                self.proposer.moved(seq, seq.slot, new_slot)
                seq.slot = new_slot
