"""`train_drafter`: the whole self-distillation pipeline (regenerate -> features -> train -> export).

Everything lives in one folder and every stage resumes: regen.jsonl (rows appended as they finish),
features.pt (rows regeneration appended are computed and merged), train.log, state.json (seconds spent per
stage, summed over resumed runs), and per drafter kind <kind>/ckpt.pt (every few minutes) and
<kind>/drafter/ (the fp16 export: config.json, model.safetensors without the target's embedding or
lm_head, README.md model card). The kinds share the regenerated data and the features: training
dflash after eagle4 in the same folder costs only its own training time. `build_datastore` indexes the
same regen.jsonl for retrieval drafting (reference_eagle4/datastore.py) into datastore/.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.training.regenerate import Chat
from reference_eagle4.training.train import KINDS, TrainConfig

DEFAULT_POOL = Path(__file__).resolve().parents[2] / "data" / "train-pool.jsonl"


class _Log:
    def __init__(self, path: Path, echo: bool):
        self.fh = open(path, "a", encoding="utf-8")
        self.echo = echo

    def __call__(self, msg: str) -> None:
        line = time.strftime("%Y-%m-%d %H:%M:%S ") + msg
        self.fh.write(line + "\n")
        self.fh.flush()
        if self.echo:
            print(line, flush=True)


def _state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"seconds": {}}


def _save_state(path: Path, st: dict[str, Any]) -> None:
    """Merge into the file as it is now: kinds trained side by side in one folder each add their own keys."""
    now = _state(path)
    now["seconds"].update(st["seconds"])
    now.update({k: v for k, v in st.items() if k != "seconds"})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(now, indent=2) + "\n")
    tmp.replace(path)


def _open_folder(out: Path, pool_path: str | Path | None, target: str,
                 threads: int | None) -> tuple[Path, Path, Path, dict[str, Any]]:
    """(pool, target folder, state path, state) for a pipeline working in `out`."""
    from reference_eagle4.weights import resolve_target

    if threads:
        torch.set_num_threads(threads)
    st_path = out / "state.json"
    return Path(pool_path) if pool_path else DEFAULT_POOL, resolve_target(target), st_path, _state(st_path)


def _regenerate(out: Path, pool: Path, folder: Path, chat: Chat | None, st: dict[str, Any], st_path: Path,
                say: Callable[[str], None], *, minutes: float | None, max_new_tokens: int, concurrency: int,
                seed: int, limit: int | None, method: str, device: str = "cpu") -> None:
    """The shared first stage: append the target's greedy responses to out/regen.jsonl, time it in state."""
    from reference_eagle4.training.regenerate import regenerate

    if chat is None:
        raise ValueError("regeneration needs chat(row) -> messages (specbench train passes the benchmarks' own)")
    t0 = time.time()
    regenerate(pool, out / "regen.jsonl", folder, chat, max_new_tokens=max_new_tokens, concurrency=concurrency,
               seed=seed, limit=limit, minutes=minutes, method=method, budget=1 if method == "vanilla" else 8,
               device=device, log=say)
    st["seconds"]["regen"] = st["seconds"].get("regen", 0.0) + time.time() - t0
    _save_state(st_path, st)


def build_datastore(out_dir: str | Path = "runs/train", dest: str | Path | None = None,
                    pool_path: str | Path | None = None, target: str = "smollm2-135m", chat: Chat | None = None,
                    minutes: float | None = None, max_new_tokens: int = 160, concurrency: int = 8,
                    threads: int | None = 2, regen_method: str = "ngram", seed: int = 0,
                    echo: bool = True, data: str | Path | None = None) -> Path:
    """Regenerate the pool's responses (the same out_dir/regen.jsonl the drafters train on; resumed, at most
    `minutes` more of it, None: the whole pool; 0: none) and index them as a retrieval datastore in `dest`
    (default out_dir/datastore) with a card naming the data behind it. data: a `specbench train-data` folder
    whose greedy responses are indexed instead (nothing is regenerated)."""
    from reference_eagle4.datastore import Datastore
    from reference_eagle4.training.regenerate import load_pool
    from reference_eagle4.weights import sha256_file, weights_sha256

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dest = Path(dest) if dest else out / "datastore"
    say = _Log(out / "train.log", echo)
    pool, folder, st_path, st = _open_folder(out, pool_path, target, threads)
    if data is not None:
        rows, regen_seconds, regen_method = greedy_records(Path(data)), None, "vanilla"
    else:
        if minutes is None or minutes > 0:
            _regenerate(out, pool, folder, chat, st, st_path, say, minutes=minutes, max_new_tokens=max_new_tokens,
                        concurrency=concurrency, seed=seed, limit=None, method=regen_method)
        rows, regen_seconds = regenerated_rows(out / "regen.jsonl", say), st["seconds"].get("regen", 0.0)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    store = Datastore.from_responses([r["output_ids"] for r in rows], vocab)
    cats: dict[str, int] = {}
    for r in rows:
        cats[r["category"]] = cats.get(r["category"], 0) + 1
    info = {"target": target, "target_weights_sha256": weights_sha256(folder), "pool": pool.name,
            "pool_rows": len(load_pool(pool)), "rows": len(rows), "categories": cats,
            "regen": {"max_new_tokens": max_new_tokens, "decoding": f"greedy ({regen_method})",
                      "seconds": None if regen_seconds is None else round(regen_seconds)}}
    store.save(dest, info)
    sha = sha256_file(dest / "tokens.npy")
    (dest / "README.md").write_text(datastore_card(store, info, sha))
    say(f"datastore: {dest} ({len(store)} tokens from {len(rows)} responses)")
    return dest


def regenerated_rows(regen: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The rows of a regen.jsonl; a line an interruption cut short is left out (regeneration redoes it)."""
    if not regen.exists():
        raise FileNotFoundError(f"{regen}: no regenerated responses to index (run with --minutes > 0)")
    rows, cut = [], 0
    for line in regen.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            cut += 1
    if cut:
        say(f"datastore: {cut} unfinished line(s) in {regen} left out (a rerun with --minutes > 0 redoes them)")
    return rows


def greedy_records(data: Path) -> list[dict[str, Any]]:
    """The greedy responses ("<pool id>#g") of a `specbench train-data` token store, as regen.jsonl rows."""
    from reference_eagle4.training.store import TokenStore, is_sampled

    tokens = TokenStore(data / "tokens")
    rows = tokens.rows([i for i, e in enumerate(tokens.entries) if not is_sampled(e["key"]) and e["n_out"] > 0])
    if not rows:
        raise FileNotFoundError(f"{data / 'tokens'}: no greedy responses to index (run specbench train-data "
                                "generate)")
    return rows


def datastore_card(store, info: dict[str, Any], sha: str) -> str:
    cats = ", ".join(f"{k} {v}" for k, v in sorted(info["categories"].items()))
    return "\n".join([
        f"# Retrieval datastore for {info['target']}", "",
        "The target's own greedy responses to training-pool prompts (disjoint from the benchmark sets), indexed "
        "for retrieval drafting: `eagle4-harness` drafts the continuation that most often followed the longest "
        f"suffix ({store.min_n} to {store.max_n} tokens) of the context here, as one more branch of its tree, "
        "priced by the acceptance the run measures for it (`--option datastore=off` leaves it out).", "",
        "| | |", "|---|---|",
        f"| target | {info['target']} (weights sha256 `{info['target_weights_sha256'][:16]}…`) |",
        f"| data | {info['rows']} of the {info['pool_rows']} prompts of `{info['pool']}` ({cats}), responses "
        f"regenerated {info['regen']['decoding']} by the target, ≤ {info['regen']['max_new_tokens']} new tokens |",
        f"| tokens | {len(store)} |",
        f"| tokens.npy sha256 | `{sha}` |",
        f"| regeneration time | " + (f"{info['regen']['seconds'] / 60:.0f} min on a 2-core CPU |"
                                      if info["regen"]["seconds"] is not None else
                                      "see the `specbench train-data generate` log that made them |"),
        "", "Rebuild it with `specbench datastore` (BENCHMARKS.md gives the command that built this one).", ""])


def train_drafter(kind: str = "eagle4", out_dir: str | Path = "runs/train",
                  pool_path: str | Path | None = None, target: str = "smollm2-135m", chat: Chat | None = None,
                  minutes: float | None = 90.0, steps: int | None = None, seed: int = 0, resume: bool = True,
                  regen_minutes: float | None = None, regen_limit: int | None = None,
                  max_new_tokens: int = 160, concurrency: int = 8, threads: int | None = 2,
                  regen_method: str = "ngram",
                  train_config: TrainConfig | None = None, progress: bool = True, echo: bool = True,
                  log: Callable[[str], None] | None = None, data: str | Path | None = None,
                  device: str = "cpu") -> Path:
    """Train a drafter for `target` from `pool_path`; return the exported drafter folder.

    chat(row) -> messages formats a pool row as the benchmarks would (specbench's `chat_messages`; needed
    only while rows remain to regenerate). minutes: wall budget for the whole pipeline (regen gets
    `regen_minutes`, default a third; training gets what is left after the features, minus a small export
    margin). steps: fixed optimizer steps instead of a time-based schedule. resume=False starts over (the
    folder's files are replaced). The shipped drafters' cards and BENCHMARKS.md give the arguments that
    made them (TrainConfig defaults, greedy regeneration, 160 new tokens; the EAGLE-4 one continued with
    `train_config.init_from`). data: a `specbench train-data` folder whose feature store replaces the
    regeneration and feature stages (greedy and sampled responses at scale). device (auto, cpu, cuda, cuda:N):
    where the target regenerates and computes features and where the drafter trains (it replaces
    train_config.device).
    """
    if kind not in KINDS:
        raise ValueError(f"drafter kind must be one of {KINDS}, got {kind!r}")
    from reference_eagle4.device import auto_dtype
    from reference_eagle4.model import load_transformer
    from reference_eagle4.training.features import build_features
    from reference_eagle4.training.train import train
    from reference_eagle4.weights import sha256_file, weights_sha256

    out = Path(out_dir)
    (out / kind).mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in ("regen.jsonl", "features.pt", f"{kind}/ckpt.pt", "state.json"):
            (out / name).unlink(missing_ok=True)
    say = log or _Log(out / "train.log", echo)
    pool, folder, st_path, st = _open_folder(out, pool_path, target, threads)
    secs = st["seconds"]
    length = (f"{train_config.epochs} epoch(s)" if train_config and train_config.epochs and steps is None
              else f"budget {minutes} min, steps {steps}")
    say(f"pipeline: {kind} for {target} ({folder}), pool {pool}, {length}, seed {seed}")

    decoding, prompts = f"greedy ({regen_method})", None
    if data is not None:             # 1-2. responses and features from a train-data folder (of `pool`'s prompts)
        from reference_eagle4.training.store import FeatureStore

        store = FeatureStore(Path(data) / "features")
        samples, prompts = store.samples(), len(store.prompts)
        decoding = "greedy + sampled (specbench train-data)"
        say(f"pipeline: {len(samples)} records, {samples.response_tokens()} response tokens from {data}")
    else:
        # 1. regenerate responses with the target
        if regen_minutes is None:
            regen_minutes = (minutes or 90.0) / 3
        left = regen_minutes - secs.get("regen", 0.0) / 60
        if left > 0.05:
            _regenerate(out, pool, folder, chat, st, st_path, say, minutes=left, max_new_tokens=max_new_tokens,
                        concurrency=concurrency, seed=seed, limit=regen_limit, method=regen_method, device=device)

        # 2. teacher-forced features
        t0 = time.time()
        samples = build_features(out / "regen.jsonl", folder, out / "features.pt", device=device, log=say)
        if time.time() - t0 > 5:
            secs["features"] = secs.get("features", 0.0) + time.time() - t0
            _save_state(st_path, st)

    # 3. training (TTT for eagle4, block objective for dflash / dspark)
    cfg = train_config or TrainConfig()
    cfg.seed = seed
    cfg.device = device
    if steps is not None:
        cfg.steps = steps
    if minutes is not None and steps is None and not cfg.epochs:
        spent = sum(v for k, v in secs.items() if not k.startswith("train")) / 60
        cfg.minutes = max(1.0, minutes - spent - 3.0)
    tgt = load_transformer(folder, torch.float32)
    drafter, state = train(samples, tgt, out / kind, cfg, resume=resume, log=say, progress=progress, kind=kind)
    secs[f"train-{kind}"] = state["elapsed"]
    _save_state(st_path, st)

    # 4. export (fp16, no embedding / lm_head) + model card
    n_tok = sum(len(s["tokens"]) - s["prompt_len"] for s in samples)
    stage_secs = {k: round(v) for k, v in secs.items() if not k.startswith("train") or k == f"train-{kind}"}
    info = {
        "kind": kind, "target": target, "target_weights_sha256": weights_sha256(folder), "pool": pool.name,
        "samples": len(samples), "prompts": prompts, "data": None if data is None else str(data),
        "response_tokens": n_tok, "steps": state["step"], "epochs": state["epoch"],
        "seconds": stage_secs, "wall_minutes": round(sum(stage_secs.values()) / 60, 1),
        "eval": state.get("eval", {}), "eval_start": state.get("eval_start", {}), "train_config": asdict(cfg),
        "eval_sampled": state.get("eval_sampled", {}), "eval_seen": state.get("eval_seen", {}),
        "tokens_read": state["tokens"],
        "curve": state["curve"],
        "regen": {
            "max_new_tokens": max_new_tokens, "concurrency": concurrency, "decoding": decoding,
            "dtype": f"{auto_dtype()} (packed)"},
        "last_log": state["history"][-1] if state["history"] else {},
        "machine": _machine(cfg.device),
    }
    if cfg.init_from:                    # the exact drafter this one continued (its folder may be overwritten)
        info["init_from_sha256"] = sha256_file(Path(cfg.init_from) / "model.safetensors")
    dest = export(drafter, out / kind / "drafter", info)
    st[f"info-{kind}"] = info
    _save_state(st_path, st)
    say(f"pipeline: exported {dest} ({json.dumps(info['eval'])})")
    return dest


def _machine(device: str) -> str:
    """Where a drafter trained, for its card: "2 threads of <CPU model>" or the GPU's name."""
    from reference_eagle4.device import device_name, resolve_device

    dev = resolve_device(device)
    n = torch.get_num_threads()
    return device_name(dev) if dev.type == "cuda" else f"{n} thread{'s' * (n > 1)} of {device_name(dev)}"


def export(drafter, folder: str | Path, info: dict[str, Any]) -> Path:
    from reference_eagle4.weights import sha256_file

    folder = Path(folder)
    drafter.save(folder, torch.float16, extra={"training": info})
    sha = sha256_file(folder / "model.safetensors")
    (folder / "README.md").write_text(model_card(drafter, info, sha))
    return folder


def objective(tc: dict[str, Any]) -> str:
    """The loss a training config names, for the model card (`teacher` in train.py)."""
    temp, noise = tc.get("teacher_temp", 1.0), tc.get("feature_noise", 0.0)
    if temp == 0:
        loss = "cross-entropy vs the target's argmax (hard labels)"
    else:
        loss = "soft CE vs the target's top-32 distribution" + ("" if temp == 1 else f" at temperature {temp:g}")
    return loss + (f", features with Gaussian noise of {noise:g} x their RMS" if noise else "")


def _summary(drafter, info: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(title, architecture paragraph, kind-specific table rows) for the model card."""
    c, tc = drafter.cfg, info["train_config"]
    ev = info.get("eval", {})
    epochs = (f"{info['tokens_read']:,} response tokens read" if info.get("tokens_read")
              else f"{info['epochs']} full epoch" + ("" if info["epochs"] == 1 else "s"))
    if info.get("kind", "eagle4") == "eagle4":
        def accs(metrics: dict[str, float]) -> str:
            return ", ".join(f"step {k[3:]}: {v:.3f}" for k, v in metrics.items() if k.startswith("acc"))

        acc = accs(ev)
        about = (f"An EAGLE-3 style one-layer drafter (MLP width {c.intermediate_size}; fc over the hidden states "
                 "entering target layers "
                 f"{list(c.capture_layers)}, input [norm(embed(x_t+1)), norm(h_t)]) with sliding-window attention "
                 f"(W = {c.window}) and a low-rank candidate head (rank {c.rank}, K = {c.topk_candidates} exact rows).")
        start = (f"continued from `{tc['init_from']}` (model.safetensors sha256 `{info['init_from_sha256'][:16]}…`); "
                 if tc.get("init_from") else "")
        rows = [f"| training | {start}TTT {tc['ttt_steps']} unrolled steps, {objective(tc)}, weights "
                f"{tc['decay']}^j; AdamW lr {tc['lr']}; {info['steps']} steps ({epochs}), seed {tc['seed']} |",
                f"| held-out top-1 agreement with the target | {acc or 'n/a'} |",
                f"| low-rank recall@K (held out) | target argmax {ev.get('lr_recall', float('nan')):.3f}, "
                f"drafter argmax {ev.get('lr_recall_draft', float('nan')):.3f} |"]
        if info.get("eval_start"):
            rows.insert(2, f"| the same, for the drafter it continued from | {accs(info['eval_start'])} |")
        if info.get("eval_sampled"):
            rows.insert(2, f"| the same on sampled held-out responses | {accs(info['eval_sampled'])} |")
        if info.get("eval_seen"):
            rows.insert(2, f"| the same on {info['eval_seen']['rows']} greedy training responses this run read | "
                           f"{accs(info['eval_seen'])} |")
        if info.get("curve"):
            points = "; ".join(f"{p['tokens']:,} tokens read: held out {p['held_out'].get('acc0', float('nan')):.3f}, "
                               f"seen {p['seen'].get('acc0', float('nan')):.3f}" for p in info["curve"])
            rows.append("| learning curve (greedy step-0 agreement; seen = greedy training responses already read) "
                        f"| {points} |")
        return f"EAGLE-4 drafter for {info['target']}", about, rows
    dspark = c.markov_rank > 0
    about = (f"A {'DSpark' if dspark else 'DFlash'} block drafter: {c.num_layers} Llama-shaped layers whose keys and "
             f"values come from [context; block] (the context is fc over the target hidden states entering layers "
             f"{list(c.capture_layers)}), queries from the block [root, MASK x {c.block_size - 1}], non-causal inside "
             "the block; one forward drafts the block.")
    if dspark:
        about += (f" A rank-{c.markov_rank} Markov head adds a logit bias from the previous drafted token, and a "
                  "confidence head predicts each draft's acceptance; the dspark method verifies the prefix whose "
                  "predicted acceptance pays for its measured cost.")
    start = f"initialised from `{tc['init_from']}` (the tensors the two share); " if tc.get("init_from") else ""

    def block(metrics: dict[str, float]) -> str:
        return (f"row-1 top-1 agreement {metrics.get('acc1', float('nan')):.3f}, accepted drafts per block "
                f"{metrics.get('al', float('nan')):.2f}")

    rows = [f"| training | {start}{tc['anchors']} anchored blocks per sample, {objective(tc)}, "
            f"row weights exp(-(k-1)/{tc['gamma']}); AdamW lr {tc['lr']}; {info['steps']} steps "
            f"({epochs}), seed {tc['seed']} |",
            f"| held-out row-1 top-1 agreement | {ev.get('acc1', float('nan')):.3f} |",
            f"| held-out accepted drafts per block (greedy, teacher-forced) | {ev.get('al', float('nan')):.2f} |"]
    if info.get("eval_start"):
        rows.insert(3, f"| the same, for the drafter it started from | {block(info['eval_start'])} |")
    if info.get("eval_seen"):
        rows.insert(3, f"| the same on {info['eval_seen']['rows']} greedy training responses this run read | "
                       f"{block(info['eval_seen'])} |")
    if dspark:
        rows.append(f"| held-out confidence BCE | {ev.get('conf_bce', float('nan')):.3f} |")
    return f"{'DSpark' if dspark else 'DFlash'} drafter for {info['target']}", about, rows


def _data_source(info: dict[str, Any]) -> str:
    """"993 prompts from `pool.jsonl`", or for a train-data store "4683 responses to 1614 prompts of ... (`DIR`)"."""
    pool = Path(info["pool"]).name
    if info.get("prompts"):
        return f"{info['samples']} responses to {info['prompts']} prompts of `{pool}` (`{info['data']}`)"
    return f"{info['samples']} prompts from `{pool}`"


def model_card(drafter, info: dict[str, Any], sha: str) -> str:
    c = drafter.cfg
    title, about, rows = _summary(drafter, info)
    kind = info.get("kind", "eagle4")
    lines = [
        f"# {title}", "", about + " The target's embedding and lm_head are shared at run time and are not in "
        "this checkpoint.", "", "| | |", "|---|---|",
        f"| target | {info['target']} (weights sha256 `{info['target_weights_sha256'][:16]}…`) |",
        f"| parameters | {sum(p.numel() for p in drafter.parameters()) / 1e6:.2f} M (fp16) |",
        f"| draft vocabulary | {c.draft_vocab_size or c.vocab_size} tokens"
        + (" (d2t: the ids with the most teacher mass)" if c.draft_vocab_size else "") + " |",
        f"| model.safetensors sha256 | `{sha}` |",
        f"| training data | {_data_source(info)} (disjoint from the "
        f"benchmark sets), responses regenerated by the target, {info['regen']['decoding']} (≤ "
        f"{info['regen']['max_new_tokens']} new "
        f"tokens), {info['response_tokens']} response tokens |",
        *rows,
        f"| wall time | {info['wall_minutes']} min on {info.get('machine', 'a 2-core CPU')} ({info['seconds']}) |",
    ]
    for k, v in info.get("measured", {}).items():
        lines.append(f"| {k} | {v} |")
    methods = {"eagle4": "`eagle4-chain`, `eagle4-tree` and `eagle4-harness` methods use",
               "dflash": "`dflash` method uses", "dspark": "`dspark` method uses"}[kind]
    loader = "load_drafter" if kind == "eagle4" else "load_dflash"
    lines += ["", f"Load it with `reference_eagle4.drafters.{loader}(folder)`; the {methods} it by default for "
              "this target.", ""]
    return "\n".join(lines)
