import { state } from "../static/state.js";
import { layerHeading, mark, nodeRow, sourceLabel } from "../static/tree.js";
import { eq, ok, test } from "./check.js";

const leaf = { node_id: "n1", layer: 0, kind: "leaf", n_tokens: 12, source: "a.md", char_start: 3,
  char_end: 90, n_sources: 1, n_children: 0, preview: "<b>bold?</b>" };

test("tree: sourceLabel names a leaf's span, or how many files a summary covers", () => {
  eq(sourceLabel(leaf), "a.md:3–90");
  eq(sourceLabel({ source: null, sources_capped: true, n_sources: 9 }), "many files");
  eq(sourceLabel({ source: null, n_sources: 4 }), "4 files");
  eq(sourceLabel({ source: null, n_sources: 0 }), null);
});

test("tree: layerHeading says how many nodes an exported file holds", () => {
  eq(layerHeading({ layer: 0, count: 10 }), "Leaves (layer 0) — 10 nodes");
  eq(layerHeading({ layer: 2, count: 10, embedded: 4 }), "Layer 2 — 10 nodes, 4 in this file");
  eq(layerHeading({ layer: 2, count: 10, embedded: 10 }), "Layer 2 — 10 nodes");
});

test("tree: nodeRow shows document text as text, never as HTML", () => {
  state.rows.clear();
  const li = nodeRow(leaf);
  eq(li.querySelector(".text").textContent, "<b>bold?</b>");
  eq(li.querySelector("b"), null);
  eq([li.querySelector(".kind").textContent, li.querySelector(".src").textContent], ["leaf", "a.md:3–90"]);
  ok(li.querySelector(".toggle").disabled, "a leaf cannot be opened");
  ok(state.rows.get("n1").has(li), "the row is found by its node's id");
  state.rows.clear();
});

test("tree: mark shows the last query's rank on a row, and clears it", () => {
  const li = nodeRow(Object.assign({}, leaf, { node_id: "n2", n_children: 3, layer: 1 }));
  state.hits = new Map([["n2", 4]]);
  mark(li);
  ok(li.classList.contains("hit"));
  eq(li.querySelector(".rank").textContent, "#4");
  state.hits = new Map();
  mark(li);
  ok(!li.classList.contains("hit"));
  eq(li.querySelector(".rank").textContent, "");
  eq(li.querySelector(".toggle").title, "open its 3 children");
  state.rows.clear();
});
