// A query through the daemon's own /query (the JSON of `adrap query --json`): its hits listed in
// score order, marked with their ranks on the tree's rows, counted per layer, and on the picture.
import { $, el, showError } from "./dom.js";
import { layerTag, preview } from "./format.js";
import { showNode } from "./node.js";
import { state } from "./state.js";
import { mark } from "./tree.js";

// node id -> rank (1-based), in the hits' order
export function ranksOf(hits) {
  return new Map(hits.map((h, i) => [h.node_id, i + 1]));
}

// layer (as text, like a section's data-layer) -> how many hits it holds
export function hitsPerLayer(hits) {
  const per = new Map();
  for (const h of hits) per.set(String(h.layer), (per.get(String(h.layer)) || 0) + 1);
  return per;
}

// a layer heading's count of hits ("" for none)
export function hitsLabel(n) {
  return n ? n + " hit" + (n > 1 ? "s" : "") : "";
}

// a hit's line after its score
export function hitLine(h) {
  return layerTag(h.layer) + " " + h.n_tokens + " tok · " + preview(h.text);
}

export function querySummary(out) {
  return out.hits.length + " nodes in score order, " + out.total_tokens + " of " + out.max_tokens +
    " tokens used (" + out.mode + ", " + Math.round(out.seconds * 1000) + " ms)";
}

function showHits(out) {
  state.hits = ranksOf(out.hits);
  state.picture.setHits(out.hits.map((h) => h.node_id));
  const list = $("hits");
  list.replaceChildren();
  for (const h of out.hits) {
    const li = el("li");
    li.dataset.nodeId = h.node_id;
    li.append(el("span", "score", h.score.toFixed(3)));
    li.append(hitLine(h));
    li.addEventListener("click", () => showNode(h.node_id));
    list.append(li);
  }
  $("results-summary").textContent = querySummary(out);
  for (const set of state.rows.values()) for (const li of set) mark(li);
  const per = hitsPerLayer(out.hits);
  for (const sec of document.querySelectorAll("details.layer")) {
    sec.querySelector(".hits-in").textContent = hitsLabel(per.get(sec.dataset.layer));
  }
  $("results").hidden = false;
  $("results").dataset.state = "done";
}

// the search form's submit
export async function runQuery(event) {
  event.preventDefault();
  if (!state.src.query) return;
  $("results").dataset.state = "running";
  showError("");
  try {
    showHits(await state.src.query({ q: $("q").value, mode: $("qmode").value, max_tokens: $("budget").value }));
  } catch (err) {
    $("results").dataset.state = "failed";
    showError("query: " + err.message);
  }
}
