"""Drafter training checked on a GPU: `python -m reference_eagle4.training.gpu_check --out DIR`.

It builds a random-weight target of SmolLM2-135M's shapes (the default target) directly on the device, with
nothing to download, and random-token prompts that share a few system prompts as the training pool's rows do,
then runs every stage of `specbench train-data` and `specbench train` there, each on a fixed workload:

1. generation: a greedy and a sampled response to every prompt, decoded by the engine's continuous batching
   (vanilla, concurrency 64, `generate.decode`) into a TokenStore; response tokens/s;
2. features: the target's teacher-forced pass over every response into a FeatureStore (`features.extract`);
   response tokens/s and positions/s;
3. training: eagle4, dflash and dspark, a fixed number of optimizer steps each (TrainConfig's defaults, the
   frozen head in the device's dtype) after a short warm-up run; s/step and response tokens/s;
4. correctness: for each kind, one training step's loss and the drafter's gradient norm on the device equal
   the same step on the CPU (fp32 on both, the same drafter, sample and random rows) within a relative
   tolerance, a failure otherwise. DSpark's confidence loss is weighted 0 here: its targets are argmax
   matches, which a near-tie may flip between devices;
5. an estimate of a real run on this device: generation, features and `--plan-epochs` epochs of each kind
   over `--plan-tokens` response tokens (2M and 1 by default), from the rates measured in 1-3, printed and
   recorded as `estimate` (how long the real run would take, not a measurement).

The workloads are sized to take a few minutes on one H100 (under 8). Writes DIR/gpu-train-check.json (device
facts, figures, checks, estimate); nothing else is kept. `--device cpu --tiny` runs the same on small shapes
in seconds (tests/reference_eagle4/test_training_gpu_check.py runs it). Exit status: 2 when the device cannot
run it, 1 when a check failed, 0 otherwise (speed is reported, not enforced).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.device import device_label, gpu_facts, resolve_device, resolve_dtype
from reference_eagle4.kernels.bench import SMOLLM2_135M, random_target
from reference_eagle4.model import ModelArgs, Transformer
from reference_eagle4.training.features import extract
from reference_eagle4.training.generate import GenPlan, decode
from reference_eagle4.training.store import FeatureStore, Samples
from reference_eagle4.training.train import KINDS, TrainConfig, draft_vocab, make_objective, train

TINY = ModelArgs(dim=64, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab_size=512,
                 norm_eps=1e-5, rope_theta=10000.0, max_position=1024, tie_embeddings=True)
TOLERANCE = 1e-3                     # relative: fp32 on two devices sums in different orders


@dataclass(frozen=True)
class Workload:
    """What one check runs: the target, its prompts and responses, and the training steps per kind."""

    target: ModelArgs
    systems: int                     # system prompts the prompts share (their features are computed once)
    system_len: int
    prompts: int
    prompt_len: int                  # tokens after the system prompt
    new_tokens: int                  # every response is this long (random weights never emit EOS)
    concurrency: int
    batch: int                       # sequences per teacher-forced forward
    steps: int                       # timed optimizer steps per kind
    warmup_steps: int
    vocab: int                       # the drafters' draft vocabulary


FULL = Workload(SMOLLM2_135M, systems=4, system_len=160, prompts=128, prompt_len=32, new_tokens=160,
                concurrency=64, batch=16, steps=30, warmup_steps=3, vocab=32768)
SMALL = Workload(TINY, systems=2, system_len=12, prompts=8, prompt_len=6, new_tokens=12, concurrency=4, batch=4,
                 steps=3, warmup_steps=1, vocab=256)


def prompt_ids(w: Workload, seed: int = 5) -> dict[str, list[int]]:
    """Prompt token ids by pool id: one of `systems` random system prompts, then random tokens of its own."""
    g = torch.Generator().manual_seed(seed)
    V = w.target.vocab_size
    systems = torch.randint(0, V, (w.systems, w.system_len), generator=g)
    return {f"p{i:04d}": systems[i % w.systems].tolist() + torch.randint(0, V, (w.prompt_len,), generator=g).tolist()
            for i in range(w.prompts)}


def plan(w: Workload, new_tokens: int) -> GenPlan:
    """A greedy and one sampled round over every prompt, with no token goal (each round decodes them all)."""
    return GenPlan(samples=1, temperatures=(0.8,), max_new_tokens=new_tokens, concurrency=w.concurrency,
                   target_tokens=None)


def generation(model: Transformer, w: Workload, work: Path) -> dict[str, Any]:
    """Stage 1 into work/tokens, after a short warm-up decode at the same concurrency (outside the timing)."""
    prompts = prompt_ids(w)
    rows = [{"id": k, "category": "chat"} for k in prompts]
    quiet = dict(log=lambda m: None, progress=False)
    decode(model, rows[: w.concurrency], prompts, set(), work / "warm-tokens", plan(w, 4), **quiet)
    t0 = time.perf_counter()
    stats = decode(model, rows, prompts, set(), work / "tokens", plan(w, w.new_tokens), **quiet)
    seconds = time.perf_counter() - t0
    return {"records": stats["records"], "response_tokens": stats["tokens"], "concurrency": w.concurrency,
            "seconds": seconds, "response_tokens_per_s": stats["tokens"] / seconds}


def features(model: Transformer, w: Workload, work: Path) -> dict[str, Any]:
    """Stage 2: work/tokens into the FeatureStore work/features."""
    t0 = time.perf_counter()
    stats = extract(model, work / "tokens", work / "features", batch=w.batch, log=lambda m: None)
    seconds = time.perf_counter() - t0
    n, positions = stats["response_tokens"], stats["positions"]
    return {"records": stats["records"], "response_tokens": n, "positions": positions, "seconds": seconds,
            "response_tokens_per_s": n / seconds, "positions_per_s": positions / seconds}


def training(model: Transformer, w: Workload, samples: Samples, kind: str, device: torch.device, work: Path,
             ) -> dict[str, Any]:
    """Stage 3 for one kind: a warm-up run, then the timed one (its own folder, from scratch)."""
    quiet = dict(resume=False, log=lambda m: None, progress=False, kind=kind)
    cfg = TrainConfig(steps=w.steps, vocab=w.vocab, device=str(device), ckpt_every_s=1e9)
    train(samples, model, work / f"warm-{kind}", replace(cfg, steps=w.warmup_steps), **quiet)
    _, state = train(samples, model, work / kind, cfg, **quiet)
    seconds = state["elapsed"]
    return {"steps": state["step"], "seconds": seconds, "s_per_step": seconds / state["step"],
            "response_tokens": state["tokens"], "response_tokens_per_s": state["tokens"] / seconds,
            "eval": state["eval"]}


def one_step(kind: str, model: Transformer, sample: dict[str, Any], cfg: TrainConfig, d2t: torch.Tensor,
             device: torch.device) -> dict[str, float]:
    """The loss of one training step of a fresh drafter on `device` and its gradient norm; the rows the
    objective samples come from the CPU's seeded stream, so every device draws the same ones."""
    objective = make_objective(kind, model, cfg, d2t, device)
    torch.manual_seed(1)
    loss = objective.run(sample)
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in objective.d.parameters() if p.grad is not None])
    return {"loss": float(loss.detach()), "grad_norm": float(norm)}


def rel_diff(a: float, b: float) -> float:
    """|a - b| relative to b."""
    return abs(a - b) / max(abs(b), 1e-12)


def step_check(kind: str, model: Transformer, samples: Samples, w: Workload, device: torch.device,
               ) -> dict[str, Any]:
    """Check 4 for one kind: the same step in fp32 on the device and on the CPU."""
    cfg = TrainConfig(vocab=w.vocab, dtype="float32", confidence_weight=0.0)
    d2t = draft_vocab(samples, w.vocab, model.args.vocab_size)
    sample = dict(samples[0])
    on_device = one_step(kind, model, sample, cfg, d2t, device)
    on_cpu = one_step(kind, model, sample, cfg, d2t, torch.device("cpu"))
    diff = {k: rel_diff(on_device[k], on_cpu[k]) for k in on_cpu}
    return {"device": on_device, "cpu": on_cpu, "rel_diff": diff, "tolerance": TOLERANCE,
            "ok": all(d <= TOLERANCE for d in diff.values())}


def estimate(report: dict[str, Any], tokens: int, epochs: float) -> dict[str, Any]:
    """Seconds a real run of `tokens` response tokens would take here, stage by stage, at the measured rates."""
    gen = tokens / report["generate"]["response_tokens_per_s"]
    feat = tokens / report["features"]["response_tokens_per_s"]
    per_kind = {k: epochs * tokens / r["response_tokens_per_s"] for k, r in report["train"].items()}
    total = gen + feat + sum(per_kind.values())
    return {"response_tokens": tokens, "epochs": epochs, "generate_s": gen, "features_s": feat,
            "train_s": per_kind, "total_s": total, "total_hours": total / 3600}


def run(w: Workload, device: torch.device, out: Path, tokens: int, epochs: float, say: Callable[[str], None],
        ) -> int:
    """Every stage and check, the report written to out/gpu-train-check.json; the exit status."""
    t0 = time.perf_counter()
    dtype = resolve_dtype("auto", device)
    report: dict[str, Any] = {"device": device_label(device), "gpu": gpu_facts(device),
                              "target_dtype": str(dtype).removeprefix("torch."),
                              "workload": {**asdict(w), "target": asdict(w.target)}}
    model = random_target(w.target, dtype, str(device))
    with tempfile.TemporaryDirectory(prefix="gpu-train-check-") as tmp:
        work = Path(tmp)
        report["generate"] = g = generation(model, w, work)
        say(f"generate: {g['response_tokens']} response tokens at C = {w.concurrency} in {g['seconds']:.1f} s "
            f"({g['response_tokens_per_s']:.0f} tok/s)")
        report["features"] = f = features(model, w, work)
        say(f"features: {f['response_tokens']} response tokens, {f['positions']} positions in {f['seconds']:.1f} s "
            f"({f['response_tokens_per_s']:.0f} response tok/s)")
        samples = FeatureStore(work / "features").samples()
        report["train"], report["checks"] = {}, {}
        for kind in KINDS:
            report["train"][kind] = t = training(model, w, samples, kind, device, work)
            say(f"train {kind}: {t['s_per_step']:.3f} s/step, {t['response_tokens_per_s']:.0f} response tok/s")
            report["checks"][kind] = c = step_check(kind, model, samples, w, device)
            say(f"check {kind}: loss {c['device']['loss']:.6f} here, {c['cpu']['loss']:.6f} on the CPU; gradient "
                f"norm {c['device']['grad_norm']:.6f} / {c['cpu']['grad_norm']:.6f}: {'ok' if c['ok'] else 'FAILED'}")
    report["estimate"] = e = estimate(report, tokens, epochs)
    say(f"estimate: {tokens} response tokens, {epochs:g} epoch(s) of each kind: {e['total_hours']:.2f} h "
        f"(generate {e['generate_s'] / 60:.0f} min, features {e['features_s'] / 60:.0f} min, train "
        + ", ".join(f"{k} {s / 60:.0f} min" for k, s in e["train_s"].items()) + ")")
    report["seconds"] = time.perf_counter() - t0
    report["ok"] = all(c["ok"] for c in report["checks"].values())
    path = out / "gpu-train-check.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    say(f"{'passed' if report['ok'] else 'FAILED'} in {report['seconds']:.0f} s: {path}")
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu-train-check.json")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--tiny", action="store_true", help="small shapes (any device, seconds)")
    ap.add_argument("--plan-tokens", type=int, default=2_000_000, help="response tokens of the real run estimated")
    ap.add_argument("--plan-epochs", type=float, default=1.0, help="its training epochs per kind")
    args = ap.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        print(f"gpu_check: --device {err}")
        return 2
    if device.type != "cuda" and not args.tiny:
        print(f"gpu_check: SmolLM2-135M shapes need a CUDA GPU, not {device}; --tiny runs small shapes anywhere")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if args.tiny and device.type == "cpu":
        torch.set_num_threads(1)                # small ops run fastest on one thread
    try:
        return run(SMALL if args.tiny else FULL, device, args.out, args.plan_tokens, args.plan_epochs,
                   lambda s: print(s, flush=True))
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    sys.exit(main())
