"""Every make target works on a fresh clone: a target that writes into a directory git does not keep makes
it first (bench-results/ is ignored, so a fresh clone has none: `tee` into it failed)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rules() -> dict[str, str]:
    """Each target's recipe (its lines after the `target:` line, up to the next blank line)."""
    text = (ROOT / "Makefile").read_text()
    out: dict[str, str] = {}
    for block in text.split("\n\n"):
        for match in re.finditer(r"^([a-z][\w-]*):[^=\n]*\n((?:\t.*\n?)*)", block, re.M):
            out[match.group(1)] = match.group(2)
    return out


def ignored_dirs() -> list[str]:
    return [
        line.strip().rstrip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.endswith("/")
    ]


def test_a_recipe_that_writes_into_an_ignored_directory_makes_it_first():
    recipes = rules()
    assert {"bench-scale", "bench-maintenance", "run", "test"} <= set(recipes)
    for target, recipe in recipes.items():
        for directory in ignored_dirs():
            writes = re.search(rf"(tee|>)\s+{re.escape(directory)}/", recipe)
            if writes:
                made = re.search(rf"mkdir -p [^\n]*\b{re.escape(directory)}\b", recipe)
                assert made and made.start() < writes.start(), f"make {target} writes into {directory}/ first"
