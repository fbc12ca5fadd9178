"""Kubernetes manifests, validated against the Kubernetes schemas (kubernetes-validate ships them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.conftest import DEPLOY, load_yaml, settings_from

K8S = DEPLOY / "k8s"
MANIFESTS = ["configmap.yaml", "secret.yaml", "service.yaml", "statefulset.yaml"]
K8S_VERSION = "1.30.0"


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_is_valid_against_the_kubernetes_schema(name: str) -> None:
    kubernetes_validate.validate(load_yaml(K8S / name), K8S_VERSION, strict=True)


def test_the_schema_check_catches_a_broken_manifest() -> None:
    broken = load_yaml(K8S / "statefulset.yaml")
    broken["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    assert sorted(load_yaml(K8S / "kustomization.yaml")["resources"]) == sorted(MANIFESTS)


def _container() -> dict[str, Any]:
    sts = load_yaml(K8S / "statefulset.yaml")
    [container] = sts["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_one_writer_with_state_on_a_claim_and_the_share_read_only() -> None:
    sts = load_yaml(K8S / "statefulset.yaml")
    assert sts["kind"] == "StatefulSet"
    assert sts["spec"]["replicas"] == 1
    [claim] = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m for m in _container()["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]]["mountPath"] == "/state"
    assert mounts["share"] == {"name": "share", "mountPath": "/data", "readOnly": True}
    assert mounts["secrets"]["mountPath"] == "/run/secrets"  # adrap reads secret files there
    assert _container()["securityContext"]["readOnlyRootFilesystem"] is True
    assert mounts["tmp"]["mountPath"] == "/tmp"  # numba's cache with a read-only root
    assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_probes_use_healthz_and_readyz() -> None:
    c = _container()
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_settings_come_from_the_configmap_and_secrets_from_the_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    c = _container()
    assert c["envFrom"] == [{"configMapRef": {"name": "adrap-config"}}]
    assert not c.get("env")  # no secret in plain environment variables
    secret = load_yaml(K8S / "secret.yaml")
    for name, value in secret["stringData"].items():
        (tmp_path / name).write_text(value)
    for key, value in load_yaml(K8S / "configmap.yaml")["data"].items():
        monkeypatch.setenv(key, value)
    from ingestor.config import Settings

    s = Settings(_env_file=None, _secrets_dir=tmp_path)  # type: ignore[call-arg]
    assert s.store_mode == "server"
    assert s.qdrant.api_key is not None
    assert s.qdrant.api_key.get_secret_value() == "change-me"
    assert s.watch.http_host == "0.0.0.0"


def test_configmap_names_only_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings_from(load_yaml(K8S / "configmap.yaml")["data"], monkeypatch)


def test_qdrant_helm_values_make_a_keyed_three_node_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = load_yaml(K8S / "qdrant-values.yaml")
    assert values["replicaCount"] == 3
    assert values["config"]["cluster"]["enabled"] is True
    assert values["apiKey"]["valueFrom"]["secretKeyRef"]["name"]
    assert values["service"]["type"] == "ClusterIP"  # p2p 6335 never leaves the cluster
    assert values["podManagementPolicy"] == "Parallel"
    s = settings_from(load_yaml(K8S / "configmap.yaml")["data"], monkeypatch)
    assert s.qdrant.replication_factor is not None
    assert s.qdrant.replication_factor <= values["replicaCount"]
