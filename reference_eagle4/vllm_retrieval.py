"""The harness's retrieval drafts as a vLLM speculative proposer (`custom_class`), for targets with no drafter.

vLLM imports this class by its dotted path (`--speculative-config {"method": "custom_class", "model":
"reference_eagle4.vllm_retrieval.RetrievalProposer", "num_speculative_tokens": L-1}`), builds it with the server's
VllmConfig and calls `propose` once per step on the CPU after bookkeeping (vllm/v1/spec_decode/
custom_class_proposer.py; v1/worker/gpu_model_runner.py, propose_draft_token_ids). It runs in vLLM's own Python,
where specbench is not installed: the launch command puts the folder holding `reference_eagle4` on PYTHONPATH
(`runners/vllm.py`), and this module imports only numpy and what retrieval.py imports (torch), both in vLLM's venv.

What it drafts, per request and step: a chain of the candidates `Retrieval.find` (retrieval.py) gives the
reference engine's `eagle4-harness` -- prompt lookup (the continuation of the context's longest suffix, up to
`max_n` tokens, that occurred earlier in the request: prompt-enhancement answers copy phrases of the prompt) and the
datastore (the majority continuation among the target's own answers to training prompts: a small target repeats
its stock phrases). vLLM verifies one chain per request, so one candidate is drafted: each is cut to the depth its
measured acceptance pays for, and the longer cut wins (the more confident on a tie). Every candidate, drafted or
not, is scored against the tokens the target emitted at the next step (`LookupAcceptance`: hits / tries per
source, match length and depth), so a source that stops being accepted stops being drafted deep.

Depth by cost: with P_d the chance that depths 1..d are all accepted (the product of the measured rates) and c
the cost of verifying one more token as a share of a one-token step (`token_cost`), the chain grows while the next
depth raises the expected speed, A / C with A = 1 + sum P and C = 1 + c x depth: while P_d x C > c x A (the
harness planner's rule, planner.py, for a chain). From the prior (1 hit in 2 tries at every depth) it drafts
three tokens at c = 0.06, deeper as a source earns acceptance. Lengths are capped at num_speculative_tokens (L - 1),
which is what vLLM allots per request (a longer list would be scheduled as extra tokens: v1/core/sched/
scheduler.py, schedule), and, as vLLM's n-gram proposer does, at max_model_len less the request's tokens; an empty
list drafts nothing for that request this step (v1/spec_decode/ngram_proposer.py returns the same).

Requests and batch order: `propose` gets rows in the order of vLLM's input batch, which changes as requests come,
go and are reordered (its argument lists carry no request ids). Like vLLM's n-gram proposer it reads each row's
tokens afresh (`token_ids_cpu[i, :num_tokens_no_spec[i]]`); the state it carries from one step to the next (the
prompt-lookup index and the candidates awaiting the target's verdict) is keyed by the request's content instead of
its row: the hash of its tokens when the candidates were drafted. At the next step that context is the row's
tokens less the ones just emitted (`sampled_token_ids[i]`), so the same key finds the same request wherever its row
has moved; a request whose state is missing (new, or skipped for a step) gets a fresh index from its row. Only
the last step's states are kept, so finished requests leave nothing behind.

Configuration: the launch command's `SPECBENCH_RETRIEVAL` environment variable, a JSON object with `max_n` (3),
`token_cost` (0.06) and `datastore` (a folder, "off", or null for the one shipped for the default target, used
only where the target's vocabulary is the one it was built for, as `Eagle4Harness.bind` does).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from reference_eagle4.datastore import Datastore
from reference_eagle4.retrieval import ContextIndex, Draft, Retrieval

CONFIG_ENV = "SPECBENCH_RETRIEVAL"
# drafters.DEFAULT_DATASTORE["smollm2-135m"], named here without importing the drafter networks
SHIPPED_DATASTORE = Path(__file__).parent / "drafters" / "smollm2-135m-datastore"
# what a launch without SPECBENCH_RETRIEVAL gets (specbench's launch always sets it: runners/vllm.py retrieval_config)
DEFAULTS: dict[str, Any] = {"max_n": 3, "token_cost": 0.06, "datastore": None}


def paying_depth(probs: Sequence[float], token_cost: float) -> int:
    """How many drafts of a chain to verify: grow while the next one's path probability P_d raises the expected
    speed (1 + sum P) / (1 + token_cost x depth), i.e. while P_d x C > token_cost x A."""
    accepted, cost, depth = 1.0, 1.0, 0
    for p in probs:
        if p * cost <= token_cost * accepted:
            break
        accepted, cost, depth = accepted + p, cost + token_cost, depth + 1
    return depth


def context_key(row: np.ndarray, n: int) -> int:
    """A request's identity between steps: the hash of its first n tokens."""
    return hash(row[:n].tobytes())


@dataclass
class RequestState:
    """One request's lookup index over its tokens, and the candidates of its last step awaiting the target."""

    index: ContextIndex
    candidates: list[Draft] = field(default_factory=list)


class RetrievalProposer:
    """vLLM `custom_class` proposer: prompt lookup and datastore drafts, each request's chain as deep as its
    source's measured acceptance pays for (module docstring)."""

    def __init__(self, vllm_config: Any, config: dict[str, Any] | None = None) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        cfg = {**DEFAULTS, **json.loads(os.environ.get(CONFIG_ENV) or "{}"), **(config or {})}
        unknown = set(cfg) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"{CONFIG_ENV}: unknown keys {sorted(unknown)} (it takes {', '.join(DEFAULTS)})")
        self.max_n, self.token_cost = int(cfg["max_n"]), float(cfg["token_cost"])
        if self.max_n < 1 or self.token_cost < 0:
            raise ValueError(f"{CONFIG_ENV}: max_n must be >= 1 and token_cost >= 0, got {cfg}")
        self.datastore_path, store = self._datastore(cfg["datastore"], int(vllm_config.model_config.get_vocab_size()))
        self.retrieval = Retrieval(True, self.max_n, 1, store, depth=max(self.k, 1))
        self._states: dict[int, RequestState] = {}      # context_key at the last step -> that request's state

    @staticmethod
    def _datastore(option: Any, vocab_size: int) -> tuple[Path | None, Datastore | None]:
        """The datastore `option` names, or the shipped one where the target's vocabulary is its own."""
        if isinstance(option, str) and option.lower() in ("off", "0", "false", "no"):
            return None, None
        folder = Path(option) if option else SHIPPED_DATASTORE
        if not option and not (folder / "config.json").exists():
            return None, None
        store = Datastore.load(folder)
        if store.vocab_size != vocab_size:
            if option:
                raise ValueError(f"datastore {folder} was built for a vocabulary of {store.vocab_size} tokens, the "
                                 f"target has {vocab_size}")
            return None, None                              # the shipped one belongs to another tokenizer
        return folder, store

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No network to load (vLLM calls this on every drafter: v1/worker/cpu_model_runner.py, load_model)."""

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:
        """One draft list per row of vLLM's batch: `sampled_token_ids[i]` are the tokens row i emitted this step
        (empty: it did not decode, so no draft), `token_ids_cpu[i, :num_tokens_no_spec[i]]` its tokens so far."""
        last, self._states = self._states, {}
        out: list[list[int]] = []
        for i, emitted in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            if not emitted or n >= self.max_model_len:
                out.append([])
                continue
            row = token_ids_cpu[i]
            state = last.pop(context_key(row, n - len(emitted)), None)
            if state is None:
                state = RequestState(ContextIndex(row[:n].tolist(), self.max_n))
            else:
                self.retrieval.observe(state.candidates, [int(t) for t in emitted])
                state.index.tokens.extend(row[n - len(emitted): n].tolist())
            room = min(self.k, self.max_model_len - n)
            state.candidates = self.retrieval.find(state.index, room)
            out.append(self.choose(state.candidates))
            self._states[context_key(row, n)] = state
        return out

    def choose(self, candidates: list[Draft]) -> list[int]:
        """The candidate whose cost-paid depth is longest (the higher expected acceptance on a tie, prompt lookup
        before the datastore after that), cut to that depth."""
        best: tuple[int, float] = (0, 0.0)
        chosen: list[int] = []
        for source, n, tokens in candidates:
            probs = self.retrieval.acceptance[source].path_probs(n, len(tokens))
            depth = paying_depth(probs, self.token_cost)
            score = (depth, float(np.sum(probs[:depth])))
            if score > best:
                best, chosen = score, tokens[:depth]
        return chosen

    def config(self) -> dict[str, Any]:
        """What this proposer runs with (its launch's SPECBENCH_RETRIEVAL, resolved)."""
        return {"max_n": self.max_n, "token_cost": self.token_cost,
                "datastore": str(self.datastore_path) if self.datastore_path else None, "max_drafts": self.k}
