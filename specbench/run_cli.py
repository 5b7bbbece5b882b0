"""`specbench run` and `specbench compare`: the CLI face of specbench.run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from specbench.errors import SpecbenchError

console = Console()

DATASET_HELP = "Bundled name (prompt-enhancement, fireworks), a .jsonl/.parquet file, or hf:<repo_id>[:<split>]."
OPTION_HELP = "Method option KEY=VALUE (repeatable), e.g. --option matches=3 for an n-gram tree."
ENGINE_HELP = ("reference (the bundled engine, in this process), vllm or sglang (a server: --endpoint URL, or "
               "launched for the run; server options such as --option drafter=PATH --option tp=4: "
               "see `specbench engines --help`).")
PREFIX_HELP = ("Reference engine: reuse the KV of the longest prefix a prompt shares with a recent one (the "
               "system prompt; 8,192 prompt tokens kept), as vLLM and SGLang do; --no-prefix-cache prefills every "
               "prompt whole.")
ENDPOINT_HELP = "URL of a running vLLM / SGLang / `specbench serve` server (with --engine vllm or sglang)."
MAX_NEW_TOKENS_HELP = ("Output tokens per request at most (default 128 on the reference engine, as its demo "
                       "measured; 256 on vllm/sglang, enough for the prompt enhancer's 120-160-word answers).")
RATE_HELP = ("Server engines: requests/s arriving as a seeded Poisson process (gamma with --burstiness), as "
             "`vllm bench serve --request-rate`; --concurrency still caps those in flight. inf: all at once.")
BURSTINESS_HELP = ("Shape of the gamma-distributed gaps between --request-rate arrivals: 1 Poisson, < 1 burstier, "
                   "> 1 more regular (vllm bench serve --burstiness).")
REPEATS_HELP = ("Run every variant N times, interleaved (repeat 1 of each, then repeat 2, ...), each in its own "
                "run dir NAME-rK; the report shows each figure's mean and 95% confidence interval.")
DEVICE_HELP = ("Reference engine: auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda or cuda:N (a server "
               "runs where it was launched).")
CUDA_GRAPHS_HELP = ("Reference engine on CUDA: replay batch-1 one-token decoding steps from a CUDA graph "
                    "(--no-cuda-graphs launches every kernel from Python); no effect on the CPU.")
ALLOW_FAILURES_HELP = ("Exit 0 even when requests failed (a server engine's refused, dropped or timed-out requests); "
                       "without it such a run exits 1 after writing its records and report.")


def parse_options(items: list[str], flag: str = "--option") -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecbenchError(f"{flag} {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def parse_methods(text: str) -> list[tuple[str, dict[str, Any]]]:
    """`ngram,eagle4-harness,eagle4-harness:lookup=off` -> [(name, that entry's own options), ...]. An entry's
    `budget=L` runs that method at L alone instead of every --budget (a DFlash drafter at its block size beside
    chains at L = 5)."""
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if entry:
            name, *opts = entry.split(":")
            own = parse_options(opts, f"--methods {entry}:")
            budget = own.get("budget")
            if budget is not None and (name == "vanilla" or not isinstance(budget, int) or budget < 1):
                raise SpecbenchError(f"--methods {entry}: budget must be an integer L >= 1"
                                     + (" (vanilla always runs at L = 1)" if name == "vanilla" else ""))
            out.append((name, own))
    if not out:
        raise SpecbenchError("--methods: name at least one method")
    return out


def parse_ints(flag: str, text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecbenchError(f"{flag} {text!r}: expected integers separated by commas") from None
    if not values or min(values) < 1:
        raise SpecbenchError(f"{flag} {text!r}: values must be at least 1")
    return values


def reference_device(engine: str, device: str) -> str:
    """--device, refused with a server engine (the server's device is its own; --option device=... names it)."""
    if engine != "reference" and device != "auto":
        raise SpecbenchError(f"--device {device}: the reference engine's device; a {engine} server runs where it "
                             "was launched (name it with --option device=...)")
    return device


def arrivals(request_rate: float, burstiness: float) -> tuple[float | None, float | None]:
    """Settings' (request_rate, burstiness) from the flags: (None, None) for an infinite rate (every request at
    once, as before); a rate or burstiness that is not a positive finite number is a SpecbenchError."""
    if not request_rate > 0:
        raise SpecbenchError(f"--request-rate {request_rate:g}: must be above 0 (requests/s; inf sends all at once)")
    if not 0 < burstiness < float("inf"):
        raise SpecbenchError(f"--burstiness {burstiness:g}: must be a positive finite number (1 = Poisson)")
    if request_rate == float("inf"):
        if burstiness != 1.0:
            raise SpecbenchError("--burstiness shapes the gaps between --request-rate arrivals: give --request-rate")
        return None, None
    return request_rate, burstiness


def _finish(paths: list[Path], report_dir: Path | None) -> None:
    from specbench.analysis.metrics import summarize_run
    from specbench.report_cli import print_unsquashed, summary_table

    summaries = [summarize_run(p) for p in paths]
    print_unsquashed(summary_table(summaries))
    if report_dir is not None:
        from specbench.report import render_report

        render_report(paths, report_dir)
        console.print(f"report: {report_dir / 'index.html'}  ({report_dir / 'leaderboard.md'})")


def register(app: typer.Typer) -> None:
    @app.command()
    def run(
        method: str = typer.Option("eagle4-harness", help="Method to run (see `specbench methods`)."),
        budget: int = typer.Option(16, min=1, help="Budget L: tokens the target verifies per step, root included."),
        dataset: str = typer.Option("prompt-enhancement", help=DATASET_HELP),
        category: list[str] = typer.Option([], help="Only rows of this category (repeatable)."),
        limit: Optional[int] = typer.Option(None, min=1, help="At most this many rows (after the seeded shuffle)."),
        concurrency: int = typer.Option(1, min=1, help="Sequences in flight (continuous batching)."),
        max_new_tokens: Optional[int] = typer.Option(None, min=1, help=MAX_NEW_TOKENS_HELP),
        temperature: float = typer.Option(0.0, min=0.0, help="0 = greedy; > 0 samples (lossless verification)."),
        top_p: float = typer.Option(1.0, min=0.0, max=1.0, help="Nucleus sampling mass (with --temperature)."),
        top_k: int = typer.Option(0, min=0, help="Top-k sampling (0 = off)."),
        seed: int = typer.Option(0, help="Seeds the row shuffle and the sampling."),
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF safetensors folder."),
        dtype: str = typer.Option("auto", help="auto (bf16 where the CPU has native bf16, else fp32), float32, bfloat16."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        device: str = typer.Option("auto", help=DEVICE_HELP),
        cuda_graphs: bool = typer.Option(True, help=CUDA_GRAPHS_HELP),
        prefix_cache: bool = typer.Option(True, help=PREFIX_HELP),
        option: list[str] = typer.Option([], help=OPTION_HELP),
        engine: str = typer.Option("reference", help=ENGINE_HELP),
        endpoint: Optional[str] = typer.Option(None, help=ENDPOINT_HELP),
        out: Optional[Path] = typer.Option(None, help="Run directory (default runs/<time>-<method>-L<L>-C<C>)."),
        resume: bool = typer.Option(False, help="Continue the run in --out: keep its records, run the rest."),
        report: bool = typer.Option(True, help="Render RUN_DIR/report/ (leaderboard.md, index.html) at the end."),
        allow_failures: bool = typer.Option(False, "--allow-failures", help=ALLOW_FAILURES_HELP),
        request_rate: float = typer.Option(float("inf"), help=RATE_HELP),
        burstiness: float = typer.Option(1.0, help=BURSTINESS_HELP),
    ) -> None:
        """Run one method over a dataset and write RUN_DIR/manifest.json and RUN_DIR/records.jsonl.

        Example: specbench run --method ngram --budget 8 --dataset fireworks --category code --limit 10
        """
        from specbench.run import run_one
        from specbench.settings import Job, Settings, default_max_new_tokens

        job = Job(dataset, list(category), limit, target, dtype, threads, engine, endpoint, prefix_cache,
                  reference_device(engine, device), cuda_graphs)
        settings = Settings(method, budget, concurrency, max_new_tokens or default_max_new_tokens(engine),
                            temperature, top_p, top_k, seed, parse_options(option),
                            *arrivals(request_rate, burstiness))
        path = run_one(job, settings, out, resume)
        _finish([path], path / "report" if report else None)
        console.print(f"run: {path}")
        _exit_on_failures([path], "" if out is not None else f" --out {path}", allow_failures)

    @app.command()
    def compare(
        methods: str = typer.Option("vanilla,ngram", help=(
            "Comma-separated methods; vanilla is always added. A method may carry options of its own after "
            "colons, so variants run side by side: eagle4-harness,eagle4-harness:lookup=off")),
        budget: str = typer.Option("8", help="Comma-separated budgets L, e.g. 4,8,16 (vanilla runs once; "
                                                 "a method entry's own budget=L overrides them: dflash:budget=16)."),
        concurrency: str = typer.Option("1", help="Comma-separated concurrencies, e.g. 1,8."),
        dataset: str = typer.Option("prompt-enhancement", help=DATASET_HELP),
        category: list[str] = typer.Option([], help="Only rows of this category (repeatable)."),
        limit: Optional[int] = typer.Option(None, min=1, help="At most this many rows (after the seeded shuffle)."),
        max_new_tokens: Optional[int] = typer.Option(None, min=1, help=MAX_NEW_TOKENS_HELP),
        temperature: float = typer.Option(0.0, min=0.0, help="0 = greedy; > 0 samples (lossless verification)."),
        top_p: float = typer.Option(1.0, min=0.0, max=1.0, help="Nucleus sampling mass (with --temperature)."),
        top_k: int = typer.Option(0, min=0, help="Top-k sampling (0 = off)."),
        seed: int = typer.Option(0, help="Seeds the row shuffle and the sampling."),
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF safetensors folder."),
        dtype: str = typer.Option("auto", help="auto, float32 or bfloat16."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        device: str = typer.Option("auto", help=DEVICE_HELP),
        cuda_graphs: bool = typer.Option(True, help=CUDA_GRAPHS_HELP),
        prefix_cache: bool = typer.Option(True, help=PREFIX_HELP),
        chunk: Optional[int] = typer.Option(None, min=1, help="Requests per interleaving block (default 1 at C=1, 4C)."),
        engine: str = typer.Option("reference", help="reference, vllm or sglang (server engines: one launch per "
                                                     "variant and repeat, serving each concurrency in turn; "
                                                     "--option drafter=PATH, tp=N ...)."),
        option: list[str] = typer.Option([], help=OPTION_HELP),
        out: Optional[Path] = typer.Option(None, help="Folder for the run dirs (default runs/compare-<time>)."),
        resume: bool = typer.Option(False, help="Continue the comparison in --out."),
        report: Optional[Path] = typer.Option(None, help="Report folder (default OUT/report)."),
        allow_failures: bool = typer.Option(False, "--allow-failures", help=ALLOW_FAILURES_HELP),
        request_rate: float = typer.Option(float("inf"), help=RATE_HELP),
        burstiness: float = typer.Option(1.0, help=BURSTINESS_HELP),
        repeats: int = typer.Option(1, min=1, help=REPEATS_HELP),
    ) -> None:
        """Run several methods interleaved on the same requests, so machine drift cancels in the speedups.

        Example: specbench compare --methods ngram,eagle4-tree --budget 8,16 --concurrency 1,8 --limit 20
        """
        from specbench.run import run_compare
        from specbench.settings import Job, Settings, default_max_new_tokens

        job = Job(dataset, list(category), limit, target, dtype, threads, engine, prefix_cache=prefix_cache,
                  device=reference_device(engine, device), cuda_graphs=cuda_graphs)
        base = Settings("vanilla", 1, 1, max_new_tokens or default_max_new_tokens(engine), temperature, top_p,
                        top_k, seed, parse_options(option), *arrivals(request_rate, burstiness))
        paths = run_compare(job, base, parse_methods(methods), parse_ints("--budget", budget),
                            parse_ints("--concurrency", concurrency), out, resume, chunk, repeats)
        root = paths[0].parent
        _finish(paths, report or root / "report")
        _print_match_rates(paths)
        console.print(f"runs: {root}")
        _exit_on_failures(paths, "" if out is not None else f" --out {root}", allow_failures)


def failure_summary(paths: list[Path], resume_flags: str) -> list[str]:
    """Lines saying how many requests failed (per run when there are several), the first error, and how to
    retry them; empty when none failed."""
    from specbench.records import read_records

    runs = [(p, read_records(p)) for p in paths]
    failed = [(p, r) for p, recs in runs for r in recs if r["status"] != "ok"]
    if not failed:
        return []
    lines = []
    if len(paths) > 1:
        for p, recs in runs:
            n = sum(r["status"] != "ok" for r in recs)
            if n:
                lines.append(f"{p}: {n} of {len(recs)} requests failed")
    total = sum(len(recs) for _, recs in runs)
    lines.append(f"{len(failed)} of {total} requests failed (first: {failed[0][1]['error']}); "
                 f"rerun with --resume{resume_flags} to retry them")
    return lines


def _exit_on_failures(paths: list[Path], resume_flags: str, allow_failures: bool) -> None:
    """Say which runs hold failed requests (server engines: refused, dropped or timed-out requests) and exit 1
    unless --allow-failures, so a script that runs a benchmark learns that it is incomplete."""
    lines = failure_summary(paths, resume_flags)
    if not lines:
        return
    from rich.markup import escape

    for line in lines:
        console.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)
    if not allow_failures:
        console.print("exit status 1: requests failed (--allow-failures accepts them)", highlight=False)
        raise typer.Exit(1)


def _print_match_rates(paths: list[Path]) -> None:
    """Share of requests whose output equals vanilla's at the same concurrency (1.0 when lossless in fp32)."""
    from specbench.analysis.metrics import method_label, output_match_rate
    from specbench.records import read_manifest, read_records

    runs = [(read_manifest(p), read_records(p)) for p in paths]
    base = {m["concurrency"]: recs for m, recs in runs if m["method"] == "vanilla"}
    for m, recs in runs:
        if m["method"] != "vanilla" and m["concurrency"] in base:
            rate = output_match_rate(recs, base[m["concurrency"]])
            said = ("no request finished in both runs, outputs not compared" if rate is None
                    else f"output identical to vanilla for {rate:.1%} of requests ({m['dtype']})")
            console.print(f"{method_label(m)} L={m['budget']} C={m['concurrency']}: {said}")
