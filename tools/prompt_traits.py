"""Measure the real-traffic traits of the bundled prompt sets' creative rows, as the dataset card states them.

Traits: an emoji, a language other than English (a non-Latin script, or function words of Spanish, French,
Portuguese, German or Italian), parameter syntax (`--ar 16:9`, `::2`, `(word:1.2)`, `strength 0.6`,
`negative:`), and the spread of lengths in words. Misspellings are not measured here (no dictionary ships with
the project); the card counts the rows written with them.

    .venv/bin/python tools/prompt_traits.py          # the card's table, by category and origin
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict

EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B50\u2B55\u2190-\u21FF]")
NON_LATIN = re.compile(r"[\u0400-\u04FF\u0590-\u06FF\u0900-\u097F\u3040-\u30FF\u3400-\u9FFF\uAC00-\uD7AF]")
# Function words of Spanish, French, Portuguese, German and Italian: two of them, a tenth of a prompt's words or
# more, mark it as not English. Words English also uses ("die", "den", "per") are left out.
FOREIGN_WORDS = frozenset(
    "el la los las que una un por para muy del en al "
    "les des une est dans pour avec comme qui sur du "
    "uma com não na da dos em sem de "
    "der das und mit ein eine im zu auf nicht einem "
    "il gli della che con molto".split()
)
PARAMETERS = re.compile(r"--[a-z]+|::\d|\([^()]+:\d(\.\d+)?\)|\bstrength \d|\bdenoise \d|\bnegative:", re.IGNORECASE)


def non_english(text: str) -> bool:
    words = re.findall(r"[\w'éèêáàâãçíóôõúüäöß]+", text.lower())
    foreign = sum(word in FOREIGN_WORDS for word in words)
    return bool(NON_LATIN.search(text)) or (foreign >= 2 and foreign >= 0.1 * len(words))


def traits(prompt: str) -> set[str]:
    found = set()
    if EMOJI.search(prompt):
        found.add("emoji")
    if non_english(prompt):
        found.add("non-English")
    if PARAMETERS.search(prompt):
        found.add("parameter syntax")
    return found


def words(prompt: str) -> int:
    """Length in words; a CJK prompt counts its characters, since it has no spaces."""
    cjk = len(re.findall(r"[\u3040-\u30FF\u3400-\u9FFF\uAC00-\uD7AF]", prompt))
    return len(prompt.split()) + cjk


def table(rows: list[dict]) -> list[str]:
    """Markdown rows: group, rows, each trait's count, and the words' min / median / max."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[f"{row['category']} ({row['origin']})"].append(row)
    lines = ["| rows | n | emoji | non-English | parameter syntax | words min / median / max |", "|---|---|---|---|---|---|"]
    for group, members in sorted(groups.items()):
        found = [traits(row["prompt"]) for row in members]
        lengths = [words(row["prompt"]) for row in members]
        counts = [sum(trait in f for f in found) for trait in ("emoji", "non-English", "parameter syntax")]
        lines.append(f"| {group} | {len(members)} | " + " | ".join(map(str, counts))
                     + f" | {min(lengths)} / {statistics.median(lengths):g} / {max(lengths)} |")
    return lines


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.path.insert(0, ".")
    from specbench.dataset import load_rows

    print("\n".join(table([row.to_dict() for row in load_rows("prompt-enhancement")])))


if __name__ == "__main__":
    main()
