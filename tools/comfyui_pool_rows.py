"""Training-pool rows from the prompts in ComfyUI's workflow templates (wheel `comfyui-workflow-templates-json`, MIT).

The templates are ComfyUI's published example workflows; their prompt nodes hold prompts written by the
workflow authors for real text-to-image and video models: the kinds of request a prompt enhancer receives.
The wheel's `index.json` files each template under a group with a media type and gives it tags. This tool keeps
the prompts of the image and video groups' templates, as text-to-image rows, or text-to-video rows where a tag
names video (image-to-video and first/last-frame templates included: their prompts describe the whole scene).
Templates that edit, extend, relight or restyle a given picture or clip are skipped (`NEEDS_AN_INPUT`): the
pool's image rows need the picture's caption, and a workflow carries only an image file.

A prompt is a string widget of a node that is not a note, loader, saver or preview and not titled "negative",
with at least four words and mostly letters, that names no input ("image 1", "@image", "the input image") and
reads as no negative prompt ("worst quality", "blurry", ...); 200 words at most. Rows get origin `package`,
source_dataset `comfyui-workflow-templates`, license `mit`, and ids after the pool's last (prompts the pool holds
already are left out); tools/train_pool.py cleans them into the pool (near-copies of benchmark rows and of each
other out).

    pip download --no-deps comfyui-workflow-templates-json==0.1.123 -d /tmp/wheels
    .venv/bin/python tools/comfyui_pool_rows.py /tmp/wheels/comfyui_workflow_templates_json-0.1.123-py3-none-any.whl \\
        --out /tmp/comfyui-rows.jsonl
    .venv/bin/python tools/train_pool.py clean data/train-pool.jsonl /tmp/comfyui-rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from specbench import exporters
from specbench.dataset import Row

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_pool  # noqa: E402

SOURCE, LICENSE = "comfyui-workflow-templates", "mit"
TEMPLATES = "comfyui_workflow_templates_json/templates/"
NOT_A_PROMPT_NODE = re.compile(r"note|markdown|save|load|preview", re.IGNORECASE)
NEGATIVE = re.compile(r"worst quality|low quality|bad anatomy|blurry|deformed|watermark|jpeg artifacts|\bugly\b|"
                      r"低质量|过曝", re.IGNORECASE)
NAMES_AN_INPUT = re.compile(r"\bimage ?\d\b|@image|\bimage_\d|\b(input|reference|provided|uploaded|given|start|first|"
                            r"last|end|attached|this) (image|frame|photo|video|picture|character|subject)\b|"
                            r"\bthe (video|clip)\b", re.IGNORECASE)
MAX_WORDS = 200
# Tags of templates that edit, extend or restyle a given picture or clip, or make no picture: their prompts
# only make sense with that input (which a pool row cannot carry) or are not prompts for an image model.
NEEDS_AN_INPUT = {"Image Edit", "Video Edit", "Inpainting", "Outpainting", "Relight", "Remove Background",
                  "Virtual Try-On", "Layer Decompose", "Character Replacement", "Style Transfer", "Image Upscale",
                  "Video Upscale", "Video Extend", "Video to Video", "Motion Control", "Lip Sync", "Audio to Video",
                  "Albedo Estimation", "Depth Estimation", "Normal Estimation", "Element Segmentation",
                  "Frame Interpolation", "Text Generation", "LLM"}


def category(group: str, tags: list[str]) -> str | None:
    """The pool category a template's prompts enter as, from its group's media type and its tags in the wheel's
    index (None: a template whose prompts need an input the pool cannot carry, or make no image or video)."""
    if group not in ("image", "video") or NEEDS_AN_INPUT.intersection(tags):
        return None
    return "text-to-video" if group == "video" or any("Video" in tag or tag == "FLF2V" for tag in tags) \
        else "text-to-image"


def strings(node: Any) -> Iterator[str]:
    """Every string widget value under `node` (subgraphs included), outside note/loader/saver/negative nodes."""
    if isinstance(node, dict):
        kind, title = str(node.get("type", "")), str(node.get("title") or "")
        widgets = node.get("widgets_values")
        if not NOT_A_PROMPT_NODE.search(kind) and "negative" not in title.lower():
            values = widgets.values() if isinstance(widgets, dict) else widgets if isinstance(widgets, list) else []
            yield from (v for v in values if isinstance(v, str))
        for key, value in node.items():
            if key != "widgets_values":
                yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def is_prompt(text: str) -> bool:
    words = re.findall(r"[^\W\d_]{2,}", text)
    letters = sum(ch.isalpha() for ch in text)
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    named = len(words) >= 4 and len(text.split()) >= 3 or cjk >= 8       # not a model id or a file name
    return (named and letters >= 0.6 * len(text.replace(" ", "")) and len(text.split()) <= MAX_WORDS
            and not text.startswith(("http", "#", "{", "[", "<", "You are"))
            and not re.search(r"\.(safetensors|ckpt|png|jpe?g|webp|mp4|gguf)\b", text)
            and not NEGATIVE.search(text) and not NAMES_AN_INPUT.search(text))


def prompts(wheel: Path) -> list[tuple[str, str, str]]:
    """(template, category, prompt) for every distinct prompt the kept templates hold, in template-name order."""
    with zipfile.ZipFile(wheel) as archive:
        index = json.loads(archive.read(TEMPLATES + "index.json"))
        kinds = {t["name"]: category(group.get("type", ""), t.get("tags", []))
                 for group in index for t in group["templates"]}
        members = set(archive.namelist())
        found: dict[str, tuple[str, str, str]] = {}
        for name in sorted(kinds):
            kind = kinds[name]
            member = f"{TEMPLATES}{name}.json"
            if kind is None or member not in members:
                continue
            for text in strings(json.loads(archive.read(member))):
                text = text.strip()
                if is_prompt(text) and text not in found:
                    found[text] = (name, kind, text)
    return list(found.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, help="the comfyui-workflow-templates-json wheel")
    parser.add_argument("--out", type=Path, required=True, help="where to write the pool rows (JSONL)")
    args = parser.parse_args()
    if not args.wheel.is_file():
        parser.error(f"no such wheel: {args.wheel}")
    pool = train_pool.read_rows(train_pool.POOL)
    first = train_pool.next_id(pool)
    taken = {row["prompt"] for row in pool}
    found = [p for p in prompts(args.wheel) if p[2] not in taken]
    rows = [Row(f"tp-{first + i:05d}", kind, SOURCE, text, [text], license=LICENSE, origin="package")
            for i, (_, kind, text) in enumerate(found)]
    exporters.write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} pool rows to {args.out}: {dict(sorted(Counter(r.category for r in rows).items()))}")


if __name__ == "__main__":
    main()
