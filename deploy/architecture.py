#!/usr/bin/env python3
"""Check the shape of the `monitor` package: layers, one direction between packages, module size.

Run `python3 deploy/architecture.py` (standard library only; `deploy/dev.py check` and CI run it).
It reads every module's imports (lazy and type-checking ones included: they are dependencies too)
and fails when:

- a module imports from a package of a higher layer, or of its own layer other than its own
  package (`LAYERS`: arrows point down). The one exception is the feature packages (`SLICES`),
  which may use one another, in one direction only (the next check);
- two packages import each other, or packages import each other in a cycle, at any level: the
  top-level packages of `monitor`, and the subpackages and modules inside each package. A newcomer
  reads the folders, so no folder may need the one that needs it;
- modules import each other in a cycle, or one module, imported first, would find another
  partially initialised (a cycle of what runs at import, including the package `__init__` that
  importing `a.b.c` runs first), or
- a module is longer than the limit (a module that long does more than one job).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "monitor"
MAX_LINES = 500
SLICES = ("alerts", "approvals", "health", "history", "servers", "sessions", "silences", "tokens")
"""The feature packages: each is one concept as the dashboard, the API and the command line offer it
(its `api`, `pages` and `cli` modules, and what only it needs). They stand on the plumbing below
them and may use one another in one direction; only the composition roots above use them all."""
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core", "reporter"),
    ("fingerprint", "metrics", "sinks", "tracing"),
    ("config",),
    ("store",),
    ("collect", "identity", "notify"),
    ("console", "web"),
    SLICES,
    ("app",),
    ("service",),
    ("cli",),
)
"""The layers, lowest first, of each top-level module or package of `monitor`:

- `core`: the pure domain (no I/O); `reporter`: a standalone client for hosts;
- `fingerprint` (the public import path of the fingerprint), `metrics` (this process's counters),
  `sinks` (each alert receiver's settings, body and re-post rule), `tracing` (this process's
  OpenTelemetry spans, when configured);
- `config`: settings, validated through the models the packages below declare;
- `store`: every table, the poll transaction, the read queries;
- `collect` (polling), `identity` (who is calling), `notify` (the one path from a finding to an
  alert, the outbox, delivery, silences);
- `web` (the plumbing of pages and API routes) and `console` (of commands);
- the feature packages (`SLICES`);
- the composition roots: `app` (the web app), `service` (`serve`), `cli` (the command table)."""
LAYER = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, known: set[str], *, at_import: bool = False) -> set[str]:
    """The `monitor` modules this file imports, resolved to module names that exist.

    With `at_import`, only what runs when the module is imported (its top-level statements, not
    function bodies or `if TYPE_CHECKING:`), plus the packages whose `__init__` that runs first."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = _top_level(tree.body) if at_import else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    found = {target for target in found if target in known and target != "monitor"}
    if at_import:
        # Importing `a.b.c` runs `a.b`'s __init__ first, unless this module is inside `a.b` (whose
        # __init__ is then already running): a cycle through it is a partially initialised module.
        inside = {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 1)}
        for target in list(found):
            parts = target.split(".")
            parents = (".".join(parts[:n]) for n in range(2, len(parts)))
            found.update(p for p in parents if p in known and p not in inside and p != name)
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run at import: the module's own, and those inside `try`/`if` blocks other
    than `if TYPE_CHECKING:`."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                found += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            found += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                found += _top_level(handler.body)
        else:
            found.append(node)
    return found


def top(name: str) -> str:
    """The top-level package (or module) of `monitor` a module belongs to."""
    parts = name.split(".")
    return parts[1] if len(parts) >= 2 else name


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_problems(graph: dict[str, set[str]], packages: Iterable[str]) -> list[str]:
    """Two-way pairs and cycles among the children of each package, at every level.

    A child is a subpackage or a module directly inside the package; it imports another child when
    any module inside it imports any module inside the other. The package's own `__init__` is not a
    child (it is the package), so re-exporting from it is no edge between its children."""
    found: list[str] = []
    for parent in sorted(packages):
        depth = parent.count(".") + 1

        def child(module: str, parent: str = parent, depth: int = depth) -> str | None:
            return module.split(".")[depth] if module.startswith(parent + ".") else None

        edges: dict[str, dict[str, tuple[str, str]]] = defaultdict(dict)
        for source, targets in graph.items():
            source_child = child(source)
            if source_child is None:
                continue
            for target in sorted(targets):
                target_child = child(target)
                if target_child is not None and target_child != source_child:
                    edges[source_child].setdefault(target_child, (source, target))
        reported: set[frozenset[str]] = set()
        for a in sorted(edges):
            for b in sorted(edges[a]):
                if a in edges.get(b, {}) and frozenset((a, b)) not in reported:
                    reported.add(frozenset((a, b)))
                    there, back = edges[a][b], edges[b][a]
                    found.append(
                        f"{parent}.{a} and {parent}.{b} import each other "
                        f"({there[0]} imports {there[1]}; {back[0]} imports {back[1]})"
                    )
        simple = {node: set(targets) for node, targets in edges.items()}
        for component in cycles(simple):
            if len(component) > 2 or frozenset(component) not in reported:
                names = " -> ".join(f"{parent}.{node}" for node in component)
                found.append(f"package cycle: {names}")
    return found


def problems(package: Path) -> list[str]:
    """Every violation in the package at `package` (a folder named `monitor`)."""
    paths = sorted(package.rglob("*.py"))
    names = {module_name(path, package): path for path in paths}
    known = set(names)
    graph = {name: imports_of(path, name, known) for name, path in names.items()}
    found: list[str] = []
    for name, path in names.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(package.parent)}: {lines} lines (limit {MAX_LINES})")
        if name == "monitor":
            continue
        if top(name) not in LAYER:
            found.append(f"{name}: not in any layer (add it to LAYERS in deploy/architecture.py)")
            continue
        for target in sorted(graph[name]):
            mine, theirs = top(name), top(target)
            if theirs == mine or theirs not in LAYER:
                continue
            if LAYER[theirs] > LAYER[mine] or (LAYER[theirs] == LAYER[mine] and mine not in SLICES):
                found.append(f"{name} imports {target}: arrows point from higher layers to lower ones only")
    packages = {module_name(path, package) for path in paths if path.name == "__init__.py"}
    found += package_problems(graph, packages)
    found += [f"import cycle: {' -> '.join(component)}" for component in cycles(graph)]
    at_import = {name: imports_of(path, name, known, at_import=True) for name, path in names.items()}
    found += [
        f"import cycle when a module is imported first: {' -> '.join(component)}"
        for component in cycles(at_import)
        if sorted(component) not in [sorted(c) for c in cycles(graph)]
    ]
    return found


def main() -> int:
    found = problems(PACKAGE)
    for problem in found:
        print(f"architecture: {problem}", file=sys.stderr)
    if not found:
        count = sum(1 for _ in PACKAGE.rglob("*.py"))
        print(
            f"architecture: {count} modules, layered, no two packages importing each other, "
            f"no import cycles, none over {MAX_LINES} lines"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
