"""`specbench train` and `specbench datastore`: distil a drafter from the target on the bundled training-prompt pool,
and index the target's responses to it for retrieval drafting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console

from specbench.errors import SpecbenchError

console = Console()
REGEN_METHODS = ("ngram", "eagle4-harness", "vanilla")
DEVICE_HELP = "Where the target {}: auto, cpu, cuda or cuda:N."


def pool_chat(pool: Path) -> Callable[[dict[str, Any]], list[dict[str, str]]]:
    """Format training-pool rows exactly as the benchmarks format their rows (system prompts from the pool's
    folder when it has system_prompts.json, else the bundled ones)."""
    from specbench.dataset import Row, chat_messages

    path = pool.parent / "system_prompts.json"
    prompts = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def chat(r: dict[str, Any]) -> list[dict[str, str]]:
        row = Row(question_id=r["id"], category=r["category"], source_dataset="train-pool", prompt=r["prompt"],
                  turns=(r["prompt"],), image_caption=r.get("image_caption"))
        return chat_messages(row, prompts)

    return chat


def check_init_from(folder: Path, kind: str) -> None:
    """eagle4 continues an eagle4 drafter; dflash and dspark start from a dflash (or dspark) backbone."""
    if not (folder / "config.json").exists():
        raise SpecbenchError(f"--init-from {folder}: needs a drafter folder (config.json + model.safetensors)")
    try:
        have = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except json.JSONDecodeError as err:
        raise SpecbenchError(f"--init-from {folder}/config.json: not JSON ({err})") from None
    want = ("eagle4",) if kind == "eagle4" else ("dflash", "dspark")
    if have not in want:
        raise SpecbenchError(f"--init-from {folder}: a {have} drafter; --drafter {kind} starts from "
                             f"{' or '.join(want)}")


def _pool_file(pool: Optional[Path]):
    """The --pool file, or the bundled training pool (a context manager yielding its path)."""
    from contextlib import nullcontext
    from importlib import resources

    if pool is not None:
        if not pool.exists():
            raise SpecbenchError(f"--pool {pool}: no such file")
        return nullcontext(pool)
    return resources.as_file(resources.files("specbench.bundled") / "train-pool.jsonl")


def _temperatures(text: str) -> tuple[float, ...]:
    try:
        temps = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise SpecbenchError(f"--temperatures {text!r}: comma-separated numbers, e.g. 0.7,0.85,1.0") from None
    if not temps or any(t <= 0 for t in temps):
        raise SpecbenchError(f"--temperatures {text!r}: give one or more temperatures above 0")
    return temps


def _token_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted(int(t) for t in text.split(",") if t.strip()))
    except ValueError:
        raise SpecbenchError(f"--curve {text!r}: comma-separated token counts, e.g. 120000,500000") from None
    if any(c <= 0 for c in counts):
        raise SpecbenchError(f"--curve {text!r}: token counts must be positive")
    return counts


def _device(name: str) -> str:
    """A --device value as torch names it ("auto" resolved); one line naming the flag for one it cannot use."""
    from reference_eagle4.device import resolve_device

    try:
        return str(resolve_device(name))
    except ValueError as err:
        raise SpecbenchError(f"--device {err}") from None


def _target(target: str) -> Path:
    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        return resolve_target(target)
    except WeightsError as err:
        raise SpecbenchError(f"--target: {err}") from None


data_app = typer.Typer(help="Distillation data at scale: responses (greedy + sampled) into a token store, then "
                       "teacher-forced features into a sharded feature store. Every stage appends and resumes.",
                       no_args_is_help=True)


@data_app.command("generate")
def data_generate(
    out: Path = typer.Option(Path("runs/train-data"), help="Data folder: OUT/tokens (the token store) and "
                             "OUT/generate.log."),
    target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
    pool: Optional[Path] = typer.Option(None, help="Training prompts JSONL (default: the bundled pool)."),
    tokens: int = typer.Option(2_000_000, min=1, help="Stop once the store holds this many response tokens."),
    minutes: Optional[float] = typer.Option(None, min=0.1, help="Stop after this many minutes of this call."),
    samples: int = typer.Option(8, min=0, help="Sampled responses per prompt beside the greedy one."),
    temperatures: str = typer.Option("0.7,0.85,1.0", help="Sampling temperatures, cycled over the rounds."),
    concurrency: int = typer.Option(48, min=1, help="Requests in flight (the engine's continuous batching)."),
    method: str = typer.Option("vanilla", help="Lossless decoding method: " + ", ".join(REGEN_METHODS) + " (at "
                               "C = 48 on a 2-core CPU vanilla beats ngram: BENCHMARKS.md 2026-12-06)."),
    budget: int = typer.Option(8, min=1, help="The method's budget L (vanilla uses 1)."),
    max_new_tokens: int = typer.Option(160, min=1, help="Longest response."),
    seed: int = typer.Option(0, help="Seeds prompt order and every request's sampling."),
    threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
    device: str = typer.Option("cpu", help=DEVICE_HELP.format("decodes")),
) -> None:
    """Decode the pool (greedy, then sampled rounds) into OUT/tokens; Ctrl-C loses only requests in flight.

    Example: nice -n 19 specbench train-data generate --out runs/train-data --tokens 2000000 --method vanilla
    """
    from reference_eagle4.training.generate import GenPlan, generate
    from reference_eagle4.training.pipeline import _Log

    dev = _device(device)
    if method not in REGEN_METHODS:
        raise SpecbenchError(f"--method {method!r}: choose one of {', '.join(REGEN_METHODS)}")
    plan = GenPlan(samples=samples, temperatures=_temperatures(temperatures), concurrency=concurrency,
                   method=method, budget=1 if method == "vanilla" else budget, max_new_tokens=max_new_tokens,
                   seed=seed, target_tokens=tokens, minutes=minutes)
    out.mkdir(parents=True, exist_ok=True)
    with _pool_file(pool) as pool_path:
        generate(pool_path, out / "tokens", _target(target), pool_chat(pool_path), plan, threads=threads,
                 device=dev, log=_Log(out / "generate.log", echo=True))


@data_app.command("features")
def data_features(
    out: Path = typer.Option(Path("runs/train-data"), help="Data folder holding OUT/tokens; features go to "
                             "OUT/features, the log to OUT/features.log."),
    target: str = typer.Option("smollm2-135m", help="The target that generated OUT/tokens."),
    batch: int = typer.Option(16, min=1, help="Sequences per target forward."),
    shard: int = typer.Option(128, min=1, help="Records per shard (what an interruption can lose)."),
    minutes: Optional[float] = typer.Option(None, min=0.1, help="Stop after this many minutes of this call."),
    threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
    device: str = typer.Option("cpu", help=DEVICE_HELP.format("runs")),
) -> None:
    """Teacher-forced features of every stored response not yet featurised, appended shard by shard."""
    from reference_eagle4.training.features import extract_to_store
    from reference_eagle4.training.pipeline import _Log

    dev = _device(device)
    if not (out / "tokens" / "meta.json").exists():
        raise SpecbenchError(f"--out {out}: no token store at {out / 'tokens'} (run specbench train-data generate)")
    extract_to_store(out / "tokens", out / "features", _target(target), batch=batch, shard_records=shard,
                     minutes=minutes, threads=threads, device=dev, log=_Log(out / "features.log", echo=True))


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="train-data")

    @app.command()
    def train(
        drafter: str = typer.Option("eagle4", help="Drafter kind to train: eagle4, dflash or dspark."),
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        pool: Optional[Path] = typer.Option(None, help="Training prompts JSONL {id, category, prompt, "
                                            "image_caption} (default: the bundled pool, disjoint from the benchmarks)."),
        out: Path = typer.Option(Path("runs/train"), help="Working folder: regenerated data and features (shared "
                                 "by every kind), train.log, and per kind <kind>/ckpt.pt and <kind>/drafter/."),
        minutes: float = typer.Option(90.0, min=1.0, help="Wall budget for regeneration + features + training."),
        steps: Optional[int] = typer.Option(None, min=1, help="Train exactly this many optimizer steps "
                                            "(--minutes then bounds only the regeneration)."),
        seed: int = typer.Option(0, help="Seeds data order, initialisation and sampling."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        resume: bool = typer.Option(True, help="Continue from the folder's data and checkpoint (--no-resume restarts)."),
        regen_method: str = typer.Option("ngram", help="How the target regenerates the responses (greedy, so the "
                                         "tokens are the same): ngram, eagle4-harness (faster once a drafter "
                                         "exists for the target) or vanilla."),
        init_from: Optional[Path] = typer.Option(None, help="Start from a trained drafter folder: for eagle4 an "
                                                 "eagle4 drafter of the same configuration (continued training, e.g. "
                                                 "the bundled one), for dflash/dspark a dflash or dspark drafter (the "
                                                 "tensors the two share: a continued run, or DSpark from "
                                                 "OUT/dflash/drafter); the draft vocabulary is the drafter's."),
        data: Optional[Path] = typer.Option(None, help="A `specbench train-data` folder: train on its feature "
                                            "store (greedy + sampled responses at scale) instead of regenerating."),
        mlp_width: Optional[int] = typer.Option(None, min=1, help="eagle4 only: the drafter's MLP intermediate "
                                                "size (default: the target's). With --init-from a narrower drafter, "
                                                "its MLP grows to this width and keeps what it learnt."),
        epochs: Optional[float] = typer.Option(None, min=0.01, help="Train this many passes over the training "
                                               "records (instead of --minutes' time budget; --steps wins)."),
        anchors: Optional[int] = typer.Option(None, min=1, help="dflash/dspark only: blocks per sample and "
                                              "optimizer step (default 32); more reuse each context forward for "
                                              "more training signal per step."),
        gamma: Optional[float] = typer.Option(None, min=0.1, help="dflash/dspark only: block row k's loss weight "
                                              "is exp(-(k-1)/GAMMA) (default 2.0); smaller puts more of the "
                                              "signal on the first drafts, which decide most of the accepted "
                                              "length (7.0, DFlash's, trained slower here: BENCHMARKS.md)."),
        lr: Optional[float] = typer.Option(None, min=1e-7, help="Peak learning rate of the drafter (eagle4's "
                                           "low-rank head keeps its own), reached after a warm-up and decayed to a "
                                           "tenth by the end (default 0.002). Continuing a drafter "
                                           "that already finished its decay wants less: a short run re-warmed to "
                                           "0.002 loses agreement (BENCHMARKS.md)."),
        teacher_temp: float = typer.Option(1.0, min=0.0, help="The teacher's temperature: the target's top-32 "
                                           "probabilities raised to 1/T and renormalised; below 1 sharpens them "
                                           "towards the argmax greedy decoding accepts, 0 trains on the argmax "
                                           "alone (hard labels). Default 1: the target's distribution as is; 0.5 and "
                                           "0 trained no better (BENCHMARKS.md)."),
        feature_noise: Optional[float] = typer.Option(None, min=0.0, help="eagle4 only: while training, add "
                                                      "Gaussian noise to the target's features, its std this "
                                                      "fraction of each feature's RMS (default 0, off): a "
                                                      "regulariser against fitting the responses read. 0.05 "
                                                      "trained no better than none (BENCHMARKS.md)."),
        curve: str = typer.Option("", help="Comma-separated response-token counts, e.g. 120000,500000: each time "
                                  "training has read that many, evaluate held out and on greedy records already "
                                  "read (a one-pass learning curve; train.log and the model card)."),
        device: str = typer.Option("cpu", help=DEVICE_HELP.format("regenerates and computes features, and "
                                                                  "the drafter trains")),
    ) -> None:
        """Regenerate responses with the target, build teacher-forced features, and train a drafter.

        eagle4 trains with the training-time test (several unrolled draft steps); dflash and dspark with
        anchored blocks. Kinds trained in the same --out share the regenerated data and features.
        Resumable: Ctrl-C keeps the last checkpoint (every few minutes) and a rerun continues from it.
        Example: specbench train --drafter eagle4 --minutes 60, then specbench train --drafter dspark --minutes 30
        """
        from reference_eagle4.training.train import KINDS

        dev = _device(device)
        if drafter not in KINDS:
            raise SpecbenchError(f"--drafter {drafter!r}: choose one of {', '.join(KINDS)}")
        if regen_method not in REGEN_METHODS:
            raise SpecbenchError(f"--regen-method {regen_method!r}: choose one of {', '.join(REGEN_METHODS)}")
        if pool is not None and not pool.exists():
            raise SpecbenchError(f"--pool {pool}: no such file")
        if init_from is not None:
            check_init_from(init_from, drafter)
        if mlp_width is not None and drafter != "eagle4":
            raise SpecbenchError(f"--mlp-width: only for --drafter eagle4, not {drafter}")
        if anchors is not None and drafter == "eagle4":
            raise SpecbenchError("--anchors: only for --drafter dflash or dspark (eagle4 trains on every position)")
        if gamma is not None and drafter == "eagle4":
            raise SpecbenchError("--gamma: only for --drafter dflash or dspark (eagle4 weighs its steps by "
                                 "TrainConfig.decay)")
        if feature_noise is not None and drafter != "eagle4":
            raise SpecbenchError(f"--feature-noise: only for --drafter eagle4, not {drafter}")
        if data is not None and not (data / "features" / "meta.json").exists():
            raise SpecbenchError(f"--data {data}: no feature store at {data / 'features'} "
                                 "(run specbench train-data generate, then train-data features)")
        from importlib import resources

        from reference_eagle4.training import TrainConfig, train_drafter

        with resources.as_file(resources.files("specbench.bundled") / "train-pool.jsonl") as bundled:
            pool = pool or bundled
            given = {"anchors": anchors, "gamma": gamma, "lr": lr, "teacher_temp": teacher_temp,
                     "feature_noise": feature_noise}
            cfg = TrainConfig(init_from=str(init_from) if init_from else None, mlp_width=mlp_width, epochs=epochs,
                              curve_tokens=_token_counts(curve), **{k: v for k, v in given.items() if v is not None})
            folder = train_drafter(drafter, out, pool, target, pool_chat(pool), minutes, steps, seed, resume,
                                   threads=threads, regen_method=regen_method, train_config=cfg, data=data,
                                   device=dev)
        console.print(f"drafter: {folder}")

    @app.command()
    def datastore(
        target: str = typer.Option("smollm2-135m", help="Known target name, a .gguf file, or a HF folder."),
        pool: Optional[Path] = typer.Option(None, help="Training prompts JSONL {id, category, prompt, "
                                            "image_caption} (default: the bundled pool, disjoint from the benchmarks)."),
        work: Path = typer.Option(Path("runs/train"), help="Working folder shared with `specbench train`: "
                                  "regen.jsonl (the target's responses, resumed) and train.log."),
        out: Optional[Path] = typer.Option(None, help="Datastore folder to write (default WORK/datastore); "
                                           "pass it to the harness with --option datastore=FOLDER."),
        minutes: Optional[float] = typer.Option(None, min=0.0, help="At most this many minutes of regeneration "
                                                "in this call (default: until every pool prompt has a response; "
                                                "0: index what WORK/regen.jsonl holds)."),
        max_new_tokens: int = typer.Option(160, min=1, help="Longest regenerated response."),
        regen_method: str = typer.Option("ngram", help="How the target regenerates (greedy, the same tokens): "
                                         + ", ".join(REGEN_METHODS) + "."),
        threads: Optional[int] = typer.Option(None, min=1, help="CPU threads (default: all)."),
        data: Optional[Path] = typer.Option(None, help="A `specbench train-data` folder: index its greedy "
                                            "responses instead of regenerating (--minutes is then ignored)."),
    ) -> None:
        """Regenerate the training pool's responses with the target and index them for retrieval drafting.

        eagle4-harness adds the datastore's continuation of the context's longest suffix to its tree
        (REST-style retrieval); the one for the default target ships in reference_eagle4/drafters/.
        Resumable: Ctrl-C keeps every finished response and a rerun continues.
        Example: specbench datastore --minutes 60, then specbench run --method eagle4-harness
        --option datastore=runs/train/datastore
        """
        if regen_method not in REGEN_METHODS:
            raise SpecbenchError(f"--regen-method {regen_method!r}: choose one of {', '.join(REGEN_METHODS)}")
        if pool is not None and not pool.exists():
            raise SpecbenchError(f"--pool {pool}: no such file")
        if data is not None and not (data / "tokens" / "meta.json").exists():
            raise SpecbenchError(f"--data {data}: no token store at {data / 'tokens'} (run specbench train-data "
                                 "generate)")
        if data is None and minutes == 0 and not (work / "regen.jsonl").exists():
            raise SpecbenchError(f"--minutes 0: {work / 'regen.jsonl'} does not exist, nothing to index")
        from importlib import resources

        from reference_eagle4.training import build_datastore

        with resources.as_file(resources.files("specbench.bundled") / "train-pool.jsonl") as bundled:
            pool = pool or bundled
            folder = build_datastore(work, out, pool, target, pool_chat(pool), minutes, max_new_tokens,
                                     threads=threads, regen_method=regen_method, data=data)
        console.print(f"datastore: {folder}")
