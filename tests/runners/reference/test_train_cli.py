"""`specbench train` end to end on a tiny HF-folder target: eagle4 then dspark in one folder share the
regenerated data and the features; each kind exports a loadable drafter with a model card."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[3]


def pool(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"p{i}", "category": "text-to-video" if i % 2 else "code",
             "prompt": f"a fox jumps over the lazy dog, take {i}", "image_caption": None} for i in range(5)]
    (folder / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "system_prompts.json").write_text(json.dumps({"text-to-video": "Enhance the video prompt.",
                                                            "general": "You are a helpful assistant."}))
    return folder / "pool.jsonl"


def tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_two_kinds_share_data_and_export(tiny_target, tmp_path):
    p, out = pool(tmp_path / "pool"), tmp_path / "train"
    common = ["--target", str(tiny_target), "--pool", str(p), "--out", str(out), "--steps", "3", "--threads", "1"]
    res = runner.invoke(app, ["train", "--drafter", "eagle4", "--regen-method", "vanilla", *common])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["train", "--drafter", "dspark", *common])
    assert res.exit_code == 0, res.output
    log = (out / "train.log").read_text()
    assert "regenerate: 5 rows done, 0 to go" in log and "features: cached 5 samples" in log
    from reference_eagle4.drafters import load_dflash, load_drafter
    assert load_drafter(out / "eagle4" / "drafter").cfg.kind == "eagle4"
    d = load_dflash(out / "dspark" / "drafter")
    assert d.is_dspark and d.cfg.block_size == 16
    card = (out / "dspark" / "drafter" / "README.md").read_text()
    assert card.startswith("# DSpark drafter") and "5 prompts from `pool.jsonl`" in card
    assert " min on 1 thread of " in card                  # where it trained (--threads 1, the CPU's model)
    training = json.loads((out / "eagle4" / "drafter" / "config.json").read_text())["training"]
    assert training["regen"]["decoding"] == "greedy (vanilla)"
    assert training["pool"] == "pool.jsonl"                # no path of the machine it trained on
    # continued training of the exported drafter, on the same data: the card says where it started
    # with a wider MLP and feature noise: the card names both
    width = 2 * load_drafter(out / "eagle4" / "drafter").cfg.intermediate_size
    res = runner.invoke(app, ["train", "--drafter", "eagle4", "--init-from", str(out / "eagle4" / "drafter"),
                              *common[:-6], "--out", str(tmp_path / "more"), "--steps", "2", "--threads", "1",
                              "--mlp-width", str(width), "--feature-noise", "0.05"])
    assert res.exit_code == 0, res.output
    assert load_drafter(tmp_path / "more" / "eagle4" / "drafter").cfg.intermediate_size == width
    card = (tmp_path / "more" / "eagle4" / "drafter" / "README.md").read_text()
    assert "continued from `" in card and "the same, for the drafter it continued from | step 0:" in card
    assert f"MLP width {width}" in card
    assert "soft CE vs the target's top-32 distribution, features with Gaussian noise of 0.05 x their RMS" in card
    # a block drafter continued on the same data: its card gives the starting drafter's agreement too
    res = runner.invoke(app, ["train", "--drafter", "dspark", "--init-from", str(out / "dspark" / "drafter"),
                              *common[:-6], "--out", str(tmp_path / "more"), "--steps", "2", "--threads", "1",
                              "--anchors", "8", "--gamma", "3", "--lr", "0.0005", "--teacher-temp", "0.5"])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "more" / "dspark" / "drafter" / "README.md").read_text()
    assert "the same, for the drafter it started from | row-1 top-1 agreement 0." in card
    assert "| training | initialised from `" in card and " 8 anchored blocks per sample" in card
    assert "row weights exp(-(k-1)/3.0)" in card and "AdamW lr 0.0005;" in card
    assert "soft CE vs the target's top-32 distribution at temperature 0.5," in card
    state = json.loads((out / "state.json").read_text())
    assert {"regen", "train-eagle4", "train-dspark"} <= set(state["seconds"])


def test_pool_rows_are_formatted_as_the_benchmarks_format_theirs(tmp_path):
    from specbench.dataset import chat_messages, load_rows
    from specbench.runners.reference.train_cli import pool_chat

    p = pool(tmp_path)
    (tmp_path / "system_prompts.json").write_text(json.dumps({"image-to-image": "I2I", "general": "GEN"}))
    chat = pool_chat(p)
    row = {"id": "x", "category": "image-to-image", "prompt": "make it snow", "image_caption": "a red barn"}
    assert chat(row) == [{"role": "system", "content": "I2I"},
                         {"role": "user", "content": "user_prompt: make it snow\nimage_caption: a red barn"}]
    assert chat({"id": "y", "category": "math", "prompt": "2+2?"})[0]["content"] == "GEN"
    # the bundled pool gets the bundled system prompts, as a bundled benchmark row of the same category does
    bench = load_rows("prompt-enhancement", categories=["text-to-video"], limit=1)[0]
    bundled = pool_chat(ROOT / "data" / "train-pool.jsonl")
    got = bundled({"id": "z", "category": "text-to-video", "prompt": bench.prompt})
    assert got == chat_messages(bench)


def test_unknown_drafter_kind_is_one_clear_line(tmp_path):
    res = runner.invoke(app, ["train", "--drafter", "medusa", "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecbenchError)         # main() prints it as one line, exit 2
    assert str(res.exception) == "--drafter 'medusa': choose one of eagle4, dflash, dspark"


def test_unknown_regeneration_method_is_one_clear_line(tmp_path):
    res = runner.invoke(app, ["train", "--regen-method", "beam", "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecbenchError)
    assert str(res.exception) == "--regen-method 'beam': choose one of ngram, eagle4-harness, vanilla"


def test_eagle4_options_are_refused_for_block_drafters(tmp_path):
    for flag, value in (("--mlp-width", "3072"), ("--feature-noise", "0.05")):
        res = runner.invoke(app, ["train", "--drafter", "dflash", flag, value, "--out", str(tmp_path)])
        assert isinstance(res.exception, SpecbenchError)
        assert str(res.exception) == f"{flag}: only for --drafter eagle4, not dflash"


def test_block_options_are_refused_for_eagle4(tmp_path):
    for flag, value in (("--anchors", "64"), ("--gamma", "3")):
        res = runner.invoke(app, ["train", "--drafter", "eagle4", flag, value, "--out", str(tmp_path)])
        assert isinstance(res.exception, SpecbenchError)
        assert str(res.exception).startswith(f"{flag}: only for --drafter dflash or dspark")


def test_init_from_must_be_a_drafter_of_a_kind_that_can_start_this_one(tmp_path):
    bundled = ROOT / "reference_eagle4" / "drafters"
    res = runner.invoke(app, ["train", "--drafter", "eagle4", "--init-from", str(bundled / "smollm2-135m-dflash"),
                              "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecbenchError)
    assert str(res.exception).endswith("a dflash drafter; --drafter eagle4 starts from eagle4")
    res = runner.invoke(app, ["train", "--drafter", "dspark", "--init-from", str(tmp_path), "--out", str(tmp_path)])
    assert "needs a drafter folder" in str(res.exception)


def test_train_data_generates_greedy_and_sampled_responses_and_resumes_with_features(tiny_target, tmp_path):
    from reference_eagle4.training.store import FeatureStore, TokenStore

    p, out = pool(tmp_path / "pool"), tmp_path / "data"
    gen = ["train-data", "generate", "--target", str(tiny_target), "--pool", str(p), "--out", str(out),
           "--samples", "2", "--temperatures", "0.8", "--concurrency", "4", "--max-new-tokens", "6",
           "--threads", "1", "--device", "cpu"]
    res = runner.invoke(app, [*gen, "--tokens", "20"])
    assert res.exit_code == 0, res.output
    first = TokenStore(out / "tokens")
    assert 20 <= first.response_tokens < 5 * 3 * 6 and {e["temperature"] for e in first.entries} == {0.0}
    res = runner.invoke(app, [*gen, "--tokens", "1000"])        # a later call appends the rest of the plan
    assert res.exit_code == 0, res.output
    store = TokenStore(out / "tokens")
    assert store.entries[: len(first)] == first.entries
    keys = sorted(e["key"] for e in store.entries)
    assert keys == sorted(f"p{i}#{tag}" for i in range(5) for tag in ("g", "s1", "s2"))
    assert {e["temperature"] for e in store.entries} == {0.0, 0.8}
    feat = ["train-data", "features", "--target", str(tiny_target), "--out", str(out), "--batch", "3",
            "--shard", "4", "--threads", "1", "--device", "cpu"]
    res = runner.invoke(app, feat)
    assert res.exit_code == 0, res.output
    samples = FeatureStore(out / "features").samples()
    assert len(samples) == sum(e["n_out"] > 0 for e in store.entries)
    assert len(list((out / "features").glob("shard-?????"))) == -(-len(samples) // 4)
    res = runner.invoke(app, feat)                            # nothing left to compute: nothing rewritten
    assert res.exit_code == 0 and "0 to compute" in (out / "features.log").read_text().splitlines()[-1]
    res = runner.invoke(app, ["train", "--target", str(tiny_target), "--data", str(out), "--pool", str(p), "--out",
                              str(tmp_path / "train"), "--epochs", "1", "--curve", "5,10", "--threads", "1"])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "train" / "eagle4" / "drafter" / "README.md").read_text()
    assert "| learning curve (greedy step-0 agreement; seen = greedy training responses already read) |" in card
    info = json.loads((tmp_path / "train" / "eagle4" / "drafter" / "config.json").read_text())["training"]
    assert [p["at"] for p in info["curve"]] == [5, 10] and info["tokens_read"] >= 10
    assert f"{info['steps']} steps ({info['tokens_read']:,} response tokens read)" in card   # not "0 full epochs"
    res = runner.invoke(app, ["train", "--drafter", "dflash", "--target", str(tiny_target), "--data", str(out),
                              "--out", str(tmp_path / "train"), "--steps", "2", "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert "greedy + sampled" in (tmp_path / "train" / "dflash" / "drafter" / "README.md").read_text()
    tokens = sum(e["n_out"] for e in store.entries)
    assert f"{len(samples)} responses to 5 prompts of `pool.jsonl` (`{out}`)" in card
    assert f"{tokens} response tokens" in card
    assert "greedy + sampled (specbench train-data)" in card
    # tools/drafter_fit.py needs held-out greedy responses: this pool holds none out, and it says so in one line
    fit = subprocess.run([sys.executable, str(ROOT / "tools" / "drafter_fit.py"), "--drafter",
                          str(tmp_path / "train" / "eagle4" / "drafter"), "--data", str(out), "--target",
                          str(tiny_target)], capture_output=True, text=True)
    assert fit.returncode == 1 and fit.stderr.strip().splitlines() == [
        f"drafter_fit: --data {out}: no greedy held-out responses"]
    fit = subprocess.run([sys.executable, str(ROOT / "tools" / "drafter_fit.py"), "--drafter",
                          str(tmp_path / "train" / "eagle4" / "drafter"), "--data", str(out), "--against",
                          str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert fit.returncode == 1 and fit.stderr.strip().splitlines() == [
        f"drafter_fit: --against: {tmp_path / 'nowhere' / 'config.json'} does not exist"]


def test_ctrl_c_in_train_data_generate_keeps_every_finished_response_and_says_how_to_go_on(tiny_target, tmp_path,
                                                                                          monkeypatch):
    from reference_eagle4.training.store import TokenStore

    p, out = pool(tmp_path / "pool"), tmp_path / "data"
    gen = ["train-data", "generate", "--target", str(tiny_target), "--pool", str(p), "--out", str(out),
           "--samples", "0", "--concurrency", "2", "--max-new-tokens", "4", "--threads", "1", "--device", "cpu"]
    append = TokenStore.append

    def append_then_interrupt(self, *args, **kwargs):
        append(self, *args, **kwargs)
        if len(self) == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(TokenStore, "append", append_then_interrupt)
        res = runner.invoke(app, gen)
    assert res.exit_code != 0
    assert len(TokenStore(out / "tokens")) == 2
    last = (out / "generate.log").read_text().splitlines()[-1]
    assert "generate: interrupted (the same command goes on from here) with " in last and "2 records" in last
    res = runner.invoke(app, gen)
    assert res.exit_code == 0, res.output
    assert sorted(e["key"] for e in TokenStore(out / "tokens").entries) == [f"p{i}#g" for i in range(5)]


def test_drafter_fit_tells_a_one_point_gain_from_noise():
    fit = tool("drafter_fit")
    base = [{"acc0": 0.4 + 0.01 * (i % 7), "acc1": 0.3, "loss0": 2.0} for i in range(90)]
    better = [{**r, "acc0": r["acc0"] + 0.01} for r in base]
    noisy = [{**r, "acc0": r["acc0"] + (0.05 if i % 2 else -0.05)} for i, r in enumerate(base)]
    d = fit.paired(better, base)
    assert set(d) == {"acc0", "acc1"}                  # agreement only, not losses
    assert d["acc0"] == [0.01, 0.01, 0.01] and d["acc1"] == [0.0, 0.0, 0.0]
    mean, lo, hi = fit.paired(noisy, base)["acc0"]
    assert lo < 0 < hi and abs(mean) < 0.01           # a spread of +-0.05 a response: no difference shown


def test_lowrank_head_tool_reads_a_train_data_folder_and_names_the_flag_when_there_is_no_store(tmp_path):
    lowrank = tool("lowrank_head")
    (tmp_path / "data" / "features").mkdir(parents=True)
    (tmp_path / "data" / "features" / "meta.json").write_text("{}")
    ap = lowrank.argparse.ArgumentParser()
    assert lowrank.store_folder(ap, tmp_path / "data", "--features") == tmp_path / "data" / "features"
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "lowrank_head.py"), "--features", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].endswith(f"--features {tmp_path}: no feature store there (run "
                                                       f"`specbench train-data features --out {tmp_path}` first)")


def test_train_data_bad_input_is_one_clear_line(tmp_path):
    res = runner.invoke(app, ["train-data", "generate", "--temperatures", "hot", "--out", str(tmp_path)])
    assert str(res.exception) == "--temperatures 'hot': comma-separated numbers, e.g. 0.7,0.85,1.0"
    res = runner.invoke(app, ["train-data", "generate", "--method", "beam", "--out", str(tmp_path)])
    assert str(res.exception) == "--method 'beam': choose one of ngram, eagle4-harness, vanilla"
    res = runner.invoke(app, ["train-data", "features", "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecbenchError) and "no token store" in str(res.exception)
    res = runner.invoke(app, ["train", "--curve", "5k", "--out", str(tmp_path)])
    assert str(res.exception) == "--curve '5k': comma-separated token counts, e.g. 120000,500000"
    res = runner.invoke(app, ["train", "--data", str(tmp_path), "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecbenchError) and "no feature store" in str(res.exception)


def test_a_device_it_cannot_use_is_one_clear_line_on_every_training_command(tmp_path):
    commands = (["train"], ["train-data", "generate"], ["train-data", "features"])
    for command in commands:
        res = runner.invoke(app, [*command, "--device", "gpu", "--out", str(tmp_path)])
        assert isinstance(res.exception, SpecbenchError), (command, res.output)
        assert str(res.exception) == "--device 'gpu': choose auto, cpu, cuda or cuda:N"
        res = runner.invoke(app, [*command, "--device", "cuda:99", "--out", str(tmp_path)])
        assert isinstance(res.exception, SpecbenchError) and str(res.exception).startswith("--device 'cuda:99': ")
        assert "\n" not in str(res.exception)
    assert not list(tmp_path.iterdir())              # refused before anything was written


def test_recycled_prompts_come_from_greedy_creative_training_responses_cut_to_a_short_request(tmp_path):
    from reference_eagle4.training.store import TokenStore, held_out

    rc = tool("recycled_prompts")
    assert rc.request("A mountain goat balances on a ledge. The wind howls.") == "a mountain goat balances on a ledge"
    assert rc.request("Sure thing!") is None                         # too short to be a request
    assert rc.request(" ".join(["word"] * 20) + ".") == " ".join(["word"] * 12)
    held = next(f"h{i}" for i in range(1000) if held_out(f"h{i}", 0.05))
    texts = {1: "A red kite over a beach at dawn.", 2: "A red kite over a beach at dawn!",
             3: "A quiet harbour at night.", 4: "An old barn in the snow, seen from the road.", 5: "A cat on a sofa in warm light.",
             6: "A lighthouse in a storm, waves breaking."}
    store = TokenStore(tmp_path / "tokens", vocab_size=16)
    for key, pid, cat, out in (("t1#g", "t1", "text-to-video", 1), ("t2#g", "t2", "text-to-image", 2),
                               ("t3#s0", "t3", "text-to-video", 3), (f"{held}#g", held, "text-to-image", 4),
                               ("t5#g", "t5", "image-to-image", 5), ("t6#g", "t6", "text-to-image", 6)):
        store.append(key, [0, 0], [out], id=pid, category=cat)
    rows = rc.recycle(store, lambda ids: texts[ids[0]], limit=10)
    # the sampled response, the held-out row and the image row stay out; the same request is kept once
    assert sorted(r["prompt"] for r in rows) == ["a lighthouse in a storm, waves breaking",
                                                 "a red kite over a beach at dawn"]
    assert {r["origin"] for r in rows} == {"recycled"} and all(r["turns"] == [r["prompt"]] for r in rows)
    assert len(rc.recycle(store, lambda ids: texts[ids[0]], limit=1)) == 1
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "recycled_prompts.py"), "--data", str(tmp_path / "none"),
                          "--out", str(tmp_path / "r.jsonl")], capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (f"recycled_prompts: --data {tmp_path / 'none'}: no token store there (run "
                                  f"`specbench train-data generate --out {tmp_path / 'none'}` first)")
