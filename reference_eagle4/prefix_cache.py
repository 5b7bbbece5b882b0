"""Prompt prefix caching: a prompt that starts like a recent one prefills only the tokens that differ.

Every prompt of a benchmark category opens with the same system prompt (~200 of ~240 tokens here), and
serving engines (vLLM's automatic prefix caching, SGLang's radix cache) skip recomputing it. Without it,
prefill is a quarter of the reference engine's time at C=8 and stalls every live sequence while it runs.

The cache keeps recent prompts whole: their keys/values for every layer and the captured hidden states the
proposers need. A new prompt reuses the longest common prefix with any entry, always leaving at least its
last token to compute (its logits give the first output token). A prompt that extends a cached one replaces
it. Its room is counted in prompt tokens, as an engine's KV memory is: entries are evicted least recently
used once the tokens they hold pass it. A room of a few prompts would not do: a category whose requests come
a few others apart (a benchmark's categories interleave) would lose its system prompt before each one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(eq=False)
class Entry:
    tokens: Tensor            # [P] prompt ids
    k: Tensor                 # [layers, kv_heads, P, head_dim]
    v: Tensor
    hidden: list[Tensor]      # per captured layer, [P, H]


class PrefixCache:
    def __init__(self, tokens: int):
        if tokens < 1:
            raise ValueError("a prefix cache needs room for at least one token")
        self.size = tokens                   # prompt tokens the entries may hold together
        self._lru: list[Entry] = []          # most recently used last
        self.hit_tokens = 0
        self.prompt_tokens = 0

    def match(self, prompt: Tensor) -> tuple[int, Entry | None]:
        """(positions reusable for `prompt`, the entry holding them); (0, None) when nothing is shared."""
        best, found = 0, None
        for e in self._lru:
            n = min(len(e.tokens), len(prompt) - 1)
            diff = (e.tokens[:n] != prompt[:n]).nonzero()
            shared = int(diff[0]) if len(diff) else n
            if shared > best:
                best, found = shared, e
        if found is not None:
            self._lru.remove(found)
            self._lru.append(found)
        self.hit_tokens += best
        self.prompt_tokens += len(prompt)
        return best, found

    def store(self, prompt: Tensor, k: Tensor, v: Tensor, hidden: list[Tensor]) -> None:
        """Keep a prefilled prompt (tensors are cloned); drop entries it extends, then the oldest until the
        entries fit the room. A prompt longer than the whole room is not kept and evicts nothing."""
        if len(prompt) > self.size:
            return
        self._lru = [e for e in self._lru
                     if not (len(e.tokens) <= len(prompt) and torch.equal(e.tokens, prompt[: len(e.tokens)]))]
        self._lru.append(Entry(prompt.clone(), k.clone(), v.clone(), [h.clone() for h in hidden]))
        held = sum(len(e.tokens) for e in self._lru)
        while self._lru and held > self.size:
            held -= len(self._lru.pop(0).tokens)

    def clear(self) -> None:
        """Forget every cached prompt (a server's cache reset between benchmark variants); the counts stay."""
        self._lru.clear()

    def stats(self) -> dict[str, int]:
        return {"tokens": self.size, "hit_tokens": self.hit_tokens, "prompt_tokens": self.prompt_tokens}
