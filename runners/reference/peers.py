"""The reference engine against `transformers.generate` on the same prompts, in one process.

Prompts alternate between the two engines so machine drift cancels in the ratio; both decode greedily
with the same weights and dtype, so their tokens should agree (exactly in fp32).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specbench.runners.reference.runner import ReferenceRunner
from specbench.settings import Job, Settings


@dataclass
class PeerResult:
    engine: str
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def bench_transformers(job: Job, max_new_tokens: int, seed: int = 0) -> tuple[PeerResult, PeerResult, float]:
    """(reference vanilla, transformers generate, share of prompts with identical tokens)."""
    from transformers import AutoModelForCausalLM

    # transformers.generate prefills every prompt whole, so the reference engine does too here
    runner = ReferenceRunner(job.target, job.dtype, job.threads, prefix_cache=0)
    requests = runner.requests(job.rows(seed))
    settings = Settings("vanilla", 1, 1, max_new_tokens)
    engine = runner.make_engine(settings, runner.max_len(requests, settings))
    hf = AutoModelForCausalLM.from_pretrained(runner.folder, dtype=runner.model.embed.weight.dtype).eval()
    ours, theirs = PeerResult("reference"), PeerResult("transformers")
    same = 0
    for req in requests:
        got: list[list[int]] = []
        t0 = time.perf_counter()
        engine.generate([req], lambda seq: got.append(seq.output))
        ours.seconds += time.perf_counter() - t0
        ours.tokens += len(got[0])
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = hf.generate(torch.tensor([req.prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                              eos_token_id=list(runner.eos_ids), pad_token_id=runner.eos_ids[0])
            theirs.seconds += time.perf_counter() - t0
        ref = out[0, len(req.prompt_ids):].tolist()
        theirs.tokens += len(ref)
        same += ref == got[0]
    return ours, theirs, same / len(requests)
