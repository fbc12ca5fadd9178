import { exportedSource, pageOf, previewOf } from "../static/exported.js";
import { eq, rejects, test } from "./check.js";

function node(id, layer, extra) {
  return Object.assign({
    node_id: id, layer, kind: layer ? "summary" : "leaf", n_tokens: 7, source: layer ? null : "a.md",
    char_start: 0, char_end: 9, sources: ["a.md"], children: [], parents: [], text: "t " + id,
  }, extra);
}

function blob() {
  const kids = Array.from({ length: 120 }, (_, i) => "c" + i);
  const nodes = { top: node("top", 1, { children: kids }) };
  for (const c of kids.slice(0, 100)) nodes[c] = node(c, 0, { parents: ["top", "gone"] });
  return {
    tree: "t", layers: [{ layer: 1, count: 1 }, { layer: 0, count: 120, embedded: 100 }],
    order: { 1: ["top"], 0: kids.slice(0, 100) }, nodes, updates: { updates: [] },
    picture: { n: 1, maps: { 0: { layer: 0 } } },
  };
}

test("exported: previewOf cuts the text and counts sources and children", () => {
  const n = node("x", 1, { text: "y".repeat(300), sources: ["a", "b"], children: ["c"], section: "" });
  eq(previewOf(n), {
    node_id: "x", layer: 1, kind: "summary", n_tokens: 7, source: null, char_start: 0, char_end: 9,
    n_sources: 2, section: null, locator: null, sources_capped: false, n_children: 1,
    preview: "y".repeat(160),
  });
});

test("exported: pageOf pages 50 at a time from a number or its text", () => {
  const ids = Array.from({ length: 120 }, (_, i) => i);
  eq(pageOf(ids, null), { start: 0, ids: ids.slice(0, 50), more: true });
  eq(pageOf(ids, "50").start, 50);
  eq(pageOf(ids, 100), { start: 100, ids: ids.slice(100), more: false });
});

test("exported: a layer's pages give the next offset as text, then null", async () => {
  const src = exportedSource(blob());
  const first = await src.layer(0, null);
  eq([first.layer, first.nodes.length, first.next], [0, 50, "50"]);
  const last = await src.layer(0, first.next);
  eq([last.nodes.length, last.next], [50, null]);
  eq((await src.layer(5, null)).nodes, []);
});

test("exported: children not in the file are counted as missing", async () => {
  const src = exportedSource(blob());
  const page = await src.children("top", 100);
  eq([page.total, page.offset, page.nodes.length, page.missing, page.next], [120, 100, 0, 20, null]);
  const first = await src.children("top", 0);
  eq([first.nodes.length, first.missing, first.next], [50, 0, 50]);
  eq((await src.children("nowhere", 0)).total, 0);
});

test("exported: a node lists the parents in the file, and one not in it is an error", async () => {
  const src = exportedSource(blob());
  const n = await src.node("c1");
  eq(n.parents_preview.map((p) => p.node_id), ["top"]);
  eq([n.n_children, n.n_sources, n.text], [0, 1, "t c1"]);
  await rejects(src.node("c110"), /node c110 is not in this file/);
});

test("exported: no search; the picture and its maps by layer", async () => {
  const src = exportedSource(blob());
  eq(src.query, null);
  eq((await src.picture()).n, 1);
  eq(await src.map(0), { layer: 0 });
  eq(await exportedSource({ nodes: {} }).picture(), null);
  eq((await src.layers()).tree, "t");
});
