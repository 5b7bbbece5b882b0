"""The bundled engine checked end to end on a GPU: `python -m reference_eagle4.gpu_check --out DIR`.

It builds a random-weight target of Llama-3.1-8B's shapes and a random drafter in EAGLE-3's published layout
for it (one decoder layer fed three target layers, its own head over a 32000-token draft vocabulary mapped by
d2t) directly on the device, with nothing to download or transfer, and for each dtype asked for:

1. decodes a few prompts (random token ids) greedily with vanilla, eagle4-chain, eagle4-tree (also with the
   low-rank candidate head, whose Triton kernel runs on CUDA) and eagle4-harness, and compares each output with
   vanilla's: token-identical in fp32 (a failure otherwise); in bf16 the share of identical tokens is reported,
   since a batched step may round a near-tie differently (reference_eagle4/README.md);
2. counts the host's waits for the GPU inside the steps (`host_syncs`: what CUDA reports on a GPU);
3. calibrates the harness's cost table on the device (keyed by its name and dtype, saved in DIR, never in the
   cache where runs of other targets would find it), runs the harness with it at batch 1 and 8, and plans the
   tree a trained drafter's probabilities would get at batch 1 and at batch 8;
4. times vanilla batch-1 decoding, replayed from a CUDA graph and launched eagerly, against the memory-bandwidth
   floor: (the weights a step reads + the KV cache) / the measured device-to-device copy bandwidth.

Attention runs the Triton tree-attention kernel in every step where Triton is installed (forced in fp32 too,
so the identity check covers it). Writes DIR/gpu-check.json. `--device cpu --tiny` runs the same on small
shapes in seconds (tests/reference_eagle4/test_gpu_check.py runs it). Exit status: 2 when the device cannot
run it, 1 when a check failed, 0 otherwise (speed is reported, not enforced).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.calibration import calibrate, interleaved_ms, slug
from reference_eagle4.cost_table import CostTable
from reference_eagle4.device import device_label, gpu_facts, resolve_device, resolve_dtype
from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
from reference_eagle4.engine import Engine, GenerationConfig, Request
from reference_eagle4.host_syncs import CudaSyncs, HostReads, per_step
from reference_eagle4.kernels import available
from reference_eagle4.kernels.bench import random_target
from reference_eagle4.model import ModelArgs, Transformer
from reference_eagle4.planner import TreePlanner
from reference_eagle4.proposers import PROPOSERS
from reference_eagle4.proposers.eagle4 import Eagle4Proposer, drafter_level_fn

# Llama-3.1-8B's config.json (rope scaling left out: the weights are random)
LLAMA_31_8B = ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128, intermediate=14336,
                        vocab_size=128256, norm_eps=1e-5, rope_theta=500000.0, max_position=8192,
                        tie_embeddings=False)
TINY = ModelArgs(dim=64, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab_size=512,
                 norm_eps=1e-5, rope_theta=10000.0, max_position=1024, tie_embeddings=False)
# A trained drafter's candidate probabilities, best first (the shape EAGLE drafters show): what the planner is
# asked to size a tree for at batch 1 and 8, since a random drafter's probabilities say nothing
TRAINED_PROFILE = [0.85, 0.72, 0.6, 0.5, 0.42, 0.36, 0.3, 0.26, 0.22, 0.18, 0.15, 0.12, 0.1, 0.08, 0.06]


@dataclass(frozen=True)
class Shapes:
    """What one check runs: the target, the drafter's draft vocabulary, prompts, and the calibration grid."""

    target: ModelArgs
    draft_vocab: int
    prompts: int
    prompt_len: int
    new_tokens: int
    budget: int
    contexts: tuple[int, ...]           # the calibration grid (batch sizes 1 and 8)
    tokens: tuple[int, ...]
    widths: tuple[int, ...]
    repeats: int
    copy_bytes: int


FULL = Shapes(LLAMA_31_8B, 32000, prompts=4, prompt_len=128, new_tokens=48, budget=8, contexts=(256, 1024),
              tokens=(1, 2, 4, 8, 16), widths=(1, 4, 8), repeats=2, copy_bytes=2 ** 30)
SMALL = Shapes(TINY, 128, prompts=2, prompt_len=16, new_tokens=8, budget=6, contexts=(32,), tokens=(1, 4, 16),
               widths=(1, 8), repeats=1, copy_bytes=2 ** 24)


def eagle3_config(args: ModelArgs, draft_vocab: int) -> dict[str, Any]:
    """An EAGLE-3 drafter's config.json for `args` (LlamaForCausalLMEagle3, as published for Llama-3.1-8B)."""
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": args.dim,
            "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads, "head_dim": args.head_dim,
            "intermediate_size": args.intermediate, "vocab_size": args.vocab_size, "draft_vocab_size": draft_vocab,
            "rms_norm_eps": args.norm_eps, "rope_theta": args.rope_theta, "num_hidden_layers": 1,
            "max_position_embeddings": args.max_position, "target_num_hidden_layers": args.n_layers}


def random_drafter(args: ModelArgs, draft_vocab: int, device: torch.device) -> Eagle4Drafter:
    """A random drafter in the EAGLE-3 layout, made on `device`: d2t maps its vocabulary onto random target ids."""
    cfg = Eagle4Config.from_json(eagle3_config(args, draft_vocab))
    torch.manual_seed(3)
    with torch.device(device):
        d = Eagle4Drafter(cfg)
        d.d2t = torch.randperm(args.vocab_size)[:draft_vocab].sort().values
    d.reset_parameters(std=0.02)
    d.lowrank_ready = True          # random factors for the low-rank variant: its drafts only need to run
    return d.eval().requires_grad_(False)


def prompts(shapes: Shapes, n: int, seed: int = 5) -> list[Request]:
    """n prompts of random token ids."""
    g = torch.Generator().manual_seed(seed)
    return [Request(f"p{seed}-{i}", torch.randint(0, shapes.target.vocab_size, (shapes.prompt_len,),
                                                  generator=g).tolist()) for i in range(n)]


def warm_up(shapes: Shapes) -> Request:
    """A prompt none of the checked ones shares a prefix with."""
    return prompts(shapes, 1, seed=6)[0]


def decode(target: Transformer, proposer: Any, requests: list[Request], shapes: Shapes, concurrency: int = 1,
           cuda_graphs: bool = True) -> dict[str, Any]:
    """Greedy outputs and step facts of one method; ms_per_step: decoding time (after each prefill) per step.
    A warm-up request first compiles the kernels and captures the graph, outside the timing."""
    engine = Engine(target, proposer, GenerationConfig(shapes.new_tokens, concurrency=concurrency,
                                                       cuda_graphs=cuda_graphs),
                    max_len=shapes.prompt_len + shapes.new_tokens + 64 + 1)
    engine.generate([warm_up(shapes)], lambda seq: None)
    done: dict[str, Any] = {}
    engine.generate(requests, lambda seq: done.__setitem__(seq.request.id, seq))
    seqs = [done[r.id] for r in requests]
    steps = [st for s in seqs for st in s.steps]
    decoding = sum(s.t_end - s.t_first for s in seqs)
    return {"outputs": [s.output for s in seqs], "steps": len(steps),
            "al": sum(st["emitted"] for st in steps) / max(len(steps), 1),
            "mean_budget": sum(st["budget"] for st in steps) / max(len(steps), 1),
            "ms_per_step": 1000 * decoding / max(len(steps), 1) if concurrency == 1 else None,
            "graph": engine.decode_graph is not None}


def match_rate(outputs: list[list[int]], reference: list[list[int]]) -> float:
    """Share of vanilla's tokens a method reproduced, position by position."""
    same = sum(a == b for out, ref in zip(outputs, reference) for a, b in zip(out, ref))
    return same / max(sum(len(r) for r in reference), 1)


def copy_bandwidth(device: torch.device, n_bytes: int) -> float:
    """Bytes per ms of a device-to-device copy of n_bytes (read + write), median of timed copies."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = statistics.median(interleaved_ms([lambda: dst.copy_(src)], repeats=10, warmup=2, device=device)[0])
    return 2 * n_bytes / ms


def step_bytes(model: Transformer, context: float) -> float:
    """What one batch-1 decoding step must read: every weight but the embedding table (a step reads one of its
    rows; a tied head is read whole) and the KV cache at `context` positions."""
    embed = model.embed.weight
    weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values()
                  if p is not embed or model.args.tie_embeddings)
    a = model.args
    kv = 2 * a.n_layers * a.n_kv_heads * a.head_dim * context * embed.element_size()
    return weights + kv


def methods(target: Transformer, shapes: Shapes, device: torch.device, table: CostTable | None,
            ) -> dict[str, Callable[[], Any]]:
    """Every method the check runs, each a fresh proposer over a fresh random EAGLE-3 drafter."""
    L = shapes.budget
    drafter = lambda: random_drafter(shapes.target, shapes.draft_vocab, device)  # noqa: E731
    return {
        "eagle4-chain": lambda: PROPOSERS["eagle4-chain"](budget=L, drafter=drafter()),
        "eagle4-tree": lambda: PROPOSERS["eagle4-tree"](budget=L, drafter=drafter()),
        "eagle4-tree:head=lowrank": lambda: PROPOSERS["eagle4-tree"](budget=L, drafter=drafter(), head="lowrank"),
        "eagle4-harness": lambda: PROPOSERS["eagle4-harness"](budget=L, drafter=drafter(), table=table,
                                                              datastore="off"),
    }


def check_dtype(shapes: Shapes, dtype: torch.dtype, device: torch.device, out: Path, say: Callable[[str], None],
                ) -> dict[str, Any]:
    """Every check of one dtype (module docstring); `ok` False when an fp32 output differs from vanilla's."""
    name = str(dtype).removeprefix("torch.")
    target = random_target(shapes.target, dtype, str(device))
    if available():
        target.attention = "triton"             # the kernel in every step, fp32 included
    requests = prompts(shapes, 8)
    first = requests[: shapes.prompts]
    result: dict[str, Any] = {"dtype": name, "attention": target.attention}

    vanilla = decode(target, PROPOSERS["vanilla"](budget=1), first, shapes)
    eager = decode(target, PROPOSERS["vanilla"](budget=1), first, shapes, cuda_graphs=False)
    say(f"[{name}] vanilla: {vanilla['ms_per_step']:.2f} ms/step ({'CUDA graph' if vanilla['graph'] else 'eager'}),"
        f" {eager['ms_per_step']:.2f} ms/step eager")

    proposer = Eagle4Proposer(budget=16, drafter=random_drafter(shapes.target, shapes.draft_vocab, device),
                              target=target)
    t0 = time.perf_counter()
    table = calibrate(target, batches=(1, 8), contexts=shapes.contexts, tokens=shapes.tokens,
                      drafter_step=lambda b, w: drafter_level_fn(proposer, b, w), widths=shapes.widths,
                      repeats=shapes.repeats)
    table.save(out / f"cost-table-{slug(table.key)}.json")
    del proposer
    say(f"[{name}] calibrated {table.key['device']} ({name}) in {time.perf_counter() - t0:.1f} s")

    runs = {}
    for label, make in methods(target, shapes, device, table).items():
        runs[label] = decode(target, make(), first, shapes)
        rate = match_rate(runs[label]["outputs"], vanilla["outputs"])
        runs[label]["match_rate"] = rate
        say(f"[{name}] {label}: {rate:.1%} of vanilla's tokens, AL {runs[label]['al']:.2f}, "
            f"{runs[label]['ms_per_step']:.2f} ms/step")
    harness_8 = decode(target, methods(target, shapes, device, table)["eagle4-harness"](), requests, shapes,
                       concurrency=8)
    runs["eagle4-harness C=8"] = {**harness_8, "match_rate": None}

    waits = {}
    for label, make in {"vanilla": lambda: PROPOSERS["vanilla"](budget=1),
                        **methods(target, shapes, device, table)}.items():
        engine = Engine(target, make(), GenerationConfig(shapes.new_tokens),
                        max_len=shapes.prompt_len + shapes.new_tokens + 65)
        engine.generate([warm_up(shapes)], lambda seq: None)     # compiles and captures, outside the count
        waits[label] = per_step(engine, first[:1], CudaSyncs() if device.type == "cuda" else HostReads()).summary()

    bandwidth = copy_bandwidth(device, shapes.copy_bytes)
    floor_ms = step_bytes(target, shapes.prompt_len + shapes.new_tokens / 2) / bandwidth
    plans = {b: TreePlanner(table, 16, b, shapes.contexts[-1]).best_sizes(
        [TRAINED_PROFILE] * b, 4 * table.draft(b, shapes.widths[-1])).sizes[0] for b in (1, 8)}
    exact = all(r["match_rate"] == 1.0 for r in runs.values() if r["match_rate"] is not None) \
        and eager["outputs"] == vanilla["outputs"]
    for r in [vanilla, eager, *runs.values()]:
        del r["outputs"]
    result.update(
        vanilla=vanilla, vanilla_eager=eager, methods=runs, host_waits_per_step=waits,
        copy_bytes_per_ms=bandwidth, floor_ms=floor_ms,
        vanilla_over_floor=vanilla["ms_per_step"] / floor_ms, eager_over_floor=eager["ms_per_step"] / floor_ms,
        harness_planned_tree={"profile": TRAINED_PROFILE, "budget": 16, "batch_1": plans[1], "batch_8": plans[8],
                              "differs": plans[1] != plans[8]},
        cost_table_key=table.key, token_identical=exact, ok=exact or dtype != torch.float32)
    say(f"[{name}] floor {floor_ms:.2f} ms/step (copy {bandwidth / 1e6:.0f} GB/s): vanilla at "
        f"{result['vanilla_over_floor']:.2f}x; planned tree at L=16: {plans[1]} drafts at batch 1, {plans[8]} at 8; "
        f"outputs {'identical to vanilla' if exact else 'NOT identical to vanilla'}")
    del target
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu-check.json and the cost tables")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--tiny", action="store_true", help="small shapes (any device, seconds)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32 (outputs must equal "
                    "vanilla's), bfloat16 (their match rate is reported)")
    args = ap.parse_args(argv)
    try:
        device = resolve_device(args.device)
        dtypes = [resolve_dtype(d.strip(), device) for d in args.dtypes.split(",")]
    except ValueError as err:
        print(f"gpu_check: {err}")
        return 2
    if device.type != "cuda" and not args.tiny:
        print("gpu_check: Llama-3.1-8B shapes need a CUDA GPU (torch sees none); --tiny runs small shapes anywhere")
        return 2
    shapes = SMALL if args.tiny else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if args.tiny and device.type == "cpu":
        torch.set_num_threads(1)                # small ops run fastest on one thread
    try:
        return run(shapes, dtypes, device, args.out, args.tiny)
    finally:
        torch.set_num_threads(threads)


def run(shapes: Shapes, dtypes: list[torch.dtype], device: torch.device, out: Path, tiny: bool) -> int:
    """Every check for every dtype, the report written to out/gpu-check.json; the exit status."""
    t0 = time.perf_counter()
    report: dict[str, Any] = {"device": device_label(device), "gpu": gpu_facts(device), "triton_in_step": available(),
                              "shapes": {**asdict(shapes), "target": asdict(shapes.target)}, "dtypes": []}
    print(f"gpu_check on {report['device']} ({'tiny' if tiny else 'Llama-3.1-8B'} shapes)", flush=True)
    for dtype in dtypes:
        report["dtypes"].append(check_dtype(shapes, dtype, device, out, lambda s: print(s, flush=True)))
    report["seconds"] = time.perf_counter() - t0
    report["ok"] = all(d["ok"] for d in report["dtypes"])
    path = out / "gpu-check.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'passed' if report['ok'] else 'FAILED'} in {report['seconds']:.0f} s: {path}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
