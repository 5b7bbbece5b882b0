"""Run orchestration: one method (`run`) or several interleaved on the same requests (`compare`).

Each (method, budget, concurrency) writes its own run directory (manifest.json + records.jsonl), so
analysis treats a comparison as a set of ordinary runs. Every run directory is claimed (locked and checked,
`specbench.rundir`) before the engine loads, so a second run on the same directory, or a directory that cannot
be written, is refused at once. Records are appended as requests finish, so Ctrl-C loses only requests still
in flight, and `resume` continues where the records stop.

`compare --repeats N` runs each variant N times, each repeat in a run directory of its own (`NAME-rK`; the
manifest's `repeat` and `repeats`), interleaved: the first repeat of every variant, then the second, ... A resumed
comparison resumes each repeat as an ordinary run, and analysis groups repeats by their manifests
(`specbench.analysis.repeats`).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from specbench.analysis.metrics import method_label
from specbench.dataset import dataset_version
from specbench.errors import SpecbenchError
from specbench.machine_load import LoadMeter, warning
from specbench.records import RecordWriter, read_manifest, write_manifest
from specbench.rundir import RunDir, claimed
from specbench.runners import runner_class
from specbench.runners.base import Prepared, Runner
from specbench.settings import Job, MethodSpec, Settings

__all__ = ["RecordWriter", "execute", "run_compare", "run_one"]   # RecordWriter: tests cut runs short through it

def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("specbench", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def new_run_id(settings: Settings) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{settings.method}-L{settings.budget}-C{settings.concurrency}"


def manifest(run_id: str, job: Job, settings: Settings, runner: Runner, method_config: dict[str, Any],
             n_requests: int, compare_id: str | None, repeat: tuple[int, int] | None = None) -> dict[str, Any]:
    """The run's manifest as it starts; `repeat` (k, N) marks the k-th of N repeats of one variant."""
    return {
        "run_id": run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["specbench", *sys.argv[1:]]),
        "compare_id": compare_id,
        "dataset": job.dataset,
        "dataset_version": dataset_version(job.dataset),
        "categories": job.categories,
        "limit": job.limit,
        "n_requests": n_requests,
        **asdict(settings),
        **runner.describe(),
        "method_config": method_config,
        "versions": versions(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count() or 1},
        **({"repeat": repeat[0], "repeats": repeat[1]} if repeat else {}),
    }


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[tok_s]:>6.1f} tok/s"), TimeElapsedColumn(), TimeRemainingColumn())


@dataclass
class Variant:
    """One (method, budget, concurrency) of a run or comparison: its engine-side form and run directory."""

    settings: Settings
    dir: RunDir
    prepared: Prepared
    tokens: int = 0
    busy_s: float = 0.0
    load: LoadMeter | None = None            # CPU other processes took while it ran (in-process engines only)


def execute(runner: Runner, job: Job, variants_settings: list[Settings], run_dirs: list[RunDir],
            compare_id: str | None, chunk: int | None, repeats: list[tuple[int, int]] | None = None) -> list[Path]:
    """Run every variant on the same rows, interleaving them chunk by chunk (rotating their order); chunk None
    (or a server engine): each variant takes every row in one block, in the order given, so C requests stay in
    flight until the queue runs dry. `repeats`: each variant's (k, N) when it is a repeat. The run directories are
    claimed already (`specbench.rundir.claimed`)."""
    seed = variants_settings[0].seed
    rows = job.rows(seed)
    if not rows:
        raise SpecbenchError(f"{job.dataset}: no rows selected")
    requests = runner.requests(rows)
    by_id = {r.id: r for r in requests}
    ids = [r.id for r in requests]
    variants: list[Variant] = []
    try:
        for i, (settings, run_dir) in enumerate(zip(variants_settings, run_dirs)):
            prepared = runner.prepare(settings, requests, run_dir.path)
            meta = manifest(run_dir.path.name, job, settings, runner, prepared.method_config, len(ids), compare_id,
                            repeats[i] if repeats else None)
            run_dir.open(meta, ids, runner.operational_options)
            load = LoadMeter.resumed(run_dir.meta.get("machine_load")) if runner.in_process else None
            variants.append(Variant(settings, run_dir, prepared, load=load))
    except BaseException:
        for v in variants:
            v.dir.close_records()
        raise
    if chunk is None or not runner.in_process:
        chunk = len(ids)
    total = sum(len(v.dir.todo) for v in variants)
    try:
        with progress_bar() as bar:
            task = bar.add_task(_label(variants), total=total, tok_s=0.0)
            for k, start in enumerate(range(0, len(ids), chunk)):
                block = ids[start: start + chunk]
                rotated = variants[k % len(variants):] + variants[: k % len(variants)]
                for v in rotated:
                    todo = [by_id[i] for i in block if i in v.dir.todo]
                    if todo:
                        _run_block(runner, v, todo, bar, task)
    except KeyboardInterrupt:
        kept = sum(len(ids) - len(v.dir.todo) for v in variants)
        hint = "rerun the same command with --resume" + ("" if compare_id else " --out " + str(run_dirs[0].path))
        print(f"\ninterrupted: {kept} finished records are kept; {hint}", file=sys.stderr)
        raise
    finally:
        for v in variants:
            v.dir.close_records()
            runner.close(v.prepared, v.dir.path)
            _save_load(v)
    return [v.dir.path for v in variants]


def _save_load(v: Variant) -> None:
    """Record in the manifest how much CPU others took while the variant ran, and warn when it skews speed."""
    shares = v.load.shares() if v.load is not None else None
    if shares is None:
        return
    write_manifest(v.dir.path, {**read_manifest(v.dir.path), "machine_load": shares})
    line = warning(_variant_label(v.settings), shares)
    if line:
        print(line, file=sys.stderr)


def _variant_label(s: Settings) -> str:
    return f"{s.method} L={s.budget} C={s.concurrency}"


def _label(variants: list[Variant]) -> str:
    return _variant_label(variants[0].settings) if len(variants) == 1 else f"{len(variants)} variants"


def _run_block(runner: Runner, v: Variant, todo: list, bar: Progress, task: Any) -> None:
    t0 = time.time()

    def on_record(rec: dict[str, Any]) -> None:
        v.dir.write(rec)
        v.tokens += len(rec["output_token_ids"])
        rate = v.tokens / max(v.busy_s + time.time() - t0, 1e-9)
        bar.update(task, advance=1, tok_s=rate, description=_variant_label(v.settings))

    if v.load is not None:
        v.load.start()
    try:
        runner.run(v.prepared, todo, on_record)
    finally:
        if v.load is not None:
            v.load.stop()
    v.busy_s += time.time() - t0


def check_arrivals(cls: type[Runner], settings: Settings) -> None:
    """Refuse --request-rate where the engine admits requests itself (the reference engine's scheduler keeps C
    sequences in flight); server engines send each request at its arrival time."""
    if settings.request_rate is not None and cls.in_process:
        raise SpecbenchError(f"--request-rate is for server engines (--engine vllm or sglang): the {cls.engine} "
                             "engine keeps --concurrency sequences in flight from the start")


def run_one(job: Job, settings: Settings, out: Path | None, resume: bool) -> Path:
    if resume and out is None:
        raise SpecbenchError("--resume needs --out RUN_DIR (the run to continue)")
    path = out or Path("runs") / new_run_id(settings)
    cls = runner_class(job.engine)
    cls.check_options([(settings.method, {})], settings.options)
    check_arrivals(cls, settings)
    with claimed([path], resume) as dirs:
        return execute(cls.from_job(job), job, [settings], dirs, None, chunk=None)[0]


def _dir_label(settings: Settings) -> str:
    """The method label as a folder name (an option's value may hold a path)."""
    return re.sub(r"[^\w.=+-]", "_", method_label(asdict(settings)))


def run_compare(job: Job, base: Settings, methods: list[MethodSpec], budgets: list[int],
                concurrencies: list[int], out: Path | None, resume: bool, chunk: int | None,
                repeats: int = 1) -> list[Path]:
    """All methods x budgets (vanilla once) at each concurrency, interleaved on the same requests, each `repeats`
    times (repeat k of every variant before repeat k + 1).

    methods: (name, the options of this entry alone); one name may appear with several option sets, and an
    entry's `budget` option runs it at that budget instead of `budgets`."""
    if ("vanilla", {}) not in methods:
        methods = [("vanilla", {}), *methods]
    root = out or Path("runs") / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if resume and not root.exists():
        raise SpecbenchError(f"--resume: {root} does not exist")
    compare_id = root.name
    cls = runner_class(job.engine)
    plan = [(m, {k: v for k, v in own.items() if k != "budget"},
             [1] if m == "vanilla" else [own["budget"]] if "budget" in own else budgets) for m, own in methods]
    cls.check_options([(m, own) for m, own, _ in plan], base.options)
    check_arrivals(cls, base)
    if chunk and not cls.in_process:
        raise SpecbenchError(f"--chunk is for the reference engine: {job.engine} keeps C requests in flight "
                             "throughout, one server at a time")
    by_c = {c: [replace(base, method=m, budget=L, concurrency=c, options={**base.options, **own}, variant=own)
                for m, own, Ls in plan for L in Ls] for c in concurrencies}
    ks, n = range(1, repeats + 1), len(by_c[concurrencies[0]])
    if cls.in_process:
        # one execute per concurrency, chunked as that concurrency wants
        groups = [[(c, k, i) for k in ks for i in range(n)] for c in concurrencies]
    else:
        # one server launch per variant and repeat: it serves every concurrency in turn, its cache flushed and
        # warmed up before each (ServerRunner keeps a server whose launch command is unchanged)
        groups = [[(c, k, i) for k in ks for i in range(n) for c in concurrencies]]
    paths = [root / f"{_dir_label(by_c[c][i])}-L{by_c[c][i].budget}-C{c}{f'-r{k}' if repeats > 1 else ''}"
             for group in groups for c, k, i in group]
    # A resumed comparison may not have reached some variants yet: those start fresh.
    with claimed(paths, resume, missing_ok=True) as all_dirs:
        runner = cls.from_job(job)
        done: list[Path] = []
        for group in groups:
            dirs = all_dirs[len(done): len(done) + len(group)]
            marks = [(k, repeats) for _, k, _ in group] if repeats > 1 else None
            c = group[0][0]
            done += execute(runner, job, [by_c[c][i] for c, _, i in group], dirs, compare_id,
                            chunk or (1 if c == 1 else 4 * c), marks)
    return done
