"""The house's shape, checked: what xenon cannot see. xenon (and radon's default view) skips a function
defined inside another, so a 108-line closure at E (38) passed the gate for a wave; this walks every block,
closures and methods' closures included, and checks the limits `[tool.engram.house]` in pyproject.toml
names:

- no block worse than `max-rank`, no nested function worse than `max-nested-rank`;
- at most `max-c-blocks` blocks at C in the package (a ratchet: lower it as blocks are simplified);
- no module under `min-mi-rank` on radon's maintainability index;
- no module over `max-module-lines` lines, no class over `max-class-methods` methods.

A module or class that is over a limit today is named under `[tool.engram.house.known]` with why; the list
may only shrink. `python -m infra.house` prints every finding and exits 1 on any (make lint runs it)."""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import cc_rank, cc_visit
from radon.metrics import mi_rank, mi_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "layers/engram/engram"
TREES = ("layers", "functions", "infra")
SKIP = ("node_modules", ".aws-sam")


@dataclass(frozen=True)
class Block:
    """One function, method or closure with its complexity."""

    path: str
    name: str
    line: int
    complexity: int
    nested: bool

    @property
    def rank(self) -> str:
        return str(cc_rank(self.complexity))


@dataclass(frozen=True)
class Limits:
    max_rank: str
    max_nested_rank: str
    max_c_blocks: int
    min_mi_rank: str
    max_module_lines: int
    max_class_methods: int
    known: dict[str, str]

    @classmethod
    def from_pyproject(cls, path: Path = ROOT / "pyproject.toml") -> Limits:
        table = tomllib.loads(path.read_text())["tool"]["engram"]["house"]
        return cls(
            max_rank=table["max-rank"],
            max_nested_rank=table["max-nested-rank"],
            max_c_blocks=int(table["max-c-blocks"]),
            min_mi_rank=table["min-mi-rank"],
            max_module_lines=int(table["max-module-lines"]),
            max_class_methods=int(table["max-class-methods"]),
            known=dict(table.get("known", {})),
        )


def _functions(path: str, node: Function, prefix: str, nested: bool) -> Iterator[Block]:
    name = f"{prefix}{node.name}"
    yield Block(path, name, node.lineno, node.complexity, nested)
    for closure in node.closures:
        yield from _functions(path, closure, f"{name}.", True)


def blocks(path: str, source: str) -> Iterator[Block]:
    """Every block of a module: functions, methods, and the functions defined inside either."""
    for node in cc_visit(source):
        if isinstance(node, Class):
            for method in node.methods:
                yield from _functions(path, method, f"{node.name}.", False)
            for inner in node.inner_classes:
                for method in inner.methods:
                    yield from _functions(path, method, f"{node.name}.{inner.name}.", False)
        elif not node.is_method:  # radon lists a class's methods again on their own: counted once
            yield from _functions(path, node, "", False)


def class_sizes(source: str) -> Iterator[tuple[str, int]]:
    """(class name, how many methods it defines) for every class of a module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            yield node.name, len(methods)


def sources() -> Iterator[tuple[str, str]]:
    for tree in TREES:
        for file in sorted((ROOT / tree).rglob("*.py")):
            relative = file.relative_to(ROOT).as_posix()
            if not any(part in SKIP for part in file.parts):
                yield relative, file.read_text()


def _module_findings(limits: Limits, path: str, source: str) -> Iterator[tuple[str, str]]:
    """(what is over a limit, its name under `known`) for one module of the package."""
    lines = source.count("\n")
    if lines > limits.max_module_lines:
        yield f"{path} has {lines} lines (at most {limits.max_module_lines})", path
    mi = mi_visit(source, multi=True)
    if mi_rank(mi) > limits.min_mi_rank:
        yield f"{path} is {mi_rank(mi)} ({mi:.2f}) on the maintainability index", path
    for name, methods in class_sizes(source):
        if methods > limits.max_class_methods:
            yield (
                f"{path}::{name} has {methods} methods (at most {limits.max_class_methods})",
                f"{path}::{name}",
            )


def findings(limits: Limits) -> tuple[list[str], dict[str, int]]:
    """What breaks a limit, and the counts the ratchets read."""
    out: list[str] = []
    c_blocks = 0
    over: set[str] = set()
    for path, source in sources():
        in_package = path.startswith(PACKAGE)
        for block in blocks(path, source):
            worst = limits.max_nested_rank if block.nested else limits.max_rank
            if block.rank > worst:
                kind = "nested function" if block.nested else "block"
                out.append(f"{path}:{block.line} {kind} {block.name} is {block.rank} ({block.complexity})")
            if in_package and block.rank == "C":
                c_blocks += 1
        if in_package:
            for finding, name in _module_findings(limits, path, source):
                over.add(name)
                if name not in limits.known:
                    out.append(finding)
    # the known list only shrinks: an entry no longer over any limit must go
    out += [
        f"{name} is no longer over a limit: take it out of known" for name in limits.known if name not in over
    ]
    if c_blocks > limits.max_c_blocks:
        out.append(f"{c_blocks} blocks of the package are at C (at most {limits.max_c_blocks})")
    return out, {"c_blocks": c_blocks}


def main() -> int:
    limits = Limits.from_pyproject()
    found, counts = findings(limits)
    for line in found:
        print(line)
    print(
        f"house: {counts['c_blocks']} blocks at C in the package (limit {limits.max_c_blocks}); "
        f"{len(limits.known)} modules or classes named over a limit; {len(found)} findings"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
