"""The package's layers, read from its imports: no import circle (imports inside functions included: a
circle broken by a late import is still a circle), no front door importing an adapter, and the settings and
the domain model importing neither. What still crosses a line is named below with why; the lists only
shrink."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "layers" / "engram"
DOORS = ("engram.api", "engram.proxy", "engram.discord")
ADAPTERS = ("engram.store", "engram.vectors.edge", "engram.vectors.server", "engram.embedders")
CORE = ("engram.config", "engram.domain", "engram.bookkeeping", "engram.ports", "engram.clock")

# (importer, imported package or module): why it is still allowed
KNOWN: dict[tuple[str, str], str] = {}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "engram").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules this one imports, anywhere in it but under `if TYPE_CHECKING:`."""
    package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if package else name.split(".")[:-1]
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                target = f"{module}.{alias.name}"
                found.add(target if target in known else module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def _under(module: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def crossings(edges: dict[str, set[str]], importers: tuple[str, ...], imported: tuple[str, ...]) -> set:
    out = set()
    for name, targets in edges.items():
        if _under(name, importers) is None:
            continue
        for target in targets:
            package = _under(target, imported)
            # a package importing its own parts is not a crossing (engram.vectors builds its adapters)
            if package is not None and not target.startswith(name + "."):
                out.add((name, package))
    return out


def test_the_finder_sees_a_circle_made_by_a_late_import():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_imports_itself_round_a_circle():
    assert circles(graph()) == []


def test_no_front_door_imports_an_adapter_they_go_through_the_rules_and_the_ports():
    found = crossings(graph(), DOORS, ADAPTERS)
    assert found - set(KNOWN) == set()


def test_the_settings_and_the_domain_model_import_no_door_and_no_adapter():
    found = crossings(graph(), CORE, DOORS + ADAPTERS)
    assert found - set(KNOWN) == set()


def test_every_named_exception_is_still_needed_and_says_why():
    edges = graph()
    found = crossings(edges, DOORS, ADAPTERS) | crossings(edges, CORE, DOORS + ADAPTERS)
    assert set(KNOWN) <= found, set(KNOWN) - found  # one no longer crossing: take it off the list
    assert all(why.strip() for why in KNOWN.values())


# The layers, top to bottom (docs/development.md): a module imports only its own layer and those below. The
# adapters implement the ports: they sit right above the ports and values, which import nothing above
# them (the doors may not import an adapter at all: the test above).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("wiring", ("engram.engine", "engram.proxy.runtime", "engram.discord.runtime", "engram.singleton")),
    (
        "doors",
        (
            "engram.api",
            "engram.proxy",
            "engram.discord",
            "engram.worker",
            "engram.upkeep",
            "engram.client",  # a client of the Memory API over HTTP, and the command line on it
            "engram.cli",
        ),
    ),
    (
        "rules",
        (
            "engram.service",
            "engram.writes",
            "engram.contexts",
            "engram.reads",
            "engram.forgetting",
            "engram.lifecycle",
            "engram.embedding",
            "engram.follow_on",
            "engram.access_keys",
        ),
    ),
    ("rules", ("engram.engine_parts",)),
    ("rules", ("engram.portability",)),
    ("indexing", ("engram.indexing", "engram.line_windows", "engram.keeper")),
    (
        "ports and values",
        (
            "engram.ports",
            "engram.parts",
            "engram.line_spans",
            "engram.record",
            "engram.bookkeeping",
            "engram.domain",
            "engram.jobs",
            "engram.retrieval",
            "engram.names",
            "engram.replies",
            "engram.when",
            "engram.relevance",
            "engram.words",
            "engram.vectors",
            "engram.shapes",
            "engram.text",
            "engram.errors",
            "engram.clock",
            "engram.config",
            "engram.observability",
            "engram.breaker",
            "engram.keys",
            "engram.problems",
        ),
    ),
    ("adapters", ("engram.store", "engram.vectors.edge", "engram.vectors.server", "engram.embedders")),
)
ORDER = ["wiring", "doors", "rules", "indexing", "adapters", "ports and values"]
# (importer, imported): why it still points up
UPWARD_KNOWN: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int | None:
    """The layer a module sits in (the longest package named wins), as its place in ORDER."""
    best: tuple[int, int] | None = None
    for name, packages in LAYERS:
        for package in packages:
            if (module == package or module.startswith(package + ".")) and (
                best is None or len(package) > best[1]
            ):
                best = (ORDER.index(name), len(package))
    return best[0] if best else None


def upward(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    out = set()
    for name, targets in edges.items():
        here = layer_of(name)
        for target in targets:
            there = layer_of(target)
            if here is not None and there is not None and there < here:
                out.add((name, target))
    return out


def test_every_module_of_the_package_has_a_layer():
    assert [m for m in graph() if m != "engram" and layer_of(m) is None] == []


def test_no_module_imports_a_layer_above_its_own():
    found = upward(graph())
    assert found - set(UPWARD_KNOWN) == set()
    assert set(UPWARD_KNOWN) <= found, set(UPWARD_KNOWN) - found  # one no longer upward: take it off
