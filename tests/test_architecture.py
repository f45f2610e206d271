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
    """A `monitor` package of these files; every folder gets an `__init__.py` unless one is given."""
    root = tmp_path / "monitor"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        folder.joinpath("__init__.py").touch()
    return root


def test_the_real_package_passes(architecture: ModuleType) -> None:
    assert architecture.problems(architecture.PACKAGE) == []


def test_a_clean_layering_passes(architecture: ModuleType, tmp_path: Path) -> None:
    root = package(
        tmp_path,
        {
            "core/text.py": "import json\n",
            "store/__init__.py": "from monitor.store.db import x\n",
            "store/db.py": "from monitor.core import text\nx = 1\n",
            "web/deps.py": "from monitor.store import x\n",
            "alerts/api.py": "from monitor.web import deps\n",
            "approvals/api.py": "from monitor.web import deps\nfrom monitor.alerts import api\n",
            "app.py": "from monitor.alerts import api\nfrom monitor.approvals import api as approvals\n",
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
            "core/text.py": "from monitor.core import rules\n",
            "core/rules.py": "from monitor.core.text import x\n",
            "store/db.py": "if TYPE_CHECKING:\n    from monitor.app import app\n",
            "collect/poll.py": "def f():\n    from monitor.notify.alerts import y\n",
            "notify/alerts.py": "y = 1\n" * 501,
            "app.py": "",
            "extra.py": "",
        },
    )
    found = architecture.problems(root)
    assert "monitor.store.db imports monitor.app: arrows point from higher layers to lower ones only" in found
    assert any(p.startswith("monitor.collect.poll imports monitor.notify.alerts") for p in found)
    assert "import cycle: monitor.core.rules -> monitor.core.text" in found
    assert "monitor.core.rules and monitor.core.text import each other" in "\n".join(found)
    assert "monitor/notify/alerts.py: 501 lines (limit 500)" in found
    assert any(p.startswith("monitor.extra: not in any layer") for p in found)
    assert len(found) == 6, found


def test_feature_packages_use_one_another_in_one_direction_only(
    architecture: ModuleType, tmp_path: Path
) -> None:
    """A slice may use another (an alert's page shows its approval form), never back: the
    alert page importing approvals and approvals importing the alerts' api is a knot."""
    files = {
        "web/deps.py": "",
        "alerts/page.py": "from monitor.approvals import pages\n",
        "approvals/pages.py": "from monitor.web import deps\n",
    }
    assert architecture.problems(package(tmp_path / "one-way", files)) == []
    knot = {**files, "approvals/service.py": "from monitor.alerts.page import x\n"}
    found = architecture.problems(package(tmp_path / "knot", knot))
    assert found == [
        "monitor.alerts and monitor.approvals import each other "
        "(monitor.alerts.page imports monitor.approvals.pages; "
        "monitor.approvals.service imports monitor.alerts.page)"
    ], found
    ring = {
        **files,
        "approvals/pages.py": "from monitor.sessions import api\n",
        "sessions/api.py": "from monitor.alerts import page\n",
    }
    found = architecture.problems(package(tmp_path / "ring", ring))
    assert "package cycle: monitor.alerts -> monitor.approvals -> monitor.sessions" in found, found


def test_packages_inside_a_package_import_in_one_direction(architecture: ModuleType, tmp_path: Path) -> None:
    """The rule holds at every level: two subpackages of one package, without any module cycle."""
    root = package(
        tmp_path,
        {
            "store/queries/alerts.py": "from monitor.store.marks import ring\n",
            "store/marks.py": "def ring():\n    from monitor.store.queries import servers\n",
            "store/queries/servers.py": "",
        },
    )
    found = architecture.problems(root)
    assert found == [
        "monitor.store.marks and monitor.store.queries import each other "
        "(monitor.store.marks imports monitor.store.queries.servers; "
        "monitor.store.queries.alerts imports monitor.store.marks)"
    ], found


def test_the_knot_before_the_redesign_fails(architecture: ModuleType, tmp_path: Path) -> None:
    """A fixture of the package graph before the redesign: the composition roots inside the plumbing
    the units import, unit models the store gathers, console helpers under the command table. Each
    pair was one import line each way; every one of them is reported."""
    before = {
        "approvals/api.py": "from monitor.webapp.deps import Web\nfrom monitor.store.models import Server\n",
        "approvals/cli.py": "from monitor.cli.common import load\n",
        "approvals/recorder.py": "from monitor.sessions.service import heartbeat\n",
        "approvals/storage.py": "",
        "approvals/models.py": "",
        "cli/__init__.py": "from monitor.approvals import cli\n",
        "cli/app.py": "from monitor.identity import cli\nfrom monitor.silences import cli as s\n",
        "cli/common.py": "",
        "config/__init__.py": "from monitor.identity.roles import Role\n",
        "identity/api.py": "from monitor.webapp.deps import Web\nfrom monitor.config import Config\n",
        "identity/cli.py": "from monitor.cli.common import load\n",
        "identity/models.py": "from monitor.store.models import Base\n",
        "identity/roles.py": "",
        "notify/alerts.py": "from monitor.silences.service import muted\n",
        "notify/handling.py": "",
        "sessions/pages.py": "from monitor.webapp.deps import Web\nfrom monitor.approvals import storage\n",
        "sessions/service.py": "",
        "silences/pages.py": "from monitor.webapp.pages.alert import form_text\n",
        "silences/api.py": "from monitor.notify.handling import resolve\n",
        "silences/cli.py": "from monitor.cli.common import load\n",
        "silences/service.py": "",
        "store/models.py": "",
        "store/schema.py": "from monitor.approvals import models\nfrom monitor.identity import models as m\n",
        "store/registration.py": "from monitor.approvals.storage import set_mode\n",
        "webapp/deps.py": "",
        "webapp/app.py": (
            "from monitor.approvals import api\nfrom monitor.identity import api as i\n"
            "from monitor.sessions import pages\nfrom monitor.silences import pages as s\n"
        ),
        "webapp/pages/alert.py": "from monitor.silences.service import muted\n",
    }
    found = "\n".join(architecture.problems(package(tmp_path, before)))
    pairs = [
        ("approvals", "cli"),
        ("approvals", "sessions"),
        ("approvals", "store"),
        ("approvals", "webapp"),
        ("cli", "identity"),
        ("cli", "silences"),
        ("config", "identity"),
        ("identity", "store"),
        ("identity", "webapp"),
        ("notify", "silences"),
        ("sessions", "webapp"),
        ("silences", "webapp"),
    ]
    for a, b in pairs:
        assert f"monitor.{a} and monitor.{b} import each other" in found, (a, b, found)
    assert found.count("import each other") == len(pairs), found
    assert "monitor.webapp: not in any layer" in found


def test_a_cycle_through_a_package_init_at_import_fails(architecture: ModuleType, tmp_path: Path) -> None:
    """`identity.models` imports `store.columns`, which runs `store/__init__` first; that imports
    `store.polls`, which imports `identity.models`, still half made: an ImportError whenever
    `identity.models` is the first of them imported. Lazy imports in functions run later and count
    for layering only (the store importing identity is wrong either way)."""
    files = {
        "store/__init__.py": "from monitor.store.polls import Store\n",
        "store/columns.py": "SafeText = 1\n",
        "store/polls.py": "from monitor.identity.models import Names\nStore = 1\n",
        "identity/models.py": "from monitor.store.columns import SafeText\nNames = 1\n",
    }
    at_import = (
        "import cycle when a module is imported first: "
        "monitor.identity.models -> monitor.store -> monitor.store.polls"
    )
    assert at_import in architecture.problems(package(tmp_path / "eager", files))
    lazy = {**files, "store/polls.py": "def names():\n    from monitor.identity.models import Names\n"}
    found = architecture.problems(package(tmp_path / "lazy", lazy))
    assert at_import not in found
    assert "monitor.store.polls imports monitor.identity.models: arrows point" in "\n".join(found)
