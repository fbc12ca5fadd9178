// The tree by layers, top summaries first: the top layer listed at once, the others when opened,
// a node's children in place when opened (each a page at a time). A query's hits are marked on
// every row showing them.
import { $, el, moreButton, showError } from "./dom.js";
import { layerTag } from "./format.js";
import { showNode } from "./node.js";
import { state } from "./state.js";

// where a row's node comes from: a leaf's file and span, or how many files are under a summary
export function sourceLabel(p) {
  if (p.source) return p.source + ":" + p.char_start + "–" + p.char_end;
  if (p.sources_capped) return "many files";
  if (p.n_sources) return p.n_sources + " files";
  return null;
}

// a layer's heading: its name and count (and how many of them an exported file holds)
export function layerHeading(l) {
  const name = l.layer === 0 ? "Leaves (layer 0)" : "Layer " + l.layer;
  let count = l.count + " nodes";
  if (l.embedded !== undefined && l.embedded < l.count) count += ", " + l.embedded + " in this file";
  return name + " — " + count;
}

// show on a row whether its node is one of the last query's hits, and its rank
export function mark(li) {
  const rank = state.hits.get(li.dataset.nodeId);
  li.classList.toggle("hit", rank !== undefined);
  li.querySelector(".rank").textContent = rank === undefined ? "" : "#" + rank;
}

// a row of the tree for a node's preview, its children loaded when first opened
export function nodeRow(p) {
  const li = el("li", "node");
  li.dataset.nodeId = p.node_id;
  li.dataset.layer = p.layer;
  const head = el("div", "row");
  const toggle = el("button", "toggle", p.n_children ? "▸" : "·");
  toggle.type = "button";
  toggle.disabled = !p.n_children;
  toggle.title = p.n_children ? "open its " + p.n_children + " children" : "a leaf";
  const label = el("span", "label");
  label.append(el("span", "kind k-" + p.kind, layerTag(p.layer)));
  label.append(el("span", "text", p.preview));
  const src = sourceLabel(p);
  if (src !== null) label.append(el("span", "src", src));
  label.append(el("span", "tok", p.n_tokens + " tok"));
  if (p.stale) label.append(el("span", "stale", "stale"));
  head.append(toggle, el("span", "rank"), label);
  const kids = el("ul", "nodes children");
  kids.hidden = true;
  li.append(head, kids);
  let loaded = false;
  toggle.addEventListener("click", async () => {
    kids.hidden = !kids.hidden;
    toggle.textContent = kids.hidden ? "▸" : "▾";
    li.classList.toggle("open", !kids.hidden);
    if (!loaded) {
      loaded = true;
      const t0 = performance.now();
      await loadChildren(kids, p.node_id, 0);
      performance.measure("adrap:expand", { start: t0 }); // read by bench/dashboard.py
    }
  });
  label.addEventListener("click", () => showNode(p.node_id));
  if (!state.rows.has(p.node_id)) state.rows.set(p.node_id, new Set());
  state.rows.get(p.node_id).add(li);
  mark(li);
  return li;
}

async function loadLayerPage(list, layer, offset) {
  try {
    const page = await state.src.layer(layer, offset);
    list.append(...page.nodes.map(nodeRow));
    if (page.next !== null) moreButton(list, "more of layer " + layer, () => loadLayerPage(list, layer, page.next));
    list.classList.add("loaded");
  } catch (err) {
    showError("layer " + layer + ": " + err.message);
  }
}

async function loadChildren(list, id, offset) {
  try {
    const page = await state.src.children(id, offset);
    list.append(...page.nodes.map(nodeRow));
    if (page.missing) list.append(el("li", "muted", page.missing + " children not in this file"));
    if (page.next !== null) moreButton(list, "more children", () => loadChildren(list, id, page.next));
    list.classList.add("loaded");
  } catch (err) {
    showError("children of " + id + ": " + err.message);
  }
}

// (re)list the layers; resolves when the top layer's first page is shown
export async function showLayers() {
  const data = await state.src.layers();
  $("tree-name").textContent = data.tree;
  document.title = "adrap · " + data.tree;
  const box = $("layers");
  box.replaceChildren();
  state.rows.clear();
  if (!data.layers.length) box.append(el("p", "muted", "The tree is empty."));
  let first = null;
  data.layers.forEach((l, i) => {
    const sec = el("details", "layer");
    sec.dataset.layer = l.layer;
    const summary = el("summary", null, layerHeading(l));
    summary.append(el("span", "hits-in"));
    const list = el("ul", "nodes");
    sec.append(summary, list);
    let loaded = false;
    const load = async () => {
      if (!loaded) {
        loaded = true;
        const t0 = performance.now();
        await loadLayerPage(list, l.layer, null);
        performance.measure("adrap:layer", { start: t0 }); // read by bench/dashboard.py
      }
    };
    sec.addEventListener("toggle", () => sec.open && load());
    box.append(sec);
    if (i === 0) {
      sec.open = true; // the top layer: shown and loaded at once
      loaded = true;
      first = loadLayerPage(list, l.layer, null);
    }
  });
  await first;
}
