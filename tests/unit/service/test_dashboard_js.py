"""The dashboard's script modules, unit-tested in a real browser (Debian's headless Chromium).

The tests are JavaScript (``dashboard_js/*.test.js``, on the tiny runner of ``check.js``): each
imports the page's modules as they are (``ingestor/service/dashboard/static/``, ES modules) and
checks their functions: formatting, reading the API's answers and an exported file's blob, the
state the views keep, and the picture's maths and drawing (pixels of real canvases). A tiny HTTP
server serves both folders from a copy (modules cannot be imported from ``file://``); the page
runs every test and leaves the results in ``window.adrapTests``. Each JavaScript test is one
pytest test of the same name, which fails with the JavaScript test's message. Skipped, saying
why, where chromium, chromedriver or selenium are missing.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingestor.service import dashboard
from ingestor.service.dashboard.page import render_page
from ingestor.service.dashboard.picture import Link, Touched, b64, lay_out, picture_json
from testkit.browser import BROWSER_MISSING, chrome

HERE = Path(__file__).with_name("dashboard_js")
STATIC = Path(dashboard.__file__).with_name("static")
#: A test's name, as check.js asks for it: the string literal right after ``test(``.
NAME = re.compile(r'^test\("((?:[^"\\]|\\.)*)"', re.M)

pytestmark = pytest.mark.skipif(BROWSER_MISSING is not None, reason=str(BROWSER_MISSING))


def js_files() -> list[str]:
    return sorted(p.name for p in HERE.glob("*.test.js"))


def js_tests() -> list[str]:
    return [name for f in js_files() for name in NAME.findall((HERE / f).read_text())]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Files of one folder, modules as ``text/javascript``, no log lines."""

    def guess_type(self, path: Any) -> str:
        return "text/javascript" if str(path).endswith(".js") else super().guess_type(path)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser = chrome()
    try:
        yield browser
    finally:
        browser.quit()


def severe(driver: Any) -> list[str]:
    """The errors the browser logged since the last look (script errors, blocked requests)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture(scope="module")
def results(driver: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run every JavaScript test once in the page: ``{"results": {name: {...}}, "errors"}``."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    root = tmp_path_factory.mktemp("dashboard-js")
    shutil.copytree(STATIC, root / "static")
    shutil.copytree(HERE, root / "tests")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        severe(driver)
        files = ",".join(js_files())
        driver.get(f"http://127.0.0.1:{port}/tests/runner.html?files={files}")
        try:
            got = WebDriverWait(driver, 30).until(
                lambda d: d.execute_script("return window.adrapTests")
            )
        except TimeoutException:
            got = {"results": [], "errors": ["the runner page did not finish within 30 s"]}
        out = {r["name"]: r for r in got["results"]}
        yield {
            "results": out,
            "errors": got["errors"] + severe(driver),
            "repeated": len(got["results"]) - len(out),
        }
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("name", js_tests())
def test_js(results: dict[str, Any], name: str) -> None:
    got = results["results"].get(name)
    assert got is not None, f"{name}: did not run; the page said: {results['errors']}"
    assert got["ok"], f"{name} failed:\n{got['message']}"


def test_every_test_file_loads_and_every_test_runs_once(results: dict[str, Any]) -> None:
    assert results["errors"] == []
    assert results["repeated"] == 0, "two tests of the same name: names must be unique"
    assert sorted(results["results"]) == sorted(js_tests())
    assert len(js_tests()) >= 40


def exported_tree() -> dict[str, Any]:
    """A small tree as ``adrap explore`` embeds it: a summary over three leaves of two folders,
    with its picture (made by the daemon's own code) and a map of each layer."""
    top, *leaves = (str(uuid.UUID(int=k + 1)) for k in range(4))
    files = ["docs/a/x.md", "docs/b/y.md", "docs/a/z.md"]
    links = [Link(top, 1, (), tuple(leaves), None, 2.0)]
    links += [Link(i, 0, (top,), (), f, 1.0) for i, f in zip(leaves, files, strict=True)]
    layout = lay_out(links)
    picture = picture_json(layout, "t", "export", Touched(1.5, "nodes written since the build"))

    def points(layer: int, xy: list[int]) -> dict[str, Any]:
        start, count = layout.layer_range(layer)
        return {
            "layer": layer,
            "version": "export",
            "start": start,
            "count": count,
            "xy": b64(np.array(xy), "<u2"),
            "explained": [0.7, 0.3],
            "sampled": count,
        }

    picture["map_layer"] = 0
    picture["maps"] = {"0": points(0, [0, 0, 65535, 0, 0, 65535]), "1": points(1, [9, 9])}
    leaf = {
        "layer": 0,
        "kind": "leaf",
        "n_tokens": 5,
        "char_start": 0,
        "char_end": 40,
        "chunk_index": 0,
        "children": [],
        "parents": [top],
        "updated_at": 1.0,
    }
    nodes = {
        i: leaf | {"node_id": i, "source": f, "sources": [f], "text": "<i>" + f}
        for i, f in zip(leaves, files, strict=True)
    }
    nodes[top] = leaf | {
        "node_id": top,
        "layer": 1,
        "kind": "summary",
        "source": None,
        "sources": files,
        "children": leaves,
        "parents": [],
        "text": "all of it",
        "updated_at": 2.0,
    }
    return {
        "tree": "t",
        "layers": [
            {"layer": 1, "count": 1, "embedded": 1},
            {"layer": 0, "count": 3, "embedded": 3},
        ],
        "nodes": nodes,
        "order": {"1": [top], "0": leaves},
        "truncated": False,
        "note": "A snapshot of tree 't'.",
        "updates": {"documents": 3},
        "picture": picture,
    }


def test_the_page_runs_its_inlined_modules_under_its_csp(driver: Any, tmp_path: Path) -> None:
    """The page as the daemon and ``adrap explore`` write it: the modules inlined as one
    script, allowed by the CSP's hash, opened from disk (a file cannot import modules)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = tmp_path / "tree.html"
    page.write_text(render_page(exported_tree()), encoding="utf-8")
    severe(driver)
    driver.get(page.as_uri())
    ready = "body[data-ready='1'][data-picture='1'] details.layer[open] ul.nodes.loaded"
    WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ready))
    row = driver.find_element(By.CSS_SELECTOR, "details.layer[open] li.node")
    row.find_element(By.CSS_SELECTOR, ".toggle").click()
    kids = "li.node > ul.children.loaded > li.node .text"
    WebDriverWait(driver, 20).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, kids)) == 3)
    texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, kids)]
    assert sorted(texts) == ["<i>docs/a/x.md", "<i>docs/a/z.md", "<i>docs/b/y.md"]
    assert driver.find_element(By.ID, "note").text == "A snapshot of tree 't'."
    assert driver.find_element(By.ID, "map-note").text.startswith("Leaves: 3 nodes")
    assert driver.find_element(By.ID, "icicle").get_attribute("data-hits") == "0"
    assert severe(driver) == []  # nothing blocked by the CSP, no script error
