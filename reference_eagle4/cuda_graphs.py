"""Batch-1 one-token decoding steps replayed from a CUDA graph.

A decoding step of one sequence launches a few hundred small kernels, and at batch 1 the GPU finishes each
before Python has launched the next: the step costs the launches, not the weights it streams. A CUDA graph
records the launches once and replays them in one call. A graph replays fixed shapes and fixed addresses,
so the recorded forward reads its token and its slot's length from buffers filled before each replay, and
attends over the whole KV cache by position (`Transformer.forward(lens=...)`): the length decides which keys
count, never a shape. The engine replays it for every step of one sequence and one token whose proposer
needs no hidden states (vanilla decoding, and prompt lookup's steps without a match); trees, batches and the
drafters' steps run eagerly.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from reference_eagle4.device import upload
from reference_eagle4.model import KVCache, Transformer, TreeLayout

WARMUP_STEPS = 2            # eager runs before capture: Triton compiles and cuBLAS picks its kernels off the graph


class DecodeGraph:
    """`graph(token [1, 1] on the host) -> logits [1, 1, V]` for the sequence in slot 0 of `cache`, appending
    the token after its cached length (which the caller advances, as after any step: `cache.keep`).

    `replay=False` runs the same fixed-shape forward eagerly: what the graph records, on any device (tests)."""

    def __init__(self, model: Transformer, cache: KVCache, replay: bool = True):
        device = cache.k.device
        self.model, self.cache, self.replay = model, cache, replay
        self.tokens = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.lens = torch.zeros(1, dtype=torch.long, device=device)
        self.layout = TreeLayout.causal(1, 1, device)
        self._replay: Callable[[], None] | None = None
        self._logits: Tensor | None = None

    def _forward(self) -> Tensor:
        return self.model(self.tokens, self.cache, self.layout, lens=self.lens)[0]

    def __call__(self, token: Tensor) -> Tensor:
        length = int(self.cache.lengths[0])
        if length + 1 > self.cache.max_len:
            raise ValueError(f"KV cache overflow: {length + 1} > {self.cache.max_len} positions")
        self.tokens.copy_(upload(token, self.tokens.device), non_blocking=True)
        self.lens.copy_(upload(self.cache.lengths[:1], self.lens.device), non_blocking=True)
        if not self.replay:
            return self._forward()
        if self._replay is None:
            self._replay = self._capture()
        self._replay()
        return self._logits

    def _capture(self) -> Callable[[], None]:
        """Record the forward (after warm-up runs on a side stream, as torch.cuda.graphs asks). The warm-up
        writes this step's key and value at the slot's length, which the replay then writes again alike."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._logits = self._forward()
        return graph.replay
