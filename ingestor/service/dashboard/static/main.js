// adrap dashboard: the tree by layers (tree.js), a node (node.js), a query's hits (query.js), the
// last updates (updates.js) and the picture of the tree (picture-panel.js, picture.js). Plain
// JavaScript modules, no libraries, no build: the daemon puts them in the page as one inline
// script (ingestor/service/dashboard/page.py). Two sources of data with the same shapes: the
// daemon's /dashboard/api endpoints (api.js, the served page) or the JSON blob of an
// `adrap explore` file (exported.js). This module wires them to the page and starts it.
import { keepToken, live, takeTokenFromUrl } from "./api.js";
import { $, showError } from "./dom.js";
import { exportedSource } from "./exported.js";
import { showNode } from "./node.js";
import { loadPicture, showMapOf } from "./picture-panel.js";
import { create } from "./picture.js";
import { runQuery } from "./query.js";
import { state } from "./state.js";
import { showLayers } from "./tree.js";
import { refreshUpdates } from "./updates.js";

const blob = $("adrap-data").textContent.trim();
const embedded = blob ? JSON.parse(blob) : null;
state.src = embedded ? exportedSource(embedded) : live;
state.picture = create({
  icicle: $("icicle"),
  map: $("map"),
  onSelect: (id) => showNode(id),
  fetchMap: (n) => state.src.map(n),
  onStale: () => loadPicture(),
  onZoom: (zoomed) => {
    $("zoom-out").hidden = !zoomed;
  },
});

$("map-layer").addEventListener("change", (event) => showMapOf(Number(event.target.value)));
$("show-touched").addEventListener("change", (event) => state.picture.setTouched(event.target.checked));
$("zoom-out").addEventListener("click", () => state.picture.zoomOut());

async function start() {
  showError("");
  try {
    await showLayers();
    loadPicture(); // drawn when it comes (a big tree's first picture takes seconds)
    await refreshUpdates();
    document.body.dataset.ready = "1";
    performance.mark("adrap:ready"); // the first view is drawn (bench/dashboard.py reads it)
  } catch (err) {
    showError(err.message);
    if (/reconciling/.test(err.message)) setTimeout(start, 2000);
  }
}

$("search").addEventListener("submit", runQuery);
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  keepToken($("token").value);
  $("token-form").hidden = true;
  start();
});
if (embedded) {
  for (const e of $("search").elements) e.disabled = true;
  $("note").textContent = embedded.note;
  $("note").hidden = false;
} else {
  takeTokenFromUrl();
  setInterval(refreshUpdates, 10000);
}
start();
