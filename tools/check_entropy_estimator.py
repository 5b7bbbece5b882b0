"""Check the top-K entropy estimate (runners/server_entropy.py) against the reference engine's exact entropy.

    python tools/check_entropy_estimator.py [--target smollm2-135m] [--dataset prompt-enhancement] [--limit 40]
        [--max-new-tokens 128] [--concurrency 4] [--dtype auto] [--min-agreement 0.95] [--timing-passes 2]

Starts `specbench serve` (vanilla, greedy) on the target in this process and sends the first --limit prompts of
the dataset as the vLLM runner sends them (its request body: streamed chat completions with `logprobs: true,
top_logprobs: 20`). Each request's final chunk carries the engine's exact mean entropy
(`metrics.specbench.mean_entropy`), and its chunks the logprobs of every output token: the same HTTP path a
vLLM server gives the runner. It prints, for each tail model, the share of requests that the estimate puts in
the same entropy quartile as the exact value (`analysis.metrics.al_by_entropy_quartile`'s split), the rank
correlation and the mean error (nats). Then --timing-passes pairs of passes over the same requests, without
and with logprobs in turn, give the wall time with logprobs over without.

Exit 1 when the runners' tail model (`DEFAULT_TAIL`) agrees on fewer than --min-agreement of the requests;
bad input is one line (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specbench.errors import SpecbenchError
from specbench.runners.server import ServerRequest, sse_events
from specbench.runners.server_entropy import (
    DEFAULT_TAIL, TAIL_MODELS, mean_entropy, quartile_agreement, vllm_positions,
)
from specbench.runners.vllm import VllmRunner
from specbench.settings import Settings

STALL_S = 600.0


@dataclass
class Answer:
    """One request's exact mean entropy and the returned logprobs of its output tokens."""

    exact: float
    positions: list[list[float]]


async def _ask(client: Any, url: str, body: dict[str, Any]) -> Answer:
    exact, positions = None, []
    async for event in sse_events(client, url, body, STALL_S):
        for choice in event.get("choices") or []:
            if choice.get("logprobs"):
                positions += vllm_positions(choice["logprobs"].get("content") or [])
        exact = ((event.get("metrics") or {}).get("specbench") or {}).get("mean_entropy", exact)
    if exact is None:
        raise SpecbenchError(f"{url} gave no exact mean entropy: is it `specbench serve`?")
    return Answer(exact, positions)


async def _ask_all(base: str, bodies: list[dict[str, Any]], concurrency: int) -> list[Answer]:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0)) as client:
        async def one(body: dict[str, Any]) -> Answer:
            async with sem:
                return await _ask(client, base + "/v1/chat/completions", body)

        return list(await asyncio.gather(*(one(b) for b in bodies)))


def ask(base: str, model: str, requests: list[ServerRequest], settings: Settings) -> list[Answer]:
    """Send every request to the server at `base` serving `model` as the vLLM runner would with `settings` (its
    options say whether logprobs are asked for), `settings.concurrency` at a time; the answers in order."""
    runner = VllmRunner(model, endpoint=base)
    bodies = [runner._body(r, settings) for r in requests]
    return asyncio.run(_ask_all(base, bodies, settings.concurrency))


def agreement_table(answers: list[Answer], vocab_size: int) -> dict[str, dict[str, float]]:
    """Per tail model: quartile agreement with the exact entropies, Spearman's rank correlation, mean error."""
    exact = np.array([a.exact for a in answers])
    out = {}
    for tail in TAIL_MODELS:
        est = np.array([mean_entropy(a.positions, tail, vocab_size) for a in answers])
        ranks = [np.argsort(np.argsort(v, kind="stable")) for v in (exact, est)]
        out[tail] = {"agreement": quartile_agreement(list(exact), list(est)),
                     "spearman": float(np.corrcoef(*ranks)[0, 1]), "mean_error": float(np.mean(est - exact))}
    return out


def timing_ratio(base: str, model: str, requests: list[ServerRequest], settings: Settings, passes: int) -> float:
    """Wall time of the requests with logprobs over without, from `passes` interleaved pairs of passes."""
    spent = {"off": 0.0, "inline": 0.0}
    for _ in range(passes):
        for mode in spent:
            t0 = time.perf_counter()
            ask(base, model, requests, replace(settings, options={"entropy": mode}))
            spent[mode] += time.perf_counter() - t0
    return spent["inline"] / spent["off"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--dataset", default="prompt-enhancement")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--min-agreement", type=float, default=0.95)
    parser.add_argument("--timing-passes", type=int, default=2, help="0 skips the timing")
    args = parser.parse_args(argv)
    from specbench.dataset import load_rows
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    try:
        if args.limit < 4:
            raise SpecbenchError(f"--limit {args.limit}: quartiles need at least 4 requests")
        rows = load_rows(args.dataset, limit=args.limit)
        requests = VllmRunner("specbench-serve", endpoint="http://127.0.0.1:1").requests(rows)
        settings = Settings("vanilla", 1, args.concurrency, args.max_new_tokens, options={"entropy": "inline"})
        cfg = ServeConfig(target=args.target, method="vanilla", budget=1, concurrency=args.concurrency,
                          dtype=args.dtype, port=0)
        with SpecbenchServer(cfg) as server:
            model = server.service.model_name
            answers = ask(server.url, model, requests, settings)
            table = agreement_table(answers, int(server.service.runner.model.embed.weight.shape[0]))
            ratio = (timing_ratio(server.url, model, requests, settings, args.timing_passes)
                     if args.timing_passes else None)
    except SpecbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tokens = sum(len(a.positions) for a in answers)
    exact = [a.exact for a in answers]
    print(f"{len(answers)} requests, {tokens} output tokens; exact mean entropy {min(exact):.3f} to {max(exact):.3f} "
          f"nats ({args.target}, {args.dataset}, top-20 logprobs)")
    for tail, row in table.items():
        mark = "  <- runners" if tail == DEFAULT_TAIL else ""
        print(f"  tail {tail:8s} quartile agreement {row['agreement']:.1%}  spearman {row['spearman']:.4f}  "
              f"mean error {row['mean_error']:+.3f} nats{mark}")
    if ratio is not None:
        print(f"wall time with logprobs / without: {ratio:.3f} ({args.timing_passes} interleaved pairs of passes, "
              f"concurrency {args.concurrency})")
    agreement = table[DEFAULT_TAIL]["agreement"]
    if agreement < args.min_agreement:
        print(f"FAIL: the {DEFAULT_TAIL} tail agrees on {agreement:.1%} of requests, below {args.min_agreement:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
