"""The bundled reference engine as a `Runner`: dataset rows in, per-request records out.

The target is loaded once per process and shared by every method of a comparison, so the methods differ only
in their proposer; each (method, budget, concurrency) gets its own `Engine` (KV cache and scheduler). It runs
on the device `--device` names (auto: CUDA where torch sees a GPU); a CPU run imports none of the GPU kernels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

from reference_eagle4.device import device_label, gpu_facts, resolve_device, resolve_dtype
from reference_eagle4.engine import Engine, GenerationConfig, Request, Sequence
from reference_eagle4.linears import pack_linears
from reference_eagle4.model import Transformer, load_transformer
from reference_eagle4.proposers import PROPOSERS
from reference_eagle4.proposers.base import option_names
from reference_eagle4.verify import Sampling
from reference_eagle4.weights import WeightsError, eos_ids, resolve_target, weights_sha256
from specbench.dataset import Row, chat_messages
from specbench.errors import SpecbenchError
from specbench.runners.base import OnRecord, Record
from specbench.runners.hardware import gpu_inventory
from specbench.settings import Job, MethodSpec, Settings

PREFIX_CACHE_TOKENS = GenerationConfig.prefix_cache   # the engine's room (prompt tokens) when the cache is on


@dataclass
class ReferenceVariant:
    """One (method, budget, concurrency) on the reference engine."""

    settings: Settings
    engine: Engine
    method_config: dict[str, Any]


class ReferenceRunner:
    engine = "reference"
    in_process = True
    operational_options: frozenset[str] = frozenset()

    def __init__(self, target: str, dtype: str = "auto", threads: int | None = None,
                 prefix_cache: int = PREFIX_CACHE_TOKENS, device: str = "auto", cuda_graphs: bool = True):
        self.prefix_cache = prefix_cache      # prompt tokens whose KV each engine keeps for reuse (0 = off)
        try:
            self.device = resolve_device(device)
        except ValueError as err:
            raise SpecbenchError(f"--device {err}") from None
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"     # in effect (the CPU has none)
        try:
            torch_dtype = resolve_dtype(dtype, self.device)
        except ValueError as err:
            raise SpecbenchError(f"--dtype: {err}") from None
        self.dtype_name = str(torch_dtype).removeprefix("torch.")
        torch.set_num_threads(threads or os.cpu_count() or 1)
        try:
            self.folder = resolve_target(target)
        except WeightsError as err:
            raise SpecbenchError(str(err)) from None
        from transformers import AutoTokenizer

        self.target_spec = target
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        except (OSError, ValueError) as err:
            raise SpecbenchError(f"{self.folder}: cannot load the target's tokenizer ({err})") from None
        try:
            self.model: Transformer = pack_linears(load_transformer(self.folder, torch_dtype, self.device))
        except (OSError, KeyError, ValueError) as err:
            raise SpecbenchError(f"{self.folder}: cannot load the target's weights ({type(err).__name__}: "
                                 f"{err})") from None
        self.eos_ids = eos_ids(self.folder, self.tokenizer)
        self._sha: str | None = None

    # -- the Runner protocol --------------------------------------------------------------------------
    @classmethod
    def methods(cls) -> tuple[str, ...]:
        return tuple(sorted(PROPOSERS))

    @classmethod
    def check_options(cls, methods: list[MethodSpec], shared: dict[str, Any]) -> None:
        """A method's own option must be one it takes, and a shared --option one that some method takes:
        a misspelt option is an error, never a run that silently ignored it."""
        known = {}
        for name, own in methods:
            if name not in PROPOSERS:
                raise SpecbenchError(f"--method {name!r} is unknown (choose from {', '.join(cls.methods())})")
            known[name] = option_names(PROPOSERS[name])
            for key in own:
                if key not in known[name]:
                    raise SpecbenchError(f"--methods {name}:{key}=...: {name} has no option {key!r} "
                                         f"(it takes {', '.join(sorted(known[name])) or 'none'})")
        for key in shared:
            if not any(key in k for k in known.values()):
                takes = "; ".join(f"{m} takes {', '.join(sorted(k)) or 'none'}" for m, k in known.items()
                                  if m != "vanilla")
                raise SpecbenchError(f"--option {key}: no method here takes it ({takes})")

    @classmethod
    def from_job(cls, job: Job) -> "ReferenceRunner":
        if job.endpoint:
            raise SpecbenchError("--endpoint is for server engines: add --engine vllm or --engine sglang")
        return cls(job.target, job.dtype, job.threads, PREFIX_CACHE_TOKENS if job.prefix_cache else 0, job.device,
                   job.cuda_graphs)

    def describe(self) -> dict[str, Any]:
        if self._sha is None:
            try:
                self._sha = weights_sha256(self.folder)
            except WeightsError as err:
                raise SpecbenchError(str(err)) from None
        return {
            "engine": self.engine,
            "target": self.target_spec,
            "target_folder": str(self.folder),
            "weights_sha256": self._sha,
            "dtype": self.dtype_name,
            "device": device_label(self.device),
            "gpu": self.gpu(),
            "cuda_graphs": self.cuda_graphs,
            "threads": torch.get_num_threads(),
            "prefix_cache": self.prefix_cache,
        }

    def gpu(self) -> dict[str, Any]:
        """The manifest's GPU facts: torch's (name, count, capability, CUDA runtime, torch and Triton versions)
        and the driver nvidia-smi reports; every field None on the CPU."""
        facts = {**gpu_facts(self.device), "driver": None}
        if self.device.type == "cuda":
            facts["driver"] = (gpu_inventory() or {}).get("driver")
        return facts

    def requests(self, rows: Iterable[Row]) -> list[Request]:
        out = []
        for row in rows:
            ids = self.tokenizer.apply_chat_template(
                chat_messages(row), add_generation_prompt=True, tokenize=True, return_dict=False)
            out.append(Request(row.question_id, list(ids), {"category": row.category}))
        return out

    def prepare(self, settings: Settings, requests: list[Request], run_dir: Path) -> ReferenceVariant:
        engine = self.make_engine(settings, self.max_len(requests, settings))
        return ReferenceVariant(settings, engine, engine.proposer.config())

    def run(self, prepared: ReferenceVariant, requests: list[Request], on_record: OnRecord) -> None:
        prepared.engine.generate(requests, lambda seq: on_record(self.record(seq, prepared.settings)))

    def close(self, prepared: ReferenceVariant, run_dir: Path) -> None:
        """Nothing to release beyond what garbage collection does; the manifest needs nothing more."""

    # -- the engine -----------------------------------------------------------------------------------
    def make_engine(self, settings: Settings, max_len: int) -> Engine:
        """An engine running `settings.method` with KV slots of `max_len` positions."""
        if settings.method not in PROPOSERS:
            raise SpecbenchError(f"--method {settings.method!r} is unknown (choose from {', '.join(self.methods())})")
        cfg = GenerationConfig(
            max_new_tokens=settings.max_new_tokens,
            sampling=Sampling(settings.temperature, settings.top_p, settings.top_k),
            eos_ids=self.eos_ids, concurrency=settings.concurrency, seed=settings.seed,
            prefix_cache=self.prefix_cache, cuda_graphs=self.cuda_graphs)
        try:
            proposer = PROPOSERS[settings.method](budget=settings.budget, **settings.options)
            return Engine(self.model, proposer, cfg, max_len)        # binds the proposer: a drafter must fit
        except (TypeError, ValueError, FileNotFoundError) as err:
            raise SpecbenchError(f"--method {settings.method}: {err}") from None

    def max_len(self, requests: list[Request], settings: Settings) -> int:
        """KV slots long enough for the longest prompt, the output, and one step's tree (at least 64 slots, so
        every method's tree fits); an overflow names what causes it: --budget or the prompt and output."""
        longest = max(len(r.prompt_ids) for r in requests)
        text = longest + settings.max_new_tokens
        need = text + max(settings.budget, 64) + 1
        limit = self.model.args.max_position
        if need <= limit:
            return need
        if text + 64 + 1 <= limit:
            raise SpecbenchError(
                f"--budget {settings.budget}: a step's tree needs {settings.budget} KV positions beyond the prompt "
                f"and output ({longest} + {settings.max_new_tokens} tokens), which leaves {limit - text - 1} of "
                f"the target's {limit}-token context; use --budget {limit - text - 1} or less")
        raise SpecbenchError(
            f"a prompt of {longest} tokens + {settings.max_new_tokens} new tokens + a step's tree of "
            f"{max(settings.budget, 64)} exceeds the target's {limit}-token context; lower --max-new-tokens "
            "or filter long rows")

    def record(self, seq: Sequence, settings: Settings) -> Record:
        out = seq.output
        return {
            "question_id": seq.request.id,
            "category": seq.request.meta.get("category", ""),
            "method": settings.method,
            "concurrency": settings.concurrency,
            "status": "ok",
            "error": "",
            "prompt_token_ids": seq.request.prompt_ids,
            "output_token_ids": out,
            "output_text": self.tokenizer.decode(out, skip_special_tokens=True),
            "steps": seq.steps,
            "mean_entropy": sum(seq.entropies) / len(seq.entropies) if seq.entropies else 0.0,
            "t_start": seq.t_start,
            "t_end": seq.t_end,
            "cached_prompt_tokens": seq.cached_tokens,
            "ttft_s": seq.t_first - seq.t_start,
            "latency_s": seq.t_end - seq.t_start,
        }
