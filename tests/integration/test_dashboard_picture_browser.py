"""The picture of the tree in a real browser: Debian's headless Chromium, driven by Selenium.

A daemon watches the sample documents sorted into folders, with a bearer token, and applies one
update; the page draws the icicle and the map (non-empty canvases), a click on either opens that
node in the panel, a query's hits are marked on both, and the nodes the update wrote are marked.
``adrap explore`` embeds the same picture in its file. Screenshots go to ``test-artifacts/``.
Skipped, saying why, where chromium, chromedriver or selenium are missing (CI).
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from tests.integration.test_daemon import SAMPLE, wait_for, watching
from tests.integration.test_dashboard_browser import (
    QUESTION,
    TOKEN,
    adrap,
    api,
    browser,  # noqa: F401 (fixture)
    pytestmark,  # noqa: F401 (the same skips)
    shot,
    wait,
)

#: Where each sample document goes: folders, so the picture has colours to tell apart.
FOLDERS = {
    "declaration-of-independence.html": "founding/documents",
    "bill-of-rights.rst": "founding/amendments",
    "gettysburg-address.txt": "speeches",
    "aesops-fables.md": "fables",
}
#: Painted pixels of a canvas (alpha > 0), counted in the page.
PAINTED = """
const c = document.getElementById(arguments[0]);
const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
let n = 0;
for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
return n;
"""


def sorted_sample(folder: Path) -> None:
    for name, sub in FOLDERS.items():
        (folder / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE / name, folder / sub / name)


def node_ids(picture: dict[str, Any]) -> list[str]:
    raw = base64.b64decode(picture["ids"])
    return [str(uuid.UUID(bytes=raw[k : k + 16])) for k in range(0, len(raw), 16)]


def click_at(driver: Any, canvas: Any, x: float, y: float) -> None:
    """Click ``canvas`` at (x, y) css px from its top-left corner."""
    from selenium.webdriver.common.action_chains import ActionChains

    size = canvas.size
    ActionChains(driver).move_to_element_with_offset(
        canvas, round(x - size["width"] / 2), round(y - size["height"] / 2)
    ).click().perform()


def shown_id(driver: Any) -> str:
    """The id of the node the panel shows (its first row)."""
    from selenium.webdriver.common.by import By

    wait(driver, "#detail pre.text")
    return str(driver.find_element(By.CSS_SELECTOR, "#detail dl.meta dd").text)


def test_the_picture_shows_the_tree_opens_nodes_and_marks_hits_and_the_update(
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    folder = tmp_path / "sample"
    sorted_sample(folder)
    state = tmp_path / "state"
    with watching(folder, state, {"ADRAP_WATCH__HTTP_TOKEN": TOKEN}) as w:
        w.wait_ready()
        # one update: a new document in speeches/
        text = (SAMPLE / "gettysburg-address.txt").read_text(encoding="utf-8")
        (folder / "speeches" / "again.txt").write_text(text.replace("nation", "people"))
        base = w.base

        def applied() -> bool:
            req_status = api(base, "/status")
            return int(req_status.get("updates_applied", 0)) >= 1

        wait_for(applied, 240, w)
        pic = api(base, "/dashboard/api/picture")
        ids = node_ids(pic)
        touched = base64.b64decode(pic["touched"])
        assert len(touched) >= 4  # the new leaves at least
        assert "last update" in pic["touched_note"]
        assert {f["name"] for f in pic["folders"]} == {"founding", "speeches", "fables"}

        browser.get(f"{base}/dashboard#token={TOKEN}")
        wait(browser, "body[data-picture='1']")
        icicle = browser.find_element(By.ID, "icicle")
        chart = browser.find_element(By.ID, "map")
        assert browser.execute_script(PAINTED, "icicle") > 1000
        assert browser.execute_script(PAINTED, "map") > 100
        legend = browser.find_element(By.ID, "legend").text
        for name in ("founding", "speeches", "fables", "last update"):
            assert name in legend

        # click the middle of the top band: that node opens in the panel
        layers = pic["layers"]
        band = icicle.size["height"] / len(layers)
        click_at(browser, icicle, icicle.size["width"] / 2, band / 2)
        wait(browser, "#icicle[data-selected]:not([data-selected=''])")
        picked = icicle.get_attribute("data-selected")
        assert shown_id(browser) == picked
        top = layers[-1]
        assert picked in ids[top["start"] : top["start"] + top["count"]]

        # click a point of the map: its node opens
        layer = int(chart.get_attribute("data-layer"))
        m = api(base, f"/dashboard/api/picture/map/{layer}")
        xy = base64.b64decode(m["xy"])
        k = m["count"] // 2
        x, y = (int.from_bytes(xy[4 * k + o : 4 * k + o + 2], "little") for o in (0, 2))
        side = chart.size["width"] - 16  # MAP_PAD on both sides
        click_at(browser, chart, 8 + x * side / 65535, 8 + (65535 - y) * side / 65535)
        wait_for(lambda: icicle.get_attribute("data-selected") != picked, 30)
        near = icicle.get_attribute("data-selected")
        assert near in ids[m["start"] : m["start"] + m["count"]]
        assert shown_id(browser) == near

        # a query: its hits are marked on the icicle, and those of the mapped layer on the map
        want = json.loads(
            adrap(state, "query", QUESTION, "--max-tokens", "600", "--json", token=TOKEN)
        )
        hit_ids = [h["node_id"] for h in want["hits"]]
        assert hit_ids
        browser.find_element(By.ID, "q").send_keys(QUESTION)
        budget = browser.find_element(By.ID, "budget")
        budget.clear()
        budget.send_keys("600")
        browser.find_element(By.CSS_SELECTOR, "#search button").click()
        wait(browser, "#results[data-state='done']")
        assert icicle.get_attribute("data-hits") == str(len(hit_ids))
        in_layer = set(ids[m["start"] : m["start"] + m["count"]])
        assert chart.get_attribute("data-hits") == str(len(in_layer & set(hit_ids)))
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []  # no CSP violation, no script error
        shot(browser, "dashboard-picture.png")
        assert w.stop() == 0


def test_explore_embeds_the_picture_and_its_maps(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    folder = tmp_path / "sample"
    sorted_sample(folder)
    state = tmp_path / "state"
    adrap(state, "build", str(folder))
    out = tmp_path / "tree.html"
    adrap(state, "explore", "-o", str(out), "--max-nodes", "5")
    browser.get(out.as_uri())
    wait(browser, "body[data-picture='1']")
    assert browser.execute_script(PAINTED, "icicle") > 1000
    assert browser.execute_script(PAINTED, "map") > 100
    assert "no update since the last full build" in browser.find_element(By.ID, "legend").text
    options = browser.find_elements(By.CSS_SELECTOR, "#map-layer option")
    assert len(options) >= 2
    options[1].click()  # another layer's map, from the file
    wait(browser, f"#map[data-layer='{options[1].get_attribute('value')}']")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    shot(browser, "explore-picture.png")
