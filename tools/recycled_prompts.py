"""Pool rows whose requests are the target's own scene descriptions, cut to a user's short request.

The drafters have read every real image and video prompt this project may ship. A request recycled from what the
target wrote for a training prompt ("a mountain goat balancing on a cliff ledge") is another distinct request in
the same domain, and the target's answer to it another response to learn from. Only greedy responses to pool rows
the trainer does not hold out are used, so held-out figures stay clean. The rows are a probe, not pool rows: run
`tools/train_pool.py`'s near-copy check before adding any to `data/train-pool.jsonl`.

    .venv/bin/python tools/recycled_prompts.py --data runs/train-data --out runs/recycled.jsonl --limit 160
    .venv/bin/specbench train-data generate --pool runs/recycled.jsonl --out runs/recycled-probe --samples 0
    .venv/bin/specbench train-data features --out runs/recycled-probe
    .venv/bin/python tools/drafter_fit.py --data runs/recycled-probe --rows 1000

drafter_fit's "training" figure is then the drafter's agreement on responses it never read, to be set beside its
held-out figure on the real store (`--category text-to-video --category text-to-image`, the categories recycled).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reference_eagle4.training.store import TokenStore, held_out, is_sampled  # noqa: E402
from reference_eagle4.training.train import TrainConfig  # noqa: E402

CATEGORIES = ("text-to-video", "text-to-image")     # image rows would need a picture's caption too
SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


def request(response: str, words: int = 12, least: int = 4) -> str | None:
    """A response's first sentence as a user would type it: its first `words` words, lower case, no closing
    punctuation; None when that sentence is shorter than `least` words."""
    first = SENTENCE_END.split(response.strip(), maxsplit=1)[0].split()
    if len(first) < least:
        return None
    return " ".join(first[:words]).rstrip(".,;:!?\"'").lower()


def recycle(store: TokenStore, decode: Callable[[list[int]], str], limit: int, seed: int = 0,
            categories: tuple[str, ...] = CATEGORIES) -> list[dict[str, Any]]:
    """Up to `limit` distinct requests from the store's greedy responses to training rows of `categories`, in a
    seeded order, as rows of the pool's schema (`origin: recycled`, `source_dataset` the response's pool row)."""
    frac = TrainConfig.eval_frac
    picks = [i for i, e in enumerate(store.entries) if not is_sampled(e["key"])
             and e.get("category") in categories and not held_out(e.get("id", e["key"]), frac)]
    random.Random(seed).shuffle(picks)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i in picks:
        if len(rows) == limit:
            break
        e = store.entries[i]
        text = request(decode(store.tokens(i)[e["prompt_len"]:].tolist()))
        if text is None or text in seen:
            continue
        seen.add(text)
        rows.append({"question_id": f"rc-{len(rows) + 1:05d}", "category": e["category"],
                     "source_dataset": f"recycled:{e.get('id', e['key'])}", "prompt": text, "turns": [text],
                     "system_prompt_id": None, "image": None, "image_caption": None, "reference": None,
                     "origin": "recycled"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", type=Path, default=Path("runs/train-data"), help="a `specbench train-data` folder")
    ap.add_argument("--out", type=Path, required=True, help="the JSONL of pool-schema rows to write")
    ap.add_argument("--limit", type=int, default=160, help="rows at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="smollm2-135m", help="whose tokenizer decodes the store")
    a = ap.parse_args()
    if not (a.data / "tokens" / "meta.json").exists():
        sys.exit(f"recycled_prompts: --data {a.data}: no token store there (run `specbench train-data generate "
                 f"--out {a.data}` first)")
    if a.limit < 1:
        sys.exit(f"recycled_prompts: --limit {a.limit}: must be at least 1")
    from transformers import AutoTokenizer

    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        tok = AutoTokenizer.from_pretrained(resolve_target(a.target))
    except WeightsError as e:
        sys.exit(f"recycled_prompts: --target: {e}")
    rows = recycle(TokenStore(a.data / "tokens"), lambda ids: tok.decode(ids, skip_special_tokens=True),
                   a.limit, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"recycled_prompts: {len(rows)} rows -> {a.out}")


if __name__ == "__main__":
    main()
