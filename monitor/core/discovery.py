"""Finding the kinds of a thing by their modules: every subclass of a base defined in a module of a
package, so that adding a kind (an alert sink, a host adapter) is adding its module, with no list to
edit. It imports the package's modules; nothing else."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import TypeVar

Kind = TypeVar("Kind")


def defined_in(package: str, path: Iterable[str], base: type[Kind], *, marker: str) -> list[type[Kind]]:
    """The subclasses of `base` (at any depth) defined in a module of `package` (whose `__path__` is
    `path`) that set `marker` themselves: a class that only shares code, setting none, is no kind."""
    for module in pkgutil.iter_modules(list(path)):
        importlib.import_module(f"{package}.{module.name}")
    found: list[type[Kind]] = []
    pending = list(base.__subclasses__())
    while pending:
        kind = pending.pop()
        pending += kind.__subclasses__()
        if kind.__module__.startswith(f"{package}.") and marker in vars(kind):
            found.append(kind)
    return found
