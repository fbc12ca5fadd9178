"""The dashboard in a real browser: Debian's headless Chromium, driven by Selenium.

A daemon watches the sample folder with a bearer token; the page, opened with ``#token=...``,
lists the top layer, opens a node's children, and runs a query whose highlighted nodes are, in
order, those of ``adrap query --json``. ``adrap explore`` writes a self-contained file that opens
offline and shows the top layer. Screenshots go to ``test-artifacts/`` (git-ignored; paths
printed). Skipped, saying why, where chromium, chromedriver or selenium are missing (CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.browser import CHROMEDRIVER, CHROMIUM, HAVE_SELENIUM, chrome
from tests.integration.test_daemon import SAMPLE, watching

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TOKEN = "dashboard-test-token"
QUESTION = "Why did the fox say the grapes were sour?"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
        "chromium-driver); absent here",
    ),
    pytest.mark.skipif(
        not HAVE_SELENIUM, reason="needs selenium (pip install -e '.[test]'); absent here"
    ),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, css: str, timeout: float = 30) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def shot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def adrap(state: Path, *args: str, token: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRAP_")}
    env |= {"ADRAP_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1"}
    if token:
        env["ADRAP_WATCH__HTTP_TOKEN"] = token
    done = subprocess.run(
        [sys.executable, "-m", "ingestor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def api(base: str, path: str) -> Any:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_the_page_expands_a_node_and_highlights_exactly_the_query_s_nodes(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    folder = tmp_path / "sample"
    shutil.copytree(SAMPLE, folder)
    state = tmp_path / "state"
    with watching(folder, state, {"ADRAP_WATCH__HTTP_TOKEN": TOKEN}) as w:
        w.wait_ready()
        browser.get(f"{w.base}/dashboard#token={TOKEN}")
        wait(browser, "body[data-ready='1']")
        assert "token" not in browser.current_url  # taken out of the address bar at once
        layers = api(w.base, "/dashboard/api/layers")["layers"]
        assert len(layers) >= 2
        top = wait(browser, "details.layer[open] ul.nodes.loaded")
        rows = top.find_elements(By.CSS_SELECTOR, ":scope > li.node")
        assert len(rows) == layers[0]["count"]

        # expand the first node with children: its children load lazily, all of them
        node = next(r for r in rows if r.find_element(By.CSS_SELECTOR, ".toggle").is_enabled())
        node_id = node.get_attribute("data-node-id")
        node.find_element(By.CSS_SELECTOR, ".toggle").click()
        kids = wait(browser, f"li.node[data-node-id='{node_id}'] > ul.children.loaded")
        shown = [
            li.get_attribute("data-node-id")
            for li in kids.find_elements(By.CSS_SELECTOR, ":scope > li.node")
        ]
        assert shown == api(w.base, f"/dashboard/api/node/{node_id}")["children"]
        node.find_element(By.CSS_SELECTOR, ".label").click()
        wait(browser, "#detail pre.text")
        assert browser.find_element(By.CSS_SELECTOR, "#detail pre.text").text.strip()

        # open every layer so each hit has a row in the tree (the sample is one page per layer)
        for sec in browser.find_elements(By.CSS_SELECTOR, "details.layer:not([open]) > summary"):
            sec.click()
        for layer in layers:
            assert layer["count"] <= 50
            wait(browser, f"details.layer[data-layer='{layer['layer']}'] > ul.nodes.loaded")

        want = json.loads(
            adrap(state, "query", QUESTION, "--max-tokens", "600", "--json", token=TOKEN)
        )
        assert want.get("answered_by") == "adrap watch"
        browser.find_element(By.ID, "q").send_keys(QUESTION)
        budget = browser.find_element(By.ID, "budget")
        budget.clear()
        budget.send_keys("600")
        browser.find_element(By.CSS_SELECTOR, "#search button").click()
        wait(browser, "#results[data-state='done']")
        listed = [
            li.get_attribute("data-node-id")
            for li in browser.find_elements(By.CSS_SELECTOR, "#hits li")
        ]
        ids = [h["node_id"] for h in want["hits"]]
        assert ids
        assert listed == ids
        ranked = {}
        for li in browser.find_elements(By.CSS_SELECTOR, "details.layer > ul.nodes > li.node.hit"):
            rank = li.find_element(By.CSS_SELECTOR, ":scope > .row .rank").text
            ranked[li.get_attribute("data-node-id")] = int(rank.lstrip("#"))
        assert sorted(ranked, key=ranked.__getitem__) == ids  # every hit, in score order
        summary = browser.find_element(By.ID, "results-summary").text
        assert f"{want['total_tokens']} of 600 tokens" in summary
        shot(browser, "dashboard.png")
        assert w.stop() == 0


def test_explore_writes_one_self_contained_file_that_shows_the_top_layer(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    state = tmp_path / "state"
    adrap(state, "build", str(SAMPLE))
    out = tmp_path / "tree.html"
    adrap(state, "explore", "-o", str(out), "--max-nodes", "5")
    html = out.read_text(encoding="utf-8")
    assert not re.search(
        r"""<(script|link|img|iframe)[^>]+(src|href)\s*=\s*["']?(https?:)?//""", html
    )
    assert "<script src" not in html
    assert '<link rel="stylesheet"' not in html

    browser.get(out.as_uri())
    wait(browser, "body[data-ready='1']")
    top = wait(browser, "details.layer[open] ul.nodes.loaded")
    assert top.find_elements(By.CSS_SELECTOR, ":scope > li.node")
    note = browser.find_element(By.ID, "note").text
    assert "of the tree's" in note  # 5 nodes: the file says it is partial
    assert "Search is off" in note
    assert not browser.find_element(By.ID, "q").is_enabled()
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []  # no blocked request, no script error (the CSP allows only the page)
    shot(browser, "explore.png")
