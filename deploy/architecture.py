#!/usr/bin/env python3
"""Check the shape of the `monitor` package: layers, import cycles, module size.

Run `python3 deploy/architecture.py` (standard library only; `deploy/dev.py check` and CI run it).
It reads every module's imports (lazy and type-checking ones included: they are dependencies too)
and fails when:

- a module imports from a package of its own layer or a higher one (arrows point one way:
  core <- config <- store <- collect, notify <- webapp <- service, cli); a *unit* (a package
  holding one concept end to end, such as `monitor/approvals/`) names each module by its role,
  and a module of role R counts as a member of R's layer package (`storage` is in `store`,
  `api` in `webapp`), so a unit is a vertical slice through the layers, not a layer of its own,
- modules import each other in a cycle, or one module, imported first, would find another
  partially initialised (a cycle of what runs at import, including the package `__init__` that
  importing `a.b.c` runs first), or
- a module is longer than the limit (a module that long does more than one job).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "monitor"
MAX_LINES = 500
LAYERS = {
    "core": 0,
    "reporter": 0,
    "config": 1,
    "fingerprint": 1,
    "metrics": 1,
    "store": 2,
    "collect": 3,
    "notify": 3,
    "webapp": 4,
    "service": 5,
    "cli": 6,
}
"""The layer of each top-level module or package of `monitor`: imports go to lower layers only
(or within one's own package). collect and notify share a layer, so neither imports the other."""

UNITS = {
    "approvals": {
        "errors": "core",
        "policy": "core",
        "names": "core",
        "inputs": "core",
        "gatewaywire": "core",
        "records": "store",
        "models": "store",
        "storage": "store",
        "cache": "store",
        "service": "notify",
        "recorder": "notify",
        "point": "notify",
        "api": "webapp",
        "hooks": "webapp",
        "gateway": "webapp",
        "lane": "webapp",
        "pages": "webapp",
        "cli": "cli",
        "hookcommand": "cli",
    },
    "identity": {
        "roles": "core",
        "models": "store",
        "records": "store",
        "storage": "store",
        "audit": "notify",
        "callers": "webapp",
        "acts": "webapp",
        "signin": "webapp",
        "api": "webapp",
        "pages": "webapp",
        "cli": "cli",
    },
    "sessions": {"service": "notify", "api": "webapp", "pages": "webapp"},
    "silences": {"service": "notify", "api": "webapp", "pages": "webapp", "cli": "cli"},
}
"""Each unit's modules by role, and the layer package each role belongs to. A unit's `__init__`
holds only its docstring (the table of its roles), so importing it imports nothing."""


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
    """The layer package a module belongs to: its top-level package, or its role's for a unit's module."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] in UNITS:
        return UNITS[parts[1]].get(parts[2], parts[1])
    return parts[1] if len(parts) >= 2 else name


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
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


def problems(package: Path) -> list[str]:
    """Every violation in the package at `package` (a folder named `monitor`)."""
    names = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}
    known = set(names)
    graph = {name: imports_of(path, name, known) for name, path in names.items()}
    found: list[str] = []
    for name, path in names.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(package.parent)}: {lines} lines (limit {MAX_LINES})")
        if name == "monitor":
            continue
        if name.split(".")[1] in UNITS:
            unit, _, role = name.partition(".")[2].partition(".")
            if not role:
                if graph[name]:
                    found.append(f"{name}: a unit's __init__ imports nothing (it would import every role)")
                continue
            if role.split(".")[0] not in UNITS[unit]:
                found.append(f"{name}: not a role of unit {unit} (add it to UNITS in deploy/architecture.py)")
                continue
        if top(name) not in LAYERS:
            found.append(f"{name}: not in any layer (add its package to LAYERS in deploy/architecture.py)")
            continue
        for target in sorted(graph[name]):
            if top(target) == top(name) or top(target) not in LAYERS:
                continue
            if LAYERS[top(target)] >= LAYERS[top(name)]:
                found.append(f"{name} imports {target}: arrows point from higher layers to lower ones only")
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
        print(f"architecture: {count} modules, layered, no import cycles, none over {MAX_LINES} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
