"""The three compose variants, checked at the YAML level (no container engine needed in CI).

(a) compose.yaml is also run with podman-compose in tests/deploy/test_image.py (slow).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, load_yaml, settings_from
from tests.deploy.engine import compose_command

VARIANTS = ["compose.yaml", "compose.qdrant.yaml", "compose.cluster.yaml"]


def _ports(service: dict[str, Any]) -> list[str]:
    return [str(p) for p in service.get("ports", [])]


def _qdrant_nodes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in doc["services"].items() if "qdrant/qdrant" in s.get("image", "")}


@pytest.mark.parametrize("name", VARIANTS)
def test_the_watcher_service_is_hardened_and_health_checked(name: str) -> None:
    adrap = load_yaml(DEPLOY / name)["services"]["adrap"]
    assert adrap["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert adrap["read_only"] is True
    assert "/tmp" in adrap["tmpfs"]
    assert "state:/state" in adrap["volumes"]
    assert any(v.endswith(":/data:ro") for v in adrap["volumes"])
    assert "/readyz" in " ".join(adrap["healthcheck"]["test"])
    assert adrap["stop_grace_period"] == "60s"
    assert _ports(adrap)
    assert all(p.startswith("127.0.0.1:") for p in _ports(adrap))


@pytest.mark.parametrize("name", VARIANTS)
def test_every_adrap_variable_is_a_valid_setting(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = load_yaml(DEPLOY / name)["services"]["adrap"].get("environment", {})
    s = settings_from(env, monkeypatch)
    assert s.watch.http_host == "0.0.0.0"


def test_a_embeds_the_store_and_runs_no_qdrant_server(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = load_yaml(DEPLOY / "compose.yaml")
    assert list(doc["services"]) == ["adrap"]
    env = doc["services"]["adrap"]["environment"]
    assert settings_from(env, monkeypatch).store_mode == "embedded"


@pytest.mark.parametrize("name", ["compose.qdrant.yaml", "compose.cluster.yaml"])
def test_qdrant_is_keyed_from_a_secret_and_published_on_loopback_only(name: str) -> None:
    doc = load_yaml(DEPLOY / name)
    nodes = _qdrant_nodes(doc)
    assert nodes
    assert doc["secrets"]["qdrant_api_key"]["file"] == "./secrets/qdrant_api_key"
    for node in nodes.values():
        assert node["secrets"] == ["qdrant_api_key"]
        assert "/run/secrets/qdrant_api_key" in " ".join(node["entrypoint"])
        assert "QDRANT__SERVICE__API_KEY" in " ".join(node["entrypoint"])
        assert "QDRANT__SERVICE__API_KEY" not in node.get("environment", {})
        assert all(p.startswith("127.0.0.1:") for p in _ports(node))
        assert "/readyz" in " ".join(node["healthcheck"]["test"])
    adrap = doc["services"]["adrap"]
    assert {"source": "qdrant_api_key", "target": "adrap_qdrant__api_key"} in adrap["secrets"]
    assert "ADRAP_QDRANT__API_KEY" not in adrap["environment"]
    assert set(adrap["depends_on"]) == set(nodes)
    assert all(d["condition"] == "service_healthy" for d in adrap["depends_on"].values())


def test_b_points_adrap_at_its_server(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = load_yaml(DEPLOY / "compose.qdrant.yaml")
    s = settings_from(doc["services"]["adrap"]["environment"], monkeypatch)
    assert s.qdrant.url == "http://qdrant:6333"
    assert list(_qdrant_nodes(doc)) == ["qdrant"]


def test_c_forms_a_three_node_cluster_without_publishing_p2p(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = load_yaml(DEPLOY / "compose.cluster.yaml")
    nodes = _qdrant_nodes(doc)
    assert len(nodes) == 3
    starters = [n for n, s in nodes.items() if "--bootstrap" not in s["command"]]
    assert starters == ["qdrant-1"]
    assert nodes["qdrant-1"]["command"] == ["--uri", "http://qdrant-1:6335"]
    for name, node in nodes.items():
        assert node["environment"]["QDRANT__CLUSTER__ENABLED"] == "true"
        cmd = node["command"]
        assert cmd[cmd.index("--uri") + 1] == f"http://{name}:6335"
        if name != "qdrant-1":
            assert cmd[cmd.index("--bootstrap") + 1] == "http://qdrant-1:6335"
            assert node["depends_on"]["qdrant-1"]["condition"] == "service_healthy"
    for service in doc["services"].values():
        assert not any("6335" in p for p in _ports(service)), "p2p port published"
    s = settings_from(doc["services"]["adrap"]["environment"], monkeypatch)
    q = s.qdrant
    assert q.url == "http://qdrant-1:6333"
    assert (q.shard_number, q.replication_factor, q.write_consistency_factor) == (3, 2, 1)
    assert q.replication_factor is not None
    assert q.replication_factor <= len(nodes)


@pytest.mark.parametrize("name", VARIANTS)
def test_podman_compose_parses_every_variant(name: str, tmp_path: Path) -> None:
    """The compose implementation used here accepts the files (anchors, secrets, depends_on)."""
    compose = compose_command()
    if compose is None or shutil.which("podman") is None:
        pytest.skip("podman-compose / podman not installed (the YAML checks above still ran)")
    done = subprocess.run(
        [compose, "-f", str(DEPLOY / name), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    parsed = yaml.safe_load(done.stdout)
    assert parsed["services"]["adrap"]["build"]["dockerfile"] == "deploy/Dockerfile"
    if name == "compose.cluster.yaml":  # the merge key gave every node the cluster settings
        for node in ("qdrant-1", "qdrant-2", "qdrant-3"):
            env = parsed["services"][node]["environment"]
            assert env["QDRANT__CLUSTER__ENABLED"] == "true"
