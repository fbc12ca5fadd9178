// One node in the side panel: its text, where it comes from, its parents and its children (each
// clickable), and its rank in the last query.
import { $, el, moreButton, showError } from "./dom.js";
import { layerTag, localTime } from "./format.js";
import { state } from "./state.js";

// the node's facts as [name, value] rows; rank: its rank in the last query (none: undefined)
export function nodeFacts(n, rank) {
  const facts = [];
  const add = (k, v) => facts.push([k, v]);
  add("id", n.node_id);
  add("layer", n.layer + (n.layer === 0 ? " (leaf chunk)" : " (summary)"));
  add("tokens", n.n_tokens);
  if (n.layer === 0) {
    add("source", n.source + " · characters " + n.char_start + "–" + n.char_end + " · chunk " + n.chunk_index);
    if (n.locator) add("where", n.locator);
    if (n.section) add("section", n.section);
  } else {
    const more = n.sources.length < n.n_sources ? " … and " + (n.n_sources - n.sources.length) + " more" : "";
    if (n.sources_capped) add("sources", "more files than the tree's max_node_sources: not listed");
    else add("sources (" + n.n_sources + ")", n.sources.join(", ") + more);
    if (n.summarizer) add("summarizer", n.summarizer);
    if (n.stale) add("stale", "its children changed; its text is regenerated at the next refresh");
    if (n.drift) add("drift", driftText(n.drift));
  }
  add("updated", localTime(n.updated_at));
  if (rank !== undefined) add("query rank", "#" + rank);
  return facts;
}

// how much of a summary's children changed since its text was written (docs/operations.md)
export function driftText(d) {
  if (d.removed) return "it may hold a removed file's text: regenerated at the next update or refresh";
  const pct = (x) => Math.round(x * 100) + " %";
  const at = d.regenerate_at == null ? "" : "; regenerated at " + pct(d.regenerate_at);
  return d.tokens + " of its children's " + d.children_tokens + " tokens changed since it was written (" +
    pct(d.share) + at + ")";
}

// a list of previews, each opening its node (none: a note saying `empty`)
function links(items, empty) {
  if (!items.length) return el("p", "muted", empty);
  const ul = el("ul", "links");
  for (const p of items) {
    const li = el("li", null, layerTag(p.layer) + " · " + p.preview);
    li.dataset.nodeId = p.node_id;
    li.addEventListener("click", () => showNode(p.node_id));
    ul.append(li);
  }
  return ul;
}

async function loadLinks(list, id, offset) {
  const page = await state.src.children(id, offset);
  for (const li of links(page.nodes, "").children) list.append(li);
  if (page.next !== null) moreButton(list, "more children", () => loadLinks(list, id, page.next));
}

export async function showNode(id) {
  state.picture.select(id);
  const box = $("detail");
  for (const li of document.querySelectorAll("li.node.selected")) li.classList.remove("selected");
  for (const li of state.rows.get(id) || []) li.classList.add("selected");
  try {
    const n = await state.src.node(id);
    const meta = el("dl", "meta");
    for (const [k, v] of nodeFacts(n, state.hits.get(n.node_id))) meta.append(el("dt", null, k), el("dd", null, v));
    const kids = el("ul", "links");
    box.replaceChildren(el("h2", null, "Node"), meta, el("pre", "text", n.text),
      el("h3", null, "Parents (" + n.parents.length + ")"), links(n.parents_preview, "none: a top node"),
      el("h3", null, "Children (" + n.n_children + ")"), kids);
    if (n.n_children) loadLinks(kids, id, 0);
    else kids.replaceWith(el("p", "muted", "none: a leaf"));
  } catch (err) {
    showError(err.message);
  }
}
