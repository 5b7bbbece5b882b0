"""Quick acceptance and drafter-cost measurements for a drafter (a checkpoint or an exported folder).

Runs the reference engine greedily on a few prompts of a bundled JSONL set for several (method, options)
and reports, per configuration: AL (token-weighted), depth-1 hit rate (steps whose accepted path reaches
depth 1), mean drafter time per step (everything `propose` does: catch-up plus every draft level),
verification-inclusive tok/s, and whether the output equals vanilla decoding.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.drafters.eagle4 import Eagle4Config, Eagle4Drafter, load_drafter


def drafter_from_checkpoint(path: str | Path) -> Eagle4Drafter:
    """The drafter inside a training checkpoint (ckpt.pt) or an exported folder."""
    path = Path(path)
    if path.is_dir():
        return load_drafter(path)
    ck = torch.load(path, weights_only=False, map_location="cpu")
    d = Eagle4Drafter(Eagle4Config.from_json(ck["drafter_config"]))
    if "d2t" in ck["drafter"] and ck["drafter"]["d2t"] is not None:
        d.d2t = ck["drafter"]["d2t"]
    d.load_state_dict(ck["drafter"])
    d.lowrank_ready = True
    return d.eval().requires_grad_(False)


def bundled_requests(tokenizer, path: str | Path, n: int, stride: int | None = None) -> list:
    from reference_eagle4.engine import Request
    from reference_eagle4.training.regenerate import chat

    path = Path(path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    stride = stride or max(1, len(rows) // n)
    system_prompts = json.loads((path.parent / "system_prompts.json").read_text(encoding="utf-8"))
    out = []
    for r in rows[::stride][:n]:
        row = {"id": r["question_id"], "category": r["category"], "prompt": r["prompt"],
               "image_caption": r.get("image_caption")}
        ids = tokenizer.apply_chat_template(chat(row, system_prompts), add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        out.append(Request(row["id"], list(ids), {"category": r["category"]}))
    return out


def run(target, proposer, requests, max_new_tokens: int = 128, concurrency: int = 1,
        eos: tuple[int, ...] = ()) -> dict[str, Any]:
    from reference_eagle4.engine import Engine, GenerationConfig

    cfg = GenerationConfig(max_new_tokens=max_new_tokens, eos_ids=eos, concurrency=concurrency)
    eng = Engine(target, proposer, cfg, max_len=max(len(r.prompt_ids) for r in requests) + max_new_tokens + 64)
    draft_time = [0.0]
    inner = proposer.propose

    def timed(seqs):
        t0 = time.perf_counter()
        out = inner(seqs)
        draft_time[0] += time.perf_counter() - t0
        return out

    proposer.propose = timed
    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    eng.generate(requests, lambda s: res.__setitem__(s.request.id, s))
    wall = time.perf_counter() - t0
    steps = [st for s in res.values() for st in s.steps]
    n_steps = max(1, len(steps))
    depth_hits: dict[int, float] = {}
    for d in range(1, 6):
        depth_hits[d] = round(sum(st["accepted"] >= d for st in steps) / n_steps, 3)
    return {
        "al": round(sum(st["emitted"] for st in steps) / n_steps, 3),
        "hit": depth_hits,
        "draft_ms_per_step": round(1000 * draft_time[0] / n_steps, 2),
        "tok_s": round(sum(len(s.output) for s in res.values()) / wall, 1),
        "steps": len(steps),
        "outputs": {k: s.output for k, s in res.items()},
    }


def measure(drafter_path: str | Path, target: str = "smollm2-135m", prompts: str | Path | None = None,
            n_prompts: int = 6, budget: int = 16, max_new_tokens: int = 128, dtype: str = "bfloat16",
            configs: list[tuple[str, dict[str, Any]]] | None = None, threads: int | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from reference_eagle4.model import load_transformer, pack_linears
    from reference_eagle4.proposers import PROPOSERS
    from reference_eagle4.weights import resolve_target

    if threads:
        torch.set_num_threads(threads)
    folder = resolve_target(target)
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = Path(prompts) if prompts else Path(__file__).resolve().parents[2] / "data" / "prompt-enhancement.jsonl"
    reqs = bundled_requests(tok, prompts, n_prompts)
    model = pack_linears(load_transformer(folder, getattr(torch, dtype)))
    eos = tuple(x for x in {tok.eos_token_id, 2} if x is not None)
    configs = configs or [("eagle4-chain", {}), ("eagle4-tree", {}), ("eagle4-tree", {"head": "full"})]
    out: dict[str, Any] = {"prompts": str(prompts), "n": len(reqs), "budget": budget, "dtype": dtype}
    base = run(model, PROPOSERS["vanilla"](budget=1), reqs, max_new_tokens, eos=eos)
    out["vanilla"] = {k: v for k, v in base.items() if k != "outputs"}
    log(f"measure: vanilla {out['vanilla']}")
    for method, opts in configs:
        d = drafter_from_checkpoint(drafter_path)
        p = PROPOSERS[method](budget=budget, drafter=d, **opts)
        r = run(model, p, reqs, max_new_tokens, eos=eos)
        same = sum(r["outputs"][k] == base["outputs"][k] for k in base["outputs"])
        key = method + ("" if not opts else " " + json.dumps(opts, sort_keys=True))
        out[key] = {**{k: v for k, v in r.items() if k != "outputs"}, "equal_vanilla": f"{same}/{len(reqs)}"}
        log(f"measure: {key} {out[key]}")
    return out


if __name__ == "__main__":
    import sys

    cfgs = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
    print(json.dumps(measure(sys.argv[1], n_prompts=int(sys.argv[2]), budget=int(sys.argv[3]),
                             threads=int(sys.argv[4]), configs=cfgs), indent=1))


def drafter_step_ms(drafter_path: str | Path, target: str = "smollm2-135m", budget: int = 16,
                    method: str = "eagle4-tree", batch: int = 1, context: int = 300, pending: int = 3,
                    reps: int = 30, heads: tuple[str, ...] = ("lowrank", "full"), dtype: str = "bfloat16",
                    options: dict[str, Any] | None = None) -> dict[str, float]:
    """Median wall time of one `propose` (catch-up of `pending` accepted tokens + every draft level) per head,
    at equal work (same levels), measured interleaved (A B A B ...) so that machine load affects both alike."""
    from types import SimpleNamespace

    from reference_eagle4.model import load_transformer, pack_linears
    from reference_eagle4.proposers import PROPOSERS
    from reference_eagle4.weights import resolve_target

    from transformers import AutoTokenizer

    folder = resolve_target(target)
    model = pack_linears(load_transformer(folder, getattr(torch, dtype)))
    tok = AutoTokenizer.from_pretrained(folder)
    # real context: a bundled prompt plus its greedy continuation, so that the drafter is as confident as
    # in a run; early stopping off and a fixed depth, so that every head drafts the same number of levels
    reqs = bundled_requests(tok, Path(__file__).resolve().parents[2] / "data" / "prompt-enhancement.jsonl", 1)
    base = run(model, PROPOSERS["vanilla"](budget=1), reqs, max_new_tokens=64)["outputs"]
    seq_ids = (reqs[0].prompt_ids + base[reqs[0].id])[-context:]
    ids = torch.tensor([seq_ids] * batch)
    cache = model.new_cache(batch, context + 8)
    with torch.inference_mode():
        _, hidden = model(ids, cache, capture=tuple(model.args.eagle_layers))
    options = {"early_stop": False, **(options or {})}
    props = {}
    for head in heads:
        p = PROPOSERS[method](budget=budget, drafter=drafter_from_checkpoint(drafter_path), target=model,
                              head=head, **options)
        seqs = [SimpleNamespace(tokens=ids[b].tolist() + [7], slot=b, state=None) for b in range(batch)]
        with torch.inference_mode():
            for b, s in enumerate(seqs):
                p.begin(s, [h[b, : context - pending] for h in hidden])
        props[head] = (p, seqs)
    times: dict[str, list[float]] = {h: [] for h in heads}
    with torch.inference_mode():
        for r in range(reps + 3):
            for head in heads:
                p, seqs = props[head]
                for b, s in enumerate(seqs):
                    s.state = (torch.cat([h[b, context - pending:] for h in hidden], -1),
                               ids[b, context - pending:].clone())
                t0 = time.perf_counter()
                p.propose(seqs)
                if r >= 3:
                    times[head].append(1000 * (time.perf_counter() - t0))
    return {h: round(sorted(v)[len(v) // 2], 2) for h, v in times.items()}
