"""The reference engine's own commands: methods, calibrate, ablate, peers, export-eagle3, export-dflash, train,
datastore, serve.

`specbench.cli` registers them through `specbench.runners.COMMANDS`. Each imports the engine inside its body,
so `specbench --help` and the other engines' commands never load torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from specbench.errors import SpecbenchError
from specbench.runners.reference import serve_cli, train_cli

console = Console()

TARGET_HELP = "Known target name, a .gguf file, or a HF safetensors folder."
DTYPE_HELP = "auto (bf16 where the CPU has native bf16, else fp32), float32 or bfloat16."
THREADS_HELP = "CPU threads (default: all)."
DEVICE_HELP = "auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda or cuda:N: time where runs will run."


def register(app: typer.Typer) -> None:
    app.command("methods")(methods)
    app.command()(calibrate)
    app.command()(ablate)
    app.command()(peers)
    app.command("export-eagle3")(export_eagle3)
    app.command("export-dflash")(export_dflash)
    train_cli.register(app)
    serve_cli.register(app)


def methods() -> None:
    """List the methods, one line each, and the engines that run each one."""
    from reference_eagle4.proposers import PROPOSERS
    from specbench.runners import ENGINES, runner_class

    engines = {name: set(runner_class(name).methods()) for name in ENGINES}
    served = sorted(set().union(*engines.values()) - set(PROPOSERS))
    # a server runner may describe its own methods (SUMMARIES); any other served method loads a checkpoint, and
    # what a server runs of a reference method is said after the reference engine's summary
    texts = {e: getattr(runner_class(e), "SUMMARIES", {}) for e in ENGINES}
    own = {name: text for by_name in texts.values() for name, text in by_name.items()}
    summaries = {**{name: cls.summary + "".join(f"; on {e}: {by_name[name]}" for e, by_name in texts.items()
                                                if name in by_name) for name, cls in PROPOSERS.items()},
                 **{name: own.get(name, "a checkpoint the server loads (EAGLE-3 layout, or any draft model)")
                    for name in served}}
    table = Table(box=None, show_edge=False)
    for col in ("method", "engines", "what it does"):
        table.add_column(col, overflow="fold")
    for name in [*sorted(PROPOSERS), *served]:
        table.add_row(name, ", ".join(e for e, ms in engines.items() if name in ms), summaries[name])
    console.print(table, markup=False, highlight=False)


def _ints(flag: str, text: str) -> tuple[int, ...]:
    from specbench.run_cli import parse_ints

    return tuple(parse_ints(flag, text))


def calibrate(
    target: str = typer.Option("smollm2-135m", help=TARGET_HELP + " Server engines: also a Hub id."),
    dtype: str = typer.Option("auto", help="auto, float32 or bfloat16: time what runs will use."),
    engine: str = typer.Option("reference", help="reference (this process's engine), or vllm or sglang: launch (or "
                               "attach to) a server at each K and time its steps (runners/server_calibrate.py)."),
    threads: Optional[int] = typer.Option(None, min=1, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    # the grid of reference_eagle4.calibration's DEFAULT_* (kept literal here: --help imports no torch)
    batches: str = typer.Option("1,2,3,4,5,6,7,8,16", help="Batch sizes (sequences per step). Every size up "
                                "to 8 is timed: a step's cost jumps where its rows cross a block of the "
                                "linears, which interpolating between 4 and 8 smooths over."),
    contexts: str = typer.Option("256,1024,2048", help="Context lengths (cached tokens per sequence)."),
    tokens: str = typer.Option("1,2,3,4,6,8,16,32,64", help="Tokens verified per sequence per step."),
    widths: str = typer.Option("1,4,8,16", help="Draft-level widths (nodes per sequence) to time the drafter at."),
    drafter: Optional[str] = typer.Option(None, help="EAGLE-4 drafter folder to time (default: the shipped "
                                          "one, when it fits the target; 'none' skips drafter timing)."),
    repeats: int = typer.Option(3, min=1, help="Timed rounds per point: each round times every token count (or "
                                "width) of a row once, so drift touches them alike; the median is kept. Token "
                                "counts up to 16 and draft levels get 3x the rounds."),
    out: Optional[Path] = typer.Option(None, help="Table file (default: the cache, where runs look it up)."),
    if_missing: bool = typer.Option(False, help="Do nothing when a table for this device already exists."),
    ks: str = typer.Option("1,3,7,15", help="Server engines: drafts per step K to time, one server launch each."),
    max_batch: int = typer.Option(8, min=1, help="Server engines: batch sizes 1..N to time."),
    prompts: int = typer.Option(8, min=1, help="Server engines: calibration prompts (a seeded sample of the "
                                "training pool, disjoint from the benchmark sets) for the acceptance by depth."),
    max_new_tokens: int = typer.Option(64, min=8, help="Server engines: tokens each calibration request decodes."),
    tp: int = typer.Option(1, min=1, help="Server engines: tensor parallel size."),
    endpoint: Optional[str] = typer.Option(None, help="Server engines: a running server (only its K is timed)."),
    option: list[str] = typer.Option([], "--option", help="Server engines: server options as in `run` "
                                     "(server_python=PATH, max_model_len=N, server_args=..., device=...)."),
    budget: int = typer.Option(16, min=2, help="Server engines: the budget L whose compiled schedule (vllm) or tree "
                               "shapes (sglang) are printed."),
) -> None:
    """Time the target's verification step over (batch, context, tokens) on this device: the cost table the
    harness plans its trees with. With --engine vllm or sglang, time a server's steps and acceptance instead: the
    table `--engine vllm --method eagle4-harness` compiles its batch size -> K schedule from, and `--engine sglang
    --method eagle4-harness` its tree shape at the run's concurrency (SGLang servers at K drafts: topk 1,
    num_steps K, num_draft_tokens K + 1; acceptance by depth from each request's meta_info histogram).

    The harness reads the table matching this device, dtype and thread count; without one it calibrates a
    small grid in-process and says so. Takes a few minutes on a 2-core CPU.
    """
    if engine != "reference":
        reference_only = [flag for flag, given in (("--threads", threads is not None), ("--out", out is not None),
                                                   ("--device", device != "auto")) if given]
        if reference_only:
            raise SpecbenchError(f"{reference_only[0]} is for --engine reference; a server's table lives where its "
                                 "runs look it up")
        _calibrate_server(engine, target, dtype, drafter, tp, endpoint, _ints("--ks", ks), max_batch, prompts,
                          max_new_tokens, repeats, option, if_missing, budget)
        return
    server_only = [flag for flag, given in (("--endpoint", endpoint), ("--option", option), ("--tp", tp != 1))
                   if given]
    if server_only:
        raise SpecbenchError(f"{server_only[0]} is for server engines (--engine vllm or sglang)")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from reference_eagle4.calibration import calibrate as measure, device_key, find_table, grid_points, slug, table_dir
    from specbench.runners.reference.runner import ReferenceRunner

    b, c, t = _ints("--batches", batches), _ints("--contexts", contexts), _ints("--tokens", tokens)
    w = _ints("--widths", widths)
    runner = ReferenceRunner(target, dtype, threads, device=device)
    if if_missing and (out.exists() if out else find_table(device_key(runner.model)) is not None):
        console.print(f"table: {out or table_dir() / (slug(device_key(runner.model)) + '.json')} (exists; kept)")
        return
    step = _drafter_step(runner, drafter)
    total = grid_points(b, c, t, w, step is not None)
    with Progress(TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("", total=total)
        table = measure(runner.model, b, c, t, drafter_step=step, widths=w, repeats=repeats,
                        on_point=lambda: bar.advance(task))
    path = table.save(out or table_dir() / f"{slug(table.key)}.json")
    one = table.verify(1, table.contexts[0], 1)
    shape = ", ".join(f"{n}: {table.verify(1, table.contexts[0], n) / one:.2f}x" for n in table.tokens)
    console.print(f"verification cost vs 1 token (batch 1, context {table.contexts[0]}): {shape}")
    if table.draft_ms:
        console.print(f"one draft level (batch 1, width {w[0]}): {table.draft(1, w[0]):.1f} ms")
    console.print(f"table: {path}")


def _calibrate_server(engine: str, target: str, dtype: str, drafter: str | None, tp: int, endpoint: str | None,
                      ks: tuple[int, ...], max_batch: int, prompts: int, max_new_tokens: int, repeats: int,
                      option: list[str], if_missing: bool, budget: int) -> None:
    """`calibrate --engine vllm|sglang`: the server's table (measured, or kept with --if-missing), its step costs
    and what the harness compiles from it at C = 1 and C = max_batch (vLLM's K schedule, SGLang's tree shape)."""
    from specbench.run_cli import parse_options
    from specbench.runners import runner_class
    from specbench.runners.harness_policy import chain_policy, sglang_policy
    from specbench.runners.server_calibrate import Grid, calibrate_server

    if engine not in ("vllm", "sglang"):
        raise SpecbenchError(f"--engine {engine}: calibrate times the reference engine or a vllm or sglang server")
    if not drafter or drafter == "none":
        raise SpecbenchError("--drafter: the server's EAGLE-3 checkpoint (e.g. `specbench export-eagle3 "
                             "reference_eagle4/drafters/smollm2-135m-eagle4 --out runs/eagle3-export`)")
    runner = runner_class(engine)(target, dtype, endpoint)
    options = {**parse_options(option), "tp": tp}
    grid = Grid(tuple(sorted(set(ks))), max_batch, prompts, max_new_tokens, repeats)
    table, path, measured = calibrate_server(runner, drafter, options, grid, if_missing, console.print)
    console.print(f"table: {path}" + ("" if measured else " (exists; kept)"))
    ks_timed = [t - 1 for t in table.tokens]
    console.print("step ms by batch size (rows) and K (columns " + ", ".join(map(str, ks_timed)) + "):")
    for b, row in zip(table.batches, table.verify_ms):
        console.print(f"  {b:>3}: " + "  ".join(f"{ms:7.1f}" for ms in row[0]))
    policy = chain_policy(table, budget)
    console.print("acceptance by depth: " + " ".join(f"{r:.2f}" for r in policy.reach))
    for c in sorted({1, max(table.batches)}):
        if engine == "sglang":
            shape = sglang_policy(table, budget, c)[0]
            console.print(f"compiled at L={budget}, C={c}: num_steps {shape.num_steps}, topk {shape.topk}, "
                          f"num_draft_tokens {shape.num_draft_tokens} ({shape.speed:.3f} expected tokens/ms)")
        else:
            console.print(f"compiled at L={budget}, C={c}: K={policy.k_at(c)} "
                          f"({policy.speeds[c - 1]:.3f} expected tokens/ms)")
    if engine == "vllm":
        console.print(f"num_speculative_tokens_per_batch_size: {policy.schedule}")


def _drafter_step(runner: Any, drafter: str | None) -> Callable[[int, int], Callable[[], Any]] | None:
    """A (batch, width) -> callable timing one EAGLE-4 draft level, or None when there is no drafter."""
    from reference_eagle4.proposers.eagle4 import Eagle4Proposer, drafter_level_fn

    if drafter == "none":
        return None
    try:
        proposer = Eagle4Proposer(budget=16, drafter=drafter, target=runner.model)
    except (FileNotFoundError, ValueError) as err:      # ValueError: a drafter for another target
        if drafter is not None:
            raise SpecbenchError(f"--drafter {drafter}: {err}") from None
        console.print(f"the shipped drafter does not fit this target ({err}): timing the target only")
        return None
    return lambda batch, width: drafter_level_fn(proposer, batch, width)


def ablate(
    target: str = typer.Option("smollm2-135m", help=TARGET_HELP),
    drafter: Optional[str] = typer.Option(None, help="EAGLE-4 drafter folder (default: the shipped one)."),
    method: str = typer.Option("eagle4-tree", help="eagle4-tree or eagle4-chain: whose drafting is timed."),
    budget: int = typer.Option(16, min=2, help="Budget L (the tree drafts min(8, L-1) levels; a chain L-1)."),
    batch: int = typer.Option(1, min=1, help="Sequences drafted together."),
    dataset: str = typer.Option("prompt-enhancement", help="Where the context's prompt comes from."),
    continue_tokens: int = typer.Option(64, min=1, help="Greedy tokens generated after the prompt so that "
                                        "the context ends inside an answer, as in a run."),
    reps: int = typer.Option(30, min=1, help="Timed repeats per variant (the median is kept)."),
    dtype: str = typer.Option("auto", help="auto, float32 or bfloat16."),
    threads: Optional[int] = typer.Option(None, min=1, help=THREADS_HELP),
    out: Optional[Path] = typer.Option(None, help="Also write the timings as JSON here."),
) -> None:
    """Time one EAGLE-4 drafting step (catch-up + every draft level) with the shipped low-rank head and
    sliding window against the full head and full attention, interleaved on the same real context.

    Acceptance under each ablation comes from a comparison, e.g.
    specbench compare --methods eagle4-tree --budget 16 --option head=full
    """
    from reference_eagle4.drafter_cost import ABLATIONS, propose_ms
    from specbench.dataset import load_rows
    from specbench.runners.reference.runner import ReferenceRunner
    from specbench.settings import Settings

    if method not in ("eagle4-tree", "eagle4-chain"):
        raise SpecbenchError(f"--method must be eagle4-tree or eagle4-chain, got {method!r}")
    runner = ReferenceRunner(target, dtype, threads)
    request = runner.requests(load_rows(dataset, limit=1, seed=0))[0]
    settings = Settings(method="vanilla", budget=1, max_new_tokens=continue_tokens)
    engine = runner.make_engine(settings, runner.max_len([request], settings))
    done = []
    engine.generate([request], done.append)
    context = request.prompt_ids + done[0].output
    try:
        ms = propose_ms(runner.model, context, drafter=drafter, method=method, budget=budget, batch=batch,
                        reps=reps)
    except FileNotFoundError as err:
        raise SpecbenchError(f"--drafter: {err}") from None
    base = next(iter(ms.values()))
    table = Table(title=f"{method}, L = {budget}, batch {batch}, context {len(context)} tokens, "
                  f"{runner.dtype_name}: one drafting step")
    for col in ("variant", "options", "ms per step", "vs shipped"):
        table.add_column(col, justify="right" if col in ("ms per step", "vs shipped") else "left")
    for name, t in ms.items():
        opts = " ".join(f"{k}={v}" for k, v in ABLATIONS[name].items()) or "-"
        table.add_row(name, opts, f"{t:.2f}", f"{t / base:.2f}x")
    console.print(table)
    if out is not None:
        out.write_text(json.dumps({"method": method, "budget": budget, "batch": batch, "context": len(context),
                                   "dtype": runner.dtype_name, "ms_per_step": ms}, indent=1) + "\n")
        console.print(f"written: {out}")


def peers(
    dataset: str = typer.Option("prompt-enhancement", help="Bundled name, a .jsonl/.parquet file, or hf:<repo_id>."),
    limit: int = typer.Option(8, min=1, help="Prompts (alternating engines on each)."),
    max_new_tokens: int = typer.Option(128, min=1, help="Output tokens per prompt at most."),
    target: str = typer.Option("smollm2-135m", help=TARGET_HELP),
    dtype: str = typer.Option("auto", help="auto, float32 or bfloat16 (both engines use it)."),
    threads: Optional[int] = typer.Option(None, min=1, help=THREADS_HELP),
) -> None:
    """Vanilla decoding on the reference engine vs transformers.generate, same prompts, same process."""
    from specbench.runners.reference.peers import bench_transformers
    from specbench.settings import Job

    ours, theirs, same = bench_transformers(Job(dataset, [], limit, target, dtype, threads), max_new_tokens)
    for r in (ours, theirs):
        console.print(f"{r.engine:>12}: {r.tok_s:6.1f} tok/s  ({r.tokens} tokens in {r.seconds:.1f} s)")
    console.print(f"reference / transformers = {ours.tok_s / theirs.tok_s:.2f}x; "
                  f"identical tokens on {same:.0%} of prompts")


def export_eagle3(
    drafter_dir: Path = typer.Argument(..., help="EAGLE-4 drafter folder (config.json + model.safetensors)."),
    out: Path = typer.Option(..., help="Folder to write the EAGLE-3 checkpoint to."),
    target: str = typer.Option("smollm2-135m", help="The drafter's target (its lm_head becomes the full head)."),
    dtype: str = typer.Option("bfloat16", help="bfloat16, float16 or float32."),
) -> None:
    """Export an EAGLE-4 drafter as an EAGLE-3 checkpoint for vLLM (method eagle3) and SGLang (EAGLE3):
    no sliding window, full head.

    Example: specbench export-eagle3 reference_eagle4/drafters/smollm2-135m-eagle4 --out runs/eagle3-export
    """
    from reference_eagle4.export import DTYPES, export_eagle3 as export

    if dtype not in DTYPES:
        raise SpecbenchError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    folder = _target_folder(target)
    try:
        path = export(drafter_dir, out, folder, dtype)
    except (FileNotFoundError, ValueError, KeyError) as err:
        raise SpecbenchError(f"{drafter_dir}: {err}") from None
    console.print(f"EAGLE-3 checkpoint: {path}  (vLLM: --speculative-config '{{\"method\": \"eagle3\", "
                  f"\"model\": \"{path}\", \"num_speculative_tokens\": N}}'; SGLang: --speculative-algorithm "
                  f"EAGLE3 --speculative-draft-model-path {path})")


def _target_folder(target: str) -> Path:
    """The target's HF folder (a GGUF converted once), or one line saying why not."""
    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        return resolve_target(target)
    except WeightsError as err:
        raise SpecbenchError(str(err)) from None


def export_dflash(
    drafter_dir: Path = typer.Argument(..., help="DFlash or DSpark drafter folder (config.json + model.safetensors)."),
    out: Path = typer.Option(..., help="Folder to write the vLLM checkpoint to."),
    target: str = typer.Option("smollm2-135m", help="The drafter's target (its embedding and lm_head rows)."),
    method: Optional[str] = typer.Option(None, help="vLLM method to export for: dflash or dspark (default: the "
                                         "drafter's kind; dflash of a DSpark drafter exports its backbone)."),
    dtype: str = typer.Option("bfloat16", help="bfloat16 or float32 (float16 cannot hold the q/k scaling)."),
    mask_token_id: Optional[int] = typer.Option(None, help="Target token id whose slot carries the MASK vector "
                                                "(default: a special token no prompt or chat template uses)."),
) -> None:
    """Export a DFlash / DSpark drafter for vLLM 0.33.0 (method dflash: DFlashDraftModel; dspark: Qwen3DSparkModel).

    Exact up to rounding at num_speculative_tokens = block_size - 1 (vLLM's q/k norms held in their linear regime).

    Example: specbench export-dflash reference_eagle4/drafters/smollm2-135m-dflash --out runs/dflash-export
    """
    from reference_eagle4.export_dflash import export_dflash as export

    folder = _target_folder(target)
    try:
        path = export(drafter_dir, out, folder, method=method, dtype=dtype, mask_token_id=mask_token_id)
    except (FileNotFoundError, ValueError, KeyError) as err:
        raise SpecbenchError(str(err)) from None
    cfg = json.loads((path / "config.json").read_text())
    kind, block = cfg["specbench_export"]["method"], cfg["block_size"]
    console.print(f"vLLM {kind} checkpoint: {path}  (--speculative-config '{{\"method\": \"{kind}\", \"model\": "
                  f"\"{path}\", \"num_speculative_tokens\": {block - 1}}}'; specbench: --engine vllm --method "
                  f"{kind} --option drafter={path} --budget {block})", markup=False, highlight=False)
    console.print(f"drafts as the reference engine's {kind} at --budget {block} (its block), up to rounding; a smaller "
                  "budget runs a shorter non-causal block in vLLM, so its drafts differ. Serve in bfloat16 or float32, "
                  "never float16." + (" Verified lengths follow vLLM's adaptive verification, not our cost table."
                                      if kind == "dspark" else ""), markup=False, highlight=False)
