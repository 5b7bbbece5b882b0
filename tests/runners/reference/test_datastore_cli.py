"""`specbench datastore` end to end on a tiny HF-folder target: regenerate, index, card; resumes; bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError

sys.path.insert(0, str(Path(__file__).parent))
from test_train_cli import pool  # noqa: E402

runner = CliRunner()


def test_datastore_indexes_the_regenerated_responses(tiny_target, tmp_path):
    from reference_eagle4.datastore import Datastore

    p, work = pool(tmp_path / "pool"), tmp_path / "work"
    args = ["datastore", "--target", str(tiny_target), "--pool", str(p), "--work", str(work),
            "--regen-method", "vanilla", "--max-new-tokens", "12", "--threads", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (work / "regen.jsonl").read_text().splitlines()]
    store = Datastore.load(work / "datastore")
    assert len(rows) == 5 and len(store) == sum(len(r["output_ids"]) for r in rows)
    card = (work / "datastore" / "README.md").read_text()
    assert card.startswith("# Retrieval datastore") and "5 of the 5 prompts of `pool.jsonl`" in card
    # a rerun regenerates nothing more and indexes the same responses; an interrupted line is reported
    with open(work / "regen.jsonl", "a") as fh:
        fh.write('{"id": "p9", "outp')
    res = runner.invoke(app, [*args, "--minutes", "0", "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    assert len(Datastore.load(tmp_path / "again")) == len(store)
    assert "1 unfinished line(s)" in (work / "train.log").read_text()


def test_datastore_indexes_the_greedy_responses_of_a_train_data_store(tiny_target, tmp_path):
    from reference_eagle4.datastore import Datastore
    from reference_eagle4.training.store import TokenStore

    p, data = pool(tmp_path / "pool"), tmp_path / "data"
    res = runner.invoke(app, ["train-data", "generate", "--target", str(tiny_target), "--pool", str(p), "--out",
                              str(data), "--samples", "1", "--concurrency", "4", "--max-new-tokens", "6",
                              "--threads", "1"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["datastore", "--target", str(tiny_target), "--pool", str(p), "--data", str(data),
                              "--work", str(tmp_path / "work"), "--threads", "1"])
    assert res.exit_code == 0, res.output
    greedy = [e["n_out"] for e in TokenStore(data / "tokens").entries if e["key"].endswith("#g")]
    assert len(greedy) == 5 and len(Datastore.load(tmp_path / "work" / "datastore")) == sum(greedy)
    card = (tmp_path / "work" / "datastore" / "README.md").read_text()
    assert "5 of the 5 prompts of `pool.jsonl`" in card and "greedy (vanilla)" in card
    assert not (tmp_path / "work" / "regen.jsonl").exists()


def test_bad_input_names_the_flag(tmp_path):
    for args, says in [(["--data", str(tmp_path)], "no token store"),(["--pool", str(tmp_path / "none.jsonl")], "--pool"),
                       (["--work", str(tmp_path), "--minutes", "0"], "nothing to index"),
                       (["--regen-method", "beam"], "--regen-method")]:
        res = runner.invoke(app, ["datastore", *args])
        assert isinstance(res.exception, SpecbenchError) and says in str(res.exception)
