"""Build the image and run it as a user would (podman with runc; slow: about 10 min cold).

Needs podman, runc and debootstrap (``apt-get install -y podman runc debootstrap``) and root;
skipped without podman. scripts/build_image.sh makes the base image and the wheelhouse.

Everything is asked from the host through the published port, with the token the container reads
from its secret file: ``/query``, the Qdrant REST API with the real ``QdrantClient(url=...,
api_key=token)`` (docs/clients.md's collapsed-tree recipe must return the nodes ``/query`` returns)
and ``/dashboard``. Measurements are printed (``pytest -s``): image size, cold start to /readyz
(first tree build of examples/sample included), a new file -> found by /query (p50 of three),
memory of the running container, SIGTERM -> exit.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import UnexpectedResponse

from retriever import SentenceTransformerEmbedder
from tests.deploy.conftest import DEPLOY
from tests.deploy.engine import (
    CONTAINERS_CONF,
    compose_command,
    container,
    free_port,
    memory_bytes,
    podman,
    sigterm_to_exit,
    wait_ready,
)
from tests.integration.test_qdrant_rest import RECIPE_URL, recipe_block

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
]
ROOT = DEPLOY.parent
SAMPLE = ROOT / "examples" / "sample"
IMAGE = os.environ.get("ADRAP_TEST_IMAGE", "localhost/adrap:test")
BUDGET = 2000  # docs/clients.md's recipe's token budget
#: Files dropped into the running container's folder, each with a question that finds it.
NEW_DOCS = {
    "zebra-migration.md": (
        "zebras crossing the river",
        "# Zebra migration notes\n\nEvery year the plains zebras of the Serengeti walk north to"
        " the Masai Mara, following the rains. The striped herds cross the Mara river in late"
        " July, watched by crocodiles in the shallows.\n",
    ),
    "volcano-log.md": (
        "lava from the volcano's fissure",
        "# Volcano field log\n\nThe fissure on the volcano's eastern flank opened at dawn. Lava"
        " fountains rose forty metres and a basalt flow crept towards the coastal road, while"
        " sulphur dioxide drifted over the valley.\n",
    ),
    "sourdough.md": (
        "feeding the sourdough starter",
        "# Sourdough baking\n\nFeed the sourdough starter with rye flour and water the night"
        " before; the levain is ready when it has doubled. Proof the dough in a banneton and"
        " bake it in a hot Dutch oven.\n",
    ),
}


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")} | {
        "CONTAINERS_CONF": str(conf)
    }


@pytest.fixture(scope="module")
def image(engine_env: dict[str, str]) -> str:
    t0 = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "scripts" / "build_image.sh")],
        env=engine_env | {"IMAGE": IMAGE, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}", env=engine_env))
    print(f"\nimage {IMAGE}: {size / 1e6:.0f} MB, build {time.monotonic() - t0:.0f} s")
    return IMAGE


def _query(url: str, headers: dict[str, str], q: str) -> list[dict[str, Any]]:
    """The hits of ``GET /query`` (collapsed tree, the recipe's budget)."""
    r = httpx.get(
        f"{url}/query", params={"q": q, "max_tokens": BUDGET}, headers=headers, timeout=60
    )
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def _sources(hits: list[dict[str, Any]]) -> list[str]:
    return [h["source"] for h in hits if h["source"]]


def _clients_recipe_ids(url: str, token: str, question: str, vector: list[float]) -> list[str]:
    """Run docs/clients.md's Python collapsed-tree recipe with the real client against ``url``; only
    the client line changes (the published port, and the token as the client's API key)."""
    line = f'QdrantClient(url="{RECIPE_URL}")'
    code = recipe_block("python")
    assert line in code, "docs/clients.md's client line changed: update this test"
    code = code.replace(line, f'QdrantClient(url="{url}", api_key="{token}")')
    scope: dict[str, Any] = {"vector": vector, "question": question}  # the recipe is hybrid
    with warnings.catch_warnings():  # plain http on loopback is the point here
        warnings.filterwarnings("ignore", "Api key is used with an insecure connection")
        exec(code, scope)
    assert scope["context"]
    return [str(hit.id) for hit in scope["taken"]]


def _check_clients(url: str, token: str, question: str, source: str) -> None:
    """From the host: /query finds ``source``; the real QdrantClient through the REST API gets the
    same node ids; without the token the client is refused; /dashboard serves the page."""
    headers = {"Authorization": f"Bearer {token}"}
    vector = SentenceTransformerEmbedder().embed_query(question).tolist()
    # The new file is searchable as soon as its leaves are written (leaves first); its summaries
    # follow. Compare only while the store holds still: /query before and after the recipe agree.
    deadline = time.monotonic() + 120
    while True:
        hits = _query(url, headers, question)
        recipe = _clients_recipe_ids(url, token, question, vector)
        ids = [h["node_id"] for h in hits]
        if ids == [h["node_id"] for h in _query(url, headers, question)]:
            break
        assert time.monotonic() < deadline, "the tree never held still for two queries"
        time.sleep(1)
    assert source in _sources(hits)
    assert recipe == ids
    with pytest.raises(UnexpectedResponse) as refused:
        QdrantClient(url=url).count("adrap")
    assert refused.value.status_code == 401

    page = httpx.get(f"{url}/dashboard", timeout=30)
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "<html" in page.text.lower()
    layers = httpx.get(f"{url}/dashboard/api/layers", headers=headers, timeout=30)
    assert layers.status_code == 200, layers.text
    assert [row["layer"] for row in layers.json()["layers"]][-1] == 0


def test_image_runs_read_only_as_non_root_and_serves_a_dropped_file_to_every_client(
    image: str, engine_env: dict[str, str], tmp_path: Path
) -> None:
    inspected = json.loads(podman("image", "inspect", image, env=engine_env))[0]
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["watch", "/data", "--polling"]
    # podman reports the HEALTHCHECK beside Config, docker inside it; absent = OCI format build.
    health = inspected.get("Healthcheck") or config.get("Healthcheck")
    assert health is not None, "no HEALTHCHECK: build with --format docker"
    assert "/readyz" in " ".join(health["Test"])
    assert "/state" in config["Volumes"]
    assert "HF_HUB_OFFLINE=1" in config["Env"]

    share = tmp_path / "share"
    shutil.copytree(SAMPLE, share)
    share.chmod(0o755)
    token = uuid.uuid4().hex
    token_file = tmp_path / "http_token"
    token_file.write_text(token)
    token_file.chmod(0o644)  # the daemon runs as uid 10001
    headers = {"Authorization": f"Bearer {token}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with container(image, engine_env, share, port, token_file) as name:
        cold = wait_ready(url, timeout=600)
        assert httpx.get(f"{url}/query", params={"q": "fox"}, timeout=30).status_code == 401
        assert "aesops-fables.md" in _sources(_query(url, headers, "sour grapes fox"))
        idle = memory_bytes(name, engine_env)

        searchable = []
        for file, (question, text) in NEW_DOCS.items():
            t0 = time.monotonic()
            (share / file).write_text(text)
            while file not in _sources(_query(url, headers, question)):
                assert time.monotonic() - t0 < 120, f"{file} never became searchable"
                time.sleep(0.25)
            searchable.append(time.monotonic() - t0)
        first, (question, _) = next(iter(NEW_DOCS.items()))
        _check_clients(url, token, question, first)
        after = memory_bytes(name, engine_env)

        stopped, code = sigterm_to_exit(name, engine_env)
        logs = subprocess.run(
            ["podman", "logs", name], env=engine_env, capture_output=True, text=True
        ).stderr
    print(
        f"\ncold start to /readyz (first build of {len(list(SAMPLE.iterdir()))} files): {cold:.1f} s"
        f"\nnew file -> searchable: p50 {statistics.median(searchable):.1f} s"
        f" ({', '.join(f'{s:.1f}' for s in searchable)})"
        f"\nmemory (podman stats): {idle / 2**20:.0f} MiB ready, {after / 2**20:.0f} MiB after"
        f" {len(NEW_DOCS)} updates and the queries\nSIGTERM -> exit: {stopped:.2f} s"
    )
    # It stopped on the signal by itself (sigterm_to_exit fails if it still runs after 60 s), and
    # through adrap's handler: exit 0 and its log line (the default handler would exit 143).
    assert code == 0, logs[-3000:]
    assert "received SIGTERM" in logs


def test_compose_a_runs_with_podman_compose(
    image: str, engine_env: dict[str, str], tmp_path: Path
) -> None:
    compose = compose_command()
    assert compose is not None, "podman-compose is a test dependency (pip install -e .[test])"
    share = tmp_path / "share"
    shutil.copytree(SAMPLE, share)
    port = free_port()
    project = f"adrap-test-{uuid.uuid4().hex[:8]}"
    env = engine_env | {"ADRAP_IMAGE": image, "ADRAP_DATA": str(share), "ADRAP_PORT": str(port)}
    deploy = tmp_path / "deploy"  # a copy, to hold the secret file the compose file names
    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("wheelhouse"))
    token = uuid.uuid4().hex
    (deploy / "secrets").mkdir(exist_ok=True)
    (deploy / "secrets" / "http_token").write_text(token)
    base = [compose, "-p", project, "-f", str(deploy / "compose.yaml")]
    headers = {"Authorization": f"Bearer {token}"}
    up = subprocess.run([*base, "up", "-d"], env=env, capture_output=True, text=True, timeout=600)
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        wait_ready(f"http://127.0.0.1:{port}", timeout=600)
        hits = _query(f"http://127.0.0.1:{port}", headers, "tortoise and hare")
        assert "aesops-fables.md" in _sources(hits)
    finally:
        subprocess.run([*base, "down", "-v"], env=env, capture_output=True, timeout=300)
