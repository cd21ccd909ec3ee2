"""What `make run` installs (requirements-local.txt, requirements-embedder.txt and the package) holds none of
the test and lint tools, directly or through a dependency of a dependency: the whole closure is resolved
from the installed distributions' own metadata."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
RUN_FILES = ("requirements-local.txt", "requirements-embedder.txt")
TEST_TOOLS = {
    "pytest",
    "playwright",
    "schemathesis",
    "mypy",
    "ruff",
    "moto",
    "hypothesis",
    "mongomock",
    "xenon",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> list[Requirement]:
    out: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out += listed(path.parent / line[3:].strip())
        elif line:
            out.append(Requirement(line))
    return out


def closure(roots: list[Requirement]) -> set[str]:
    """Every distribution these need, following each one's Requires-Dist (its extras as asked)."""
    seen: set[str] = set()
    todo = [(canonical(r.name), set(r.extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for raw in metadata.requires(name) or []:
            need = Requirement(raw)
            if need.marker is None or any(need.marker.evaluate({"extra": e}) for e in extras or {""}):
                todo.append((canonical(need.name), set(need.extras)))
    return seen


def test_make_run_installs_no_test_or_lint_tool():
    roots = [r for f in RUN_FILES for r in listed(ROOT / f)] + [Requirement("engram-recall")]
    needed = closure(roots)
    assert "fastapi" in needed and "torch" in needed and "engram-recall" in needed  # the closure is real
    assert needed & TEST_TOOLS == set()


def test_the_makefile_s_run_target_installs_only_the_runtime():
    makefile = (ROOT / "Makefile").read_text()
    run_rule = makefile[makefile.index("$(RUN_STAMP):") :].split("\n\n", 1)[0]
    assert "requirements-dev.txt" not in run_rule
    assert re.search(r"^run: \$\(RUN_STAMP\) ", makefile, re.M)
