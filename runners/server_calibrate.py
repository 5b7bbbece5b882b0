"""A server's cost table for the harness: `specbench calibrate --engine vllm|sglang`.

vLLM verifies one chain length K per batch size (Dynamic SD: `num_speculative_tokens_per_batch_size`,
vllm/config/speculative.py; vllm/v1/spec_decode/dynamic/utils.py), so the harness's policy there is the K per
batch size that maximises expected tokens per ms (`reference_eagle4.planner.best_chain`, compiled by
`runners.harness_policy`). SGLang takes one EAGLE-2 tree shape at launch, compiled for the run's concurrency
(`harness_policy.sglang_shape`). Both need, measured on the server as it runs (SGLang's EAGLE-3 server at K
drafts is topk 1, num_steps K, num_draft_tokens K + 1, as its own checks want: `runners.sglang_launch`):

- The cost of one engine step at batch size b drafting K. For each K in `ks` (default 1, 3, 7, 15: one server
  launch each), b copies of one calibration prompt go out together with `ignore_eos`, so the b sequences decode
  in lockstep for max_new_tokens and the batch stays b. A request's decode time is its last chunk less its
  first, timed on the client (the first chunk comes from the prefill, each later one from a step); its steps
  are vLLM's `vllm:spec_decode_num_drafts` delta over the block divided by b (one draft per running request per
  step: v1/spec_decode/metrics.py, SpecDecodingStats.observe_draft), or SGLang's `spec_verify_ct` summed over the
  block's requests divided by b (one verify step per running request per step:
  srt/managers/scheduler_components/batch_result_processor.py). Step ms = mean decode time / steps. Each
  (K, b) is timed `repeats` times in rounds over b, the median kept; the median gap between chunks and the
  machine's load average are kept beside each sample.
- The acceptance by depth: the calibration prompts at concurrency max_batch, K drafts, vLLM's
  `vllm:spec_decode_num_accepted_tokens_per_pos{position}` over num_drafts (the chance a step's accepted path
  reaches depth d), pooled over every K that drafts depth d (greedy acceptance of depth d does not depend on K).
  On SGLang the same chance comes from each request's `spec_correct_drafts_histogram` (index j: verify steps
  that accepted exactly j drafts, summing to `spec_verify_ct`; srt/managers/tokenizer_manager.py
  `_calculate_spec_decoding_metrics`, schedule_batch.py `update_spec_correct_drafts_histogram`) summed over the
  block: the steps that accepted >= d drafts over all steps (`drafting_counts`). A chain server measures the
  top draft of each depth only: acceptance by rank (topk > 1) is not measured (`harness_policy.sglang_shape`).

Calibration prompts: a seeded sample of the bundled training pool (`train-pool.jsonl`), which
`tools/make_train_pool.py` keeps disjoint from the benchmark sets. The bundled drafters were distilled on that
pool, so acceptance there may read higher than on the benchmarks.

The table is a `reference_eagle4.cost_table.CostTable`: batches 1..max_batch, one context (the timing prompt's
tokens plus half the output), tokens K + 1 per sequence, `verify_ms` the whole step with its drafting. It is keyed
by engine, version, device (`runners.hardware`), tensor parallel size, target, drafter and dtype, and saved in the
reference engine's table folder as `server-....json`; `raw` holds every sample and counter, so a later
calibration of other K under the same key adds to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import statistics
import subprocess
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable, Protocol

from reference_eagle4.cost_table import CostTable, table_dir
from specbench.dataset import load_rows
from specbench.errors import SpecbenchError
from specbench.runners.hardware import server_hardware
from specbench.runners.server import ServerRequest, ServerRunner, free_port, local_target_folder, python_for
from specbench.settings import Settings

DEFAULT_KS = (1, 3, 7, 15)
DEFAULT_MAX_BATCH = 8
# Bumped whenever what a server calibration measures changes, so an older table is not read as a current one.
SERVER_COSTS_REVISION = 1
POOL = "train-pool.jsonl"
DRAFT_METHOD = "eagle3"              # what the server runs while calibrating: the drafter at a fixed K
# decode to max_new_tokens: vLLM's sampling extension (vllm/entrypoints/openai/chat_completion/protocol.py), a
# field of SGLang's sampling_params (srt/sampling/sampling_params.py)
LOCKSTEP = {"vllm": {"ignore_eos": True}, "sglang": {"sampling_params": {"ignore_eos": True}}}


@dataclass(frozen=True)
class Grid:
    """What one calibration measures."""

    ks: tuple[int, ...] = DEFAULT_KS
    max_batch: int = DEFAULT_MAX_BATCH
    prompts: int = 8
    max_new_tokens: int = 64
    repeats: int = 2
    seed: int = 0


def resolved(spec: str) -> str:
    """A model spec as the key holds it: a local folder's absolute path, else the name as given."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def table_key(engine: str, version: str, device: str, tp: int, target: str, drafter: str, dtype: str,
              server_args: str = "") -> dict[str, Any]:
    """What a server step's cost and acceptance depend on (`server_args`: extra launch flags, e.g.
    --enforce-eager or --max-num-batched-tokens, which change a step's cost too)."""
    return {"engine": engine, "version": version, "device": device, "tp": tp, "target": target,
            "drafter": drafter, "dtype": dtype, "server_args": server_args, "revision": SERVER_COSTS_REVISION}


def table_path(key: dict[str, Any], folder: Path | None = None) -> Path:
    """The table's file: readable names, and a digest of the whole key so that no two keys share a file."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    text = (f"server-{key['engine']}-{key['version']}-tp{key['tp']}-{Path(key['target']).name}-"
            f"{Path(key['drafter']).name}-{key['dtype']}-{digest}")
    return (folder or table_dir()) / ("".join(c if c.isalnum() or c in "-." else "_" for c in text) + ".json")


def find_server_table(key: dict[str, Any], folder: Path | None = None) -> tuple[CostTable, Path] | None:
    """The table saved under this key, rebuilt from its raw samples (so the rules of `build_table` apply to every
    table read), and its file; None when there is none."""
    path = table_path(key, folder)
    if not path.exists():
        return None
    saved = CostTable.load(path)
    return build_table(saved.key, saved.raw, saved.created), path


def engine_version(python: str, engine: str = "vllm") -> str:
    """The engine's version as the interpreter that launches it imports it."""
    try:
        done = subprocess.run([python, "-c", f"import {engine}; print({engine}.__version__)"], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpecbenchError(f"--option server_python={python}: cannot ask it for {engine}'s version ({err})") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SpecbenchError(f"--option server_python={python}: `import {engine}` fails there "
                             f"({(done.stderr.strip().splitlines() or ['no output'])[-1]})")
    return lines[-1].strip()


# where an attached server says its version (`server_facts`): SGLang 0.5.23 has no /version route
VERSION_ROUTES = {"vllm": "GET /version", "sglang": "GET /server_info"}


def server_key(runner: ServerRunner, options: dict[str, Any], drafter: str) -> dict[str, Any]:
    """The key of the server a run or a calibration talks to: the engine version its Python imports (or, attached,
    what GET /version says), where it runs, --option tp, the target and drafter, the dtype, --option server_args."""
    if runner.endpoint:
        version = runner.server_facts(runner.endpoint).get("engine_version")
        if not isinstance(version, str):
            raise SpecbenchError(f"{runner.endpoint} does not say its {runner.engine} version "
                                 f"({VERSION_ROUTES.get(runner.engine, 'GET /version')}), which its cost table is "
                                 "keyed by")
    else:
        version = engine_version(python_for(options), runner.engine)
    device = server_hardware(runner.endpoint, options.get("device"))["device"]
    folder = local_target_folder(runner.target_spec)
    return table_key(runner.engine, version, device, int(options.get("tp", 1)),
                     str(folder.resolve()) if folder else runner.target_spec, resolved(drafter), runner.dtype_name,
                     " ".join(str(options.get("server_args", "")).split()))


def harness_table(runner: ServerRunner, options: dict[str, Any], method: str) -> tuple[CostTable, Path]:
    """The cost table of the server these options describe, for --method `method` (the harness), and its file;
    a server with none is refused in one line naming the `specbench calibrate` command that makes one."""
    drafter = options.get("drafter")
    if not drafter:
        raise SpecbenchError(f"--method {method} on {runner.engine} needs the draft checkpoint: --option drafter=PATH")
    key = server_key(runner, options, str(drafter))
    found = find_server_table(key)
    if found is None:
        same = "".join(f" --option {k}={shlex.quote(str(options[k]))}"
                       for k in ("server_python", "server_args", "device") if options.get(k))
        endpoint = f" --endpoint {runner.endpoint}" if runner.endpoint else ""
        raise SpecbenchError(
            f"--method {method}: no cost table for this server ({runner.engine} {key['version']}, {key['device']}, "
            f"tp {key['tp']}, {key['dtype']}); run `specbench calibrate --engine {runner.engine} --target "
            f"{runner.target_spec} --drafter {drafter} --dtype {key['dtype']} --tp {key['tp']}{endpoint}{same}` first")
    return found


# -- what the measurements give ---------------------------------------------------------------------------------

def drafting_counts(counters: dict[str, Any]) -> tuple[float, list[float]]:
    """(drafting steps, steps whose accepted path reached depth d = 1..) of a block, from vLLM's /metrics deltas
    (num_drafts, num_accepted_tokens_per_pos) or SGLang's summed meta_info (verify_steps, accept_histogram:
    index j the steps that accepted exactly j drafts, so depth d is reached by the sum from index d on)."""
    if "num_drafts" in counters:
        return counters["num_drafts"], list(counters["num_accepted_tokens_per_pos"])
    hist = counters.get("accept_histogram") or []
    return counters.get("verify_steps") or 0, [float(sum(hist[d:])) for d in range(1, len(hist))]


def step_ms(records: list[dict[str, Any]], drafts: float, batch: int) -> float:
    """One engine step of a lockstep block: a request's mean decode time (last chunk - first) over its steps
    (the block's drafting steps / batch: `drafting_counts`), in ms."""
    if drafts <= 0:
        raise SpecbenchError("the server counted no drafting steps (vLLM's spec_decode_num_drafts, SGLang's "
                             "spec_verify_ct): is it speculating?")
    decode = statistics.fmean(r["latency_s"] - r["ttft_s"] for r in records)
    return 1000.0 * decode / (drafts / batch)


def reach_by_depth(raw: dict[str, Any]) -> list[float]:
    """The chance a step's accepted path reaches draft depth d = 1.., pooled over every K that drafts d."""
    runs = [(int(k), entry["acceptance"]) for k, entry in raw["ks"].items()]
    out = []
    for d in range(1, max((k for k, _ in runs), default=0) + 1):
        drafted = [a for k, a in runs if k >= d]
        drafts = sum(a["num_drafts"] for a in drafted)
        out.append(sum(a["accepted_per_pos"][d - 1] for a in drafted) / drafts if drafts else 0.0)
    return out


def build_table(key: dict[str, Any], raw: dict[str, Any], created: str | None = None) -> CostTable:
    """The CostTable of every K in `raw` over the batch sizes all of them timed: each point the median of its
    samples, then the running maximum over batch sizes, since one more sequence never makes a step cheaper (the
    planner takes the same maximum over token counts): a batch timed below a smaller one during a quiet spell of
    the machine would otherwise look free and pull the schedule to it."""
    ks = sorted(raw["ks"], key=int)
    entries = [raw["ks"][k] for k in ks]
    batches = sorted(set.intersection(*(set(map(int, e["step_ms"])) for e in entries)))
    if not batches:
        raise SpecbenchError("the calibrations of this server share no batch size; recalibrate every K")
    context = round(statistics.fmean(e["context"] for e in entries))
    medians = [[statistics.median(e["step_ms"][str(b)]) for b in batches] for e in entries]
    rising = [list(accumulate(row, max)) for row in medians]          # [K][batch]
    verify = [[[row[i] for row in rising]] for i in range(len(batches))]
    return CostTable(key, batches, [context], [int(k) + 1 for k in ks], verify,
                     created=created or datetime.now(timezone.utc).isoformat(timespec="seconds"), raw=raw)


# -- measuring -------------------------------------------------------------------------------------------------

class Probe(Protocol):
    """Runs one block of requests on the server at K drafts: (records, the block's counter deltas)."""

    def block(self, k: int, requests: list[ServerRequest], concurrency: int, max_new_tokens: int,
              lockstep: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]: ...


class RunnerProbe:
    """A Probe on a server runner: one launched server per K (same port, so blocks at one K share it), or the
    attached one. Requests ask for no logprobs (they would slow the steps being timed)."""

    def __init__(self, runner: ServerRunner, options: dict[str, Any], drafter: str, log_dir: Path):
        self.runner, self.log_dir = runner, log_dir
        self.options = {**options, "drafter": drafter, "entropy": "off"}
        if not runner.endpoint:
            self.options.setdefault("port", free_port())

    def block(self, k: int, requests: list[ServerRequest], concurrency: int, max_new_tokens: int,
              lockstep: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        options = {**self.options, "request_extra": LOCKSTEP[self.runner.engine] if lockstep else {},
                   # the first block at each K warms the server up; the others only flush its cache
                   "warmup": 0 if lockstep else 2 * concurrency}
        settings = Settings(method=DRAFT_METHOD, budget=k + 1, concurrency=concurrency,
                            max_new_tokens=max_new_tokens, options=options)
        session = self.runner.prepare(settings, requests, self.log_dir / f"k{k}")
        records: list[dict[str, Any]] = []
        self.runner.run(session, requests, records.append)
        failed = [r for r in records if r["status"] != "ok"]
        if failed:
            raise SpecbenchError(f"calibration at K={k}: {len(failed)} requests failed ({failed[0]['error']}); "
                                 f"see {self.log_dir / f'k{k}' / 'server.log'}")
        if session.counters is None or session.counters_incomplete:
            raise SpecbenchError(f"calibration at K={k}: the server's spec-decode counters could not be read "
                                 f"({self.runner.counters_source})")
        return records, session.counters

    def close(self) -> None:
        self.runner.stop_server()


def calibration_requests(runner: ServerRunner, n: int, seed: int) -> list[ServerRequest]:
    """n seeded rows of the bundled training pool (disjoint from the benchmark sets) as server requests."""
    with resources.as_file(resources.files("specbench.bundled") / POOL) as pool:
        return runner.requests(load_rows(str(pool), limit=n, seed=seed))


def load_average() -> float:
    return os.getloadavg()[0]


def measure_k(probe: Probe, k: int, requests: list[ServerRequest], grid: Grid,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    """raw["ks"][K]: the acceptance counters over the calibration prompts, then each batch size's step times,
    timed in `grid.repeats` rounds over the batch sizes (so drift touches every size alike)."""
    records, counters = probe.block(k, requests, min(grid.max_batch, len(requests)), grid.max_new_tokens, False)
    drafts, per_pos = drafting_counts(counters)            # vLLM: one `position` label per drafted token
    acceptance = {"num_drafts": drafts, "requests": len(records),
                  "accepted_per_pos": [per_pos[i] if i < len(per_pos) else 0.0 for i in range(k)]}
    reach = [a / acceptance["num_drafts"] for a in acceptance["accepted_per_pos"]] if acceptance["num_drafts"] else []
    say(f"K={k}: acceptance by depth " + " ".join(f"{r:.2f}" for r in reach))
    entry: dict[str, Any] = {"acceptance": acceptance, "step_ms": {}, "itl_ms": {}, "load": {}, "context": 0}
    one = requests[0]
    for _ in range(grid.repeats):
        for b in range(1, grid.max_batch + 1):
            block, counters = probe.block(k, [one] * b, b, grid.max_new_tokens, True)
            ms = step_ms(block, drafting_counts(counters)[0], b)
            gaps = [g for r in block for g in r.get("itl_s") or []]
            load = load_average()
            entry["step_ms"].setdefault(str(b), []).append(ms)
            entry["itl_ms"].setdefault(str(b), []).append(1000.0 * statistics.median(gaps) if gaps else None)
            entry["load"].setdefault(str(b), []).append(load)
            entry["context"] = len(block[0]["prompt_token_ids"]) + grid.max_new_tokens // 2
            say(f"K={k} batch {b}: {ms:.1f} ms a step (load average {load:.1f})")
    return entry


def calibrate(probe_for: Callable[[int], Probe], key: dict[str, Any], requests: list[ServerRequest], grid: Grid,
              raw: dict[str, Any] | None = None, say: Callable[[str], None] = print) -> CostTable:
    """Measure every K of the grid (one probe each, closed after), added to `raw` (an earlier table's), and
    return the table."""
    raw = dict(raw or {"ks": {}})
    raw["ks"] = dict(raw["ks"])
    raw.update(prompts=f"{POOL}: {len(requests)} rows, seed {grid.seed}", max_new_tokens=grid.max_new_tokens,
               repeats=grid.repeats)
    for k in grid.ks:
        probe = probe_for(k)
        try:
            raw["ks"][str(k)] = measure_k(probe, k, requests, grid, say)
        finally:
            close = getattr(probe, "close", None)
            if close:
                close()
    return build_table(key, raw)


def served_k(runner: ServerRunner) -> int:
    """The K an attached server drafts per step: vLLM's num_speculative_tokens, or SGLang's num_steps of a chain
    (topk 1); a server that does not say, or drafts a tree, is refused in one line."""
    spec = runner.server_facts(runner.endpoint).get("speculative") or {}
    if runner.engine == "sglang":
        if spec.get("eagle_topk") not in (None, 1):
            raise SpecbenchError(f"{runner.endpoint} drafts a tree (speculative_eagle_topk={spec['eagle_topk']}); a "
                                 "calibration times chains: launch it with --speculative-eagle-topk 1, or leave out "
                                 "--endpoint")
        k, hint = spec.get("num_steps"), "GET /server_info gives no speculative_num_steps"
    else:
        k = spec.get("num_speculative_tokens")
        hint = "GET /server_info or /metrics: launch it with VLLM_SERVER_DEV_MODE=1"
    if not isinstance(k, int) or k < 1:
        raise SpecbenchError(f"{runner.endpoint} does not say how many tokens it drafts ({hint}); or leave out "
                             "--endpoint")
    return k


def calibrate_server(runner: ServerRunner, drafter: str, options: dict[str, Any], grid: Grid,
                     if_missing: bool = False, say: Callable[[str], None] = print) -> tuple[CostTable, Path, bool]:
    """Launch (or attach to) the server at each K of the grid and save its table: (table, file, measured now).
    With if_missing, a table that already holds every K of the grid is returned as it is. Attached to a server,
    only the K it runs is measured (its other K come from earlier calibrations under the same key)."""
    key = server_key(runner, options, drafter)
    path = table_path(key)
    found = find_server_table(key)
    if runner.endpoint:
        grid = replace(grid, ks=(served_k(runner),))
    if if_missing and found and all(str(k) in found[0].raw.get("ks", {}) for k in grid.ks):
        return found[0], path, False
    log_dir = path.with_suffix("")
    probe = RunnerProbe(runner, options, drafter, log_dir)
    requests = calibration_requests(runner, grid.prompts, grid.seed)
    table = calibrate(lambda k: probe, key, requests, grid, found[0].raw if found else None, say)
    return table, table.save(path), True
