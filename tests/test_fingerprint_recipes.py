"""The recipes in docs/fingerprint.md, run as written: each produces the fingerprint the monitor stores.

The Python recipe fetches a real server's listing (mcp-server-time, from PyPI) raw through the SDK;
the monitor polls the same server and stores it; the TypeScript recipe (Node with the stock
`canonicalize` and `typescript` packages from npm, installed into a temporary folder) and the Go
one (when a Go toolchain is present) fingerprint that listing and every shared vector. Without
Node, npm or the npm registry, the TypeScript test skips and says why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from support.polls import record_poll, stored_tools

from monitor.collect.client import Target, fetch_listing
from monitor.config import ServerConfig
from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store
from monitor.store.registration import sync_servers

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "fingerprint.md").read_text("utf-8")
VECTORS_FILE = Path(__file__).parent / "data" / "fingerprint-vectors.json"
VECTORS = json.loads(VECTORS_FILE.read_text("utf-8"))["vectors"]
TIME_SERVER = ("-m", "mcp_server_time")
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def recipe(language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", DOC, re.DOTALL)
    return str(block)


async def stored_listing(store: Store) -> tuple[str, list[dict[str, Any]]]:
    """Poll the real server as the monitor does, store it, and read back the fingerprint and tools."""
    server = ServerConfig(name="time", transport="stdio", command=sys.executable, args=list(TIME_SERVER))
    fetched = await fetch_listing(
        Target(name="time", transport="stdio", command=server.command, args=server.args)
    )
    (server_id,) = sync_servers(store, [server], T0).values()
    outcome = record_poll(store, server_id, CanonicalListing.of(fetched.tools), T0)
    assert outcome.fingerprint is not None
    return outcome.fingerprint, stored_tools(store, "time", T0)


async def test_python_recipe_fetches_raw_and_matches_the_stored_fingerprint(store: Store) -> None:
    stored, _ = await stored_listing(store)
    namespace: dict[str, Any] = {}
    exec(compile(recipe("python"), "docs/fingerprint.md", "exec"), namespace)
    params = StdioServerParameters(command=sys.executable, args=list(TIME_SERVER))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await namespace["cached_tools"](session)
    assert tools, "mcp-server-time lists tools"
    assert namespace["fingerprint"](tools) == stored
    for vector in VECTORS:
        assert namespace["fingerprint"](vector["tools"]) == vector["fingerprint"], vector["name"]


@pytest.fixture(scope="module")
def node_recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TypeScript recipe transpiled to an ES module beside its npm packages; skips without Node/npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run the TypeScript recipe")
    folder = tmp_path_factory.mktemp("node-recipe")
    (folder / "package.json").write_text('{"type": "module", "private": true}')
    try:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "canonicalize@2.1.0", "typescript@5"],
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"npm could not install canonicalize and typescript: {str(exc)[:200]}")
    (folder / "recipe.ts").write_text(recipe("typescript"))
    transpile = (
        "import ts from 'typescript'; import fs from 'node:fs';"
        "const out = ts.transpileModule(fs.readFileSync('recipe.ts', 'utf8'), {compilerOptions: "
        "{module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, esModuleInterop: true}});"
        "fs.writeFileSync('recipe.mjs', out.outputText);"
    )
    subprocess.run([node, "--input-type=module", "-e", transpile], cwd=folder, check=True, timeout=120)
    (folder / "run.mjs").write_text(
        "import fs from 'node:fs'; import { fingerprint } from './recipe.mjs';\n"
        "const data = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));\n"
        "const listings = Array.isArray(data) ? [data] : data.vectors.map((v) => v.tools);\n"
        "console.log(JSON.stringify(listings.map(fingerprint)));\n"
    )
    return folder


def run_node(folder: Path, source: Path) -> list[str]:
    result = subprocess.run(
        ["node", "run.mjs", str(source)], cwd=folder, capture_output=True, text=True, timeout=120, check=True
    )
    return list(json.loads(result.stdout))


async def test_typescript_recipe_matches_the_stored_fingerprint_and_every_vector(
    store: Store, node_recipe: Path, tmp_path: Path
) -> None:
    stored, tools = await stored_listing(store)
    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
    assert run_node(node_recipe, listing) == [stored]
    # The vectors file as written: JSON.parse reads its integer beyond 2^53 itself.
    assert run_node(node_recipe, VECTORS_FILE) == [v["fingerprint"] for v in VECTORS]


@pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain on this machine")
async def test_go_recipe_matches_the_stored_fingerprint(store: Store, tmp_path: Path) -> None:
    stored, tools = await stored_listing(store)
    run_go(tmp_path, tools, stored)


def run_go(tmp_path: Path, tools: list[dict[str, Any]], stored: str) -> None:
    """The Go recipe in a module of its own, asserting in `go test` that it computes `stored`."""
    (tmp_path / "fingerprint.go").write_text(recipe("go"))
    (tmp_path / "main_test.go").write_text(
        'package fingerprint\n\nimport (\n\t"encoding/json"\n\t"os"\n\t"testing"\n)\n\n'
        "func TestStored(t *testing.T) {\n\tvar tools []json.RawMessage\n"
        '\tdata, _ := os.ReadFile("tools.json")\n\tif err := json.Unmarshal(data, &tools); err != nil {\n'
        "\t\tt.Fatal(err)\n\t}\n\tgot, err := Fingerprint(tools)\n\tif err != nil {\n\t\tt.Fatal(err)\n\t}\n"
        '\tif got != os.Getenv("WANT") {\n\t\tt.Fatalf("got %s", got)\n\t}\n}\n'
    )
    (tmp_path / "tools.json").write_text(json.dumps(tools))
    go = str(shutil.which("go"))
    subprocess.run([go, "mod", "init", "example.com/fingerprint"], cwd=tmp_path, check=True, timeout=120)
    try:
        subprocess.run([go, "get", "github.com/gowebpki/jcs"], cwd=tmp_path, check=True, timeout=300)
    except subprocess.CalledProcessError:
        pytest.skip("go could not fetch github.com/gowebpki/jcs")
    result = subprocess.run(
        [go, "test", "./..."],
        cwd=tmp_path,
        env={**os.environ, "WANT": stored},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
