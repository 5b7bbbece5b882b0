"""`specbench serve`: the CLI face of `serve.py` (the reference engine behind an OpenAI-compatible API)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

from specbench.errors import SpecbenchError
from specbench.runners.reference.serve_http import (
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_S)

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        method: str = typer.Option("ngram", help="Method the engine runs (see `specbench methods`)."),
        budget: int = typer.Option(8, min=1, help="Budget L: tokens verified per step, root included."),
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        host: str = typer.Option("127.0.0.1", help="Address to listen on (no authentication: any other than "
                                 "loopback lets every machine that reaches it use the server)."),
        port: int = typer.Option(8000, min=0, max=65535, help="Port (0: any free port, printed at start)."),
        concurrency: int = typer.Option(8, min=1, help="Sequences in flight at most (vLLM's max-num-seqs)."),
        max_model_len: int = typer.Option(2048, min=16, help="Prompt + output tokens per request at most."),
        dtype: str = typer.Option("auto", help="auto, float32 or bfloat16."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        device: str = typer.Option("auto", help="auto (CUDA where torch sees a GPU, else the CPU), cpu, cuda or "
                                   "cuda:N."),
        cuda_graphs: bool = typer.Option(True, help="On CUDA: replay batch-1 one-token decoding steps from a CUDA "
                                         "graph (--no-cuda-graphs launches every kernel from Python)."),
        temperature: float = typer.Option(0.0, min=0.0, help="Sampling temperature of every request (0 = greedy)."),
        top_p: float = typer.Option(1.0, min=0.0, max=1.0, help="Nucleus mass of every request."),
        top_k: int = typer.Option(0, min=0, help="Top-k of every request (0 = off)."),
        seed: int = typer.Option(0, help="Seeds the per-request samplers."),
        model_name: Optional[str] = typer.Option(None, help="Name in /v1/models and requests (default: --target)."),
        option: list[str] = typer.Option([], help="Method option KEY=VALUE (repeatable), as for `run`."),
        max_body_bytes: int = typer.Option(DEFAULT_MAX_BODY_BYTES, min=1, help="Largest request body accepted "
                                           "(413 beyond it, answered before reading it)."),
        read_timeout: float = typer.Option(DEFAULT_READ_TIMEOUT_S, min=0.1, help="Seconds a connection has to "
                                           "deliver a whole request once idle (a stalled upload gets 408, an "
                                           "idle connection is closed); a client that stops reading its stream "
                                           "is dropped about as soon."),
        max_connections: int = typer.Option(DEFAULT_MAX_CONNECTIONS, min=1, help="Open connections at most "
                                            "(one thread each; beyond them 503)."),
        verbose: bool = typer.Option(False, help="Log every HTTP request."),
    ) -> None:
        """Serve the reference engine over HTTP: OpenAI chat/completions (streaming or not), /health, /v1/models,
        and /metrics with vLLM's spec-decode counters, so `specbench run --engine vllm --endpoint URL` and other
        OpenAI clients can drive it.

        Example: specbench serve --method ngram --budget 8 --port 8000
        """
        import logging

        from specbench.run_cli import parse_options
        from specbench.runners.reference.runner import ReferenceRunner
        from specbench.runners.reference.serve import ServeConfig, SpecbenchServer, is_loopback

        logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
        options = parse_options(option)
        ReferenceRunner.check_options([(method, {})], options)
        cfg = ServeConfig(target, method, budget, concurrency, max_model_len, dtype, threads, temperature, top_p,
                          top_k, seed, options, model_name, host, port, max_body_bytes, read_timeout,
                          max_connections, device, cuda_graphs)
        if not is_loopback(host):
            console.print(f"warning: serving on {host}, not loopback: specbench serve has no authentication, so "
                          "anyone who can reach this address can use it (the default is 127.0.0.1)",
                          highlight=False, markup=False, soft_wrap=True)
        try:
            server = SpecbenchServer(cfg)
        except OSError as err:
            raise SpecbenchError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
        svc = server.service
        console.print(f"specbench serve: {method} L={budget} on {svc.model_name} ({svc.runner.dtype_name} on "
                      f"{svc.runner.device}, "
                      f"up to {concurrency} sequences, {svc.max_model_len}-token context) at {server.url}  "
                      "(/v1/chat/completions /v1/completions /v1/models /health /metrics)",
                      highlight=False, markup=False)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
