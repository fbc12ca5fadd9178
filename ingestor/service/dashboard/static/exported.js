// The data source of an `adrap explore` file: the JSON blob embedded in the page, answered in
// the shapes of the daemon's API (api.js). The file may hold part of the tree only: a node not
// in it is an error, children not in it are counted as missing. No search (query is null).
import { PAGE } from "./api.js";
import { preview } from "./format.js";

// a node of the blob as the API previews it
export function previewOf(n) {
  return {
    node_id: n.node_id, layer: n.layer, kind: n.kind, n_tokens: n.n_tokens, source: n.source,
    char_start: n.char_start, char_end: n.char_end, n_sources: n.sources.length,
    section: n.section || null, locator: n.locator || null,
    sources_capped: Boolean(n.sources_capped),
    n_children: n.children.length, preview: preview(n.text),
  };
}

// the page of ids at offset (a number, or its text; none: 0), and whether more follow
export function pageOf(ids, offset) {
  const start = Number(offset || 0);
  return { start, ids: ids.slice(start, start + PAGE), more: start + PAGE < ids.length };
}

export function exportedSource(data) {
  const nodes = data.nodes;
  return {
    layers: async () => ({ tree: data.tree, layers: data.layers }),
    layer: async (n, offset) => {
      const p = pageOf(data.order[String(n)] || [], offset);
      const next = p.more ? String(p.start + PAGE) : null;
      return { layer: n, nodes: p.ids.map((id) => previewOf(nodes[id])), next };
    },
    node: async (id) => {
      const n = nodes[id];
      if (!n) throw new Error("node " + id + " is not in this file (see the note above)");
      const parents = n.parents.filter((p) => nodes[p]).map((p) => previewOf(nodes[p]));
      const counts = { n_children: n.children.length, n_sources: n.sources.length };
      return Object.assign({}, n, { parents_preview: parents }, counts);
    },
    children: async (id, offset) => {
      const n = nodes[id];
      const p = pageOf(n ? n.children : [], offset);
      const present = p.ids.filter((c) => nodes[c]);
      return {
        node_id: id, total: n ? n.children.length : 0, offset: p.start,
        nodes: present.map((c) => previewOf(nodes[c])), missing: p.ids.length - present.length,
        next: p.more ? p.start + PAGE : null,
      };
    },
    updates: async () => data.updates,
    query: null,
    picture: async () => data.picture || null,
    map: async (n) => data.picture.maps[String(n)],
  };
}
