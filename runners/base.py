"""The one interface `specbench run` and `compare` drive every engine through.

A runner turns dataset rows into the engine's requests, makes one (method, budget, concurrency) ready on the
engine (`prepare`), runs blocks of requests at that concurrency and hands back one record per request
(`specbench.records`), and releases the engine at the end (`close`). The core never sees an engine, only
this protocol, so the reference engine, vLLM and SGLang are measured by the same orchestration and the same
analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from specbench.dataset import Row
from specbench.settings import Job, MethodSpec, Settings

Record = dict[str, Any]
OnRecord = Callable[[Record], None]


class EngineRequest(Protocol):
    """One row as the engine's request; only its id is read outside the runner."""

    id: str


class Prepared(Protocol):
    """One (method, budget, concurrency) made ready on an engine."""

    method_config: dict[str, Any]          # the engine-side configuration, recorded in the manifest


class Runner(Protocol):
    engine: ClassVar[str]
    # In process (the reference engine): the variants of a comparison alternate block by block on one engine
    # and the CPU other processes take is measured. A server runs one variant at a time, all its requests in
    # one block, and its own work is another process's CPU by construction.
    in_process: ClassVar[bool]
    # Options that change how a run is carried out but not what it measures (timeouts, retries, where the server's
    # Python lives): a resumed run may change them.
    operational_options: ClassVar[frozenset[str]]

    @classmethod
    def methods(cls) -> tuple[str, ...]:
        """The methods this engine runs."""
        ...

    @classmethod
    def check_options(cls, methods: list[MethodSpec], shared: dict[str, Any]) -> None:
        """Refuse an option nothing here reads (SpecbenchError naming the flag), before anything loads."""
        ...

    @classmethod
    def from_job(cls, job: Job) -> "Runner":
        """Load or reach the engine for a job; refuse flags that belong to another engine."""
        ...

    def describe(self) -> dict[str, Any]:
        """Manifest facts about the engine, target and machine."""
        ...

    def requests(self, rows: list[Row]) -> list[EngineRequest]:
        ...

    def prepare(self, settings: Settings, requests: list[EngineRequest], run_dir: Path) -> Prepared:
        ...

    def run(self, prepared: Prepared, requests: list[EngineRequest], on_record: OnRecord) -> None:
        """Run the requests with `settings.concurrency` in flight, calling on_record as each one ends."""
        ...

    def close(self, prepared: Prepared, run_dir: Path) -> None:
        """The variant is done (or interrupted): release what it holds, add run-level facts to its manifest."""
        ...
