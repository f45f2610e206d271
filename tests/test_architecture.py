"""deploy/architecture.py: the package-shape check CI runs, shown to catch what it is for."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "deploy" / "architecture.py"


@pytest.fixture(scope="module")
def architecture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = module
    spec.loader.exec_module(module)
    return module


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "monitor"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_real_package_passes(architecture: ModuleType) -> None:
    assert architecture.problems(architecture.PACKAGE) == []


def test_a_clean_layering_passes(architecture: ModuleType, tmp_path: Path) -> None:
    root = package(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/text.py": "import json\n",
            "store/__init__.py": "from monitor.store.db import x\n",
            "store/db.py": "from monitor.core import text\nx = 1\n",
            "cli.py": "def main():\n    from monitor.store import x\n",
        },
    )
    assert architecture.problems(root) == []


def test_upward_imports_sibling_imports_cycles_and_long_modules_fail(
    architecture: ModuleType, tmp_path: Path
) -> None:
    root = package(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/text.py": "from monitor.core import rules\n",
            "core/rules.py": "from monitor.core.text import x\n",
            "store/__init__.py": "",
            "store/db.py": "if TYPE_CHECKING:\n    from monitor.webapp import app\n",
            "collect/__init__.py": "",
            "collect/poll.py": "def f():\n    from monitor.notify.alerts import y\n",
            "notify/__init__.py": "",
            "notify/alerts.py": "y = 1\n" * 501,
            "webapp/__init__.py": "",
            "webapp/app.py": "",
            "extra.py": "",
        },
    )
    found = architecture.problems(root)
    assert (
        "monitor.store.db imports monitor.webapp.app: arrows point from higher layers to lower ones only"
        in found
    )
    assert any(p.startswith("monitor.collect.poll imports monitor.notify.alerts") for p in found)
    assert "import cycle: monitor.core.rules -> monitor.core.text" in found
    assert "monitor/notify/alerts.py: 501 lines (limit 500)" in found
    assert any(p.startswith("monitor.extra: not in any layer") for p in found)
    assert len(found) == 5, found


def test_a_units_roles_sit_in_their_layers(architecture: ModuleType, tmp_path: Path) -> None:
    """A unit is a vertical slice: its storage may import the store and its policy, and the store may
    import its storage; its policy may not import its storage, nor its storage its service."""
    root = package(
        tmp_path,
        {
            "core/__init__.py": "",
            "store/__init__.py": "",
            "store/models.py": "",
            "store/polls.py": "from monitor.approvals.storage import x\n",
            "notify/__init__.py": "",
            "notify/alerts.py": "",
            "collect/__init__.py": "",
            "collect/poller.py": "from monitor.approvals.service import z\n",
            "approvals/__init__.py": '"""The unit."""\n',
            "approvals/policy.py": "from monitor.approvals.storage import x\n",
            "approvals/storage.py": (
                "from monitor.store import models\nfrom monitor.approvals.service import z\n"
            ),
            "approvals/service.py": "from monitor.notify import alerts\nz = 1\n",
            "approvals/gadget.py": "",
        },
    )
    found = architecture.problems(root)
    assert "monitor.approvals.policy imports monitor.approvals.storage: " in "".join(found)
    assert any(p.startswith("monitor.approvals.storage imports monitor.approvals.service") for p in found)
    assert any(p.startswith("monitor.collect.poller imports monitor.approvals.service") for p in found)
    assert any(p.startswith("monitor.approvals.gadget: not a role of unit approvals") for p in found)
    assert not any(p.startswith("monitor.store.polls") for p in found), found
    assert len(found) == 4, found


def test_a_units_init_imports_nothing(architecture: ModuleType, tmp_path: Path) -> None:
    root = package(
        tmp_path,
        {"core/__init__.py": "", "approvals/__init__.py": "from monitor.approvals import policy\n"},
    )
    root.joinpath("approvals", "policy.py").write_text("")
    found = architecture.problems(root)
    assert found == ["monitor.approvals: a unit's __init__ imports nothing (it would import every role)"]


def test_a_cycle_through_a_package_init_at_import_fails(architecture: ModuleType, tmp_path: Path) -> None:
    """`approvals.models` imports `store.columns`, which runs `store/__init__` first; that imports
    `store.polls`, which imports `approvals.models`, still half made: an ImportError whenever
    `approvals.models` is the first of them imported. Lazy imports in functions run later and count
    for layering only."""
    files = {
        "core/__init__.py": "",
        "store/__init__.py": "from monitor.store.polls import Store\n",
        "store/columns.py": "SafeText = 1\n",
        "store/polls.py": "from monitor.approvals.models import Names\nStore = 1\n",
        "approvals/__init__.py": "",
        "approvals/models.py": "from monitor.store.columns import SafeText\nNames = 1\n",
    }
    found = architecture.problems(package(tmp_path / "eager", files))
    assert found == [
        "import cycle when a module is imported first: "
        "monitor.approvals.models -> monitor.store -> monitor.store.polls"
    ], found
    lazy = {**files, "store/polls.py": "def names():\n    from monitor.approvals.models import Names\n"}
    assert architecture.problems(package(tmp_path / "lazy", lazy)) == []
