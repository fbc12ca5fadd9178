// The daemon's state and its last updates (polled every 10 s by main.js): documents, pending
// events, quarantined and unreadable files, what each update changed. When a new update has
// landed, the layers and the picture are reloaded.
import { $, el, showError } from "./dom.js";
import { localTime } from "./format.js";
import { loadPicture } from "./picture-panel.js";
import { state } from "./state.js";
import { showLayers } from "./tree.js";

let lastUpdate; // the newest update's time at the last look (undefined before the first look)

// the state's facts as [name, value] rows (those the document has)
export function statusFacts(u) {
  const facts = [];
  const add = (k, v) => v !== undefined && v !== null && facts.push([k, v]);
  add("documents", u.documents);
  add("pending events", u.pending_events);
  add("ready", u.ready === undefined || u.ready === null ? undefined : String(u.ready));
  add("deletions paused", u.deletions_paused);
  add("awaiting confirmation", u.awaiting_confirmation);
  for (const [k, v] of Object.entries(u.state || {})) add(k.replaceAll("_", " "), v);
  const d = u.drift; // per subtree (docs/operations.md, Drift): the largest, how many due, repairs
  if (d) add("drift", "max " + d.max + ", " + d.due + " of " + d.subtrees + " subtrees past " +
    d.threshold + "; " + d.repairs + " repairs, " + d.repair_tokens + " tokens");
  const c = u.model_change; // a change of embedding model under way (docs/operations.md)
  if (c) add("model change", c.from + " → " + c.to + ": " + c.phase + ", " + c.nodes_done +
    " of " + c.nodes_total + " nodes embedded, started " + localTime(c.started_at));
  return facts;
}

// the files of one kind of unreadable ("stale" or "skipped"): how many, the lines listed, and
// the line saying how many more the daemon holds (null: none)
export function unreadList(u, kind) {
  const unread = u.unread || {};
  const rows = unread[kind + "_files"] || [];
  const total = unread[kind] || 0;
  const lines = rows.map((r) => r.source + " (since " + localTime(r.since) + "): " + r.reason);
  const more = total > rows.length ? "… " + (total - rows.length) + " more: adrap status --offset " + rows.length : null;
  return { total, lines, more };
}

// what an update did, in three lines: when and how long, files and leaves, clusters and summaries
export function updateLines(up) {
  return [
    localTime(up.at) + " · " + up.seconds + " s",
    "files +" + up.files_added + " ~" + up.files_changed + " −" + up.files_removed +
      "; leaves +" + up.leaves_added + " −" + up.leaves_removed,
    "clusters changed " + up.clusters_changed + ", created " + up.clusters_created +
      ", split " + up.clusters_split + ", removed " + up.clusters_removed + "; summaries regenerated " +
      up.summaries_regenerated + ", stale " + (up.summaries_deferred || 0) + ", within tolerance " +
      (up.summaries_tolerated || 0) + (up.rebuilt ? "; full rebuild" : ""),
  ];
}

// one record of the change log in a line: when, what kind, the files it changed (+ added,
// ~ edited, − removed, ! new permissions, old → new moved; the first `shown`, then how many more),
// and for a record of updates merged (a file saved again and again) how many since when
export function changeLine(r, shown = 6) {
  const marks = { added: "+", edited: "~", removed: "−", permissions: "!" };
  const files = r.files || [];
  const more = Math.max(0, files.length - shown) + (r.files_omitted || 0);
  const names = files.slice(0, shown).map((f) =>
    f.action === "moved" ? f.from + " → " + f.source : (marks[f.action] || "?") + f.source,
  );
  const summaries = (r.summaries || []).length + (r.summaries_omitted || 0);
  const what = names.length ? ": " + names.join(" ") : r.detail ? ": " + r.detail : "";
  const merged = r.updates > 1 ? "; " + r.updates + " updates since " + localTime(r.first_at) : "";
  return localTime(r.at) + " · " + r.kind + what +
    (more > 0 ? " (+" + more + " more)" : "") + merged + (summaries ? "; " + summaries + " summaries" : "");
}

// the newest update's time (null: none yet)
export function newestUpdate(u) {
  const ups = u.updates || [];
  return ups.length ? ups[0].at : null;
}

// whether the tree changed since the last look (never at the first look: last undefined)
export function treeChanged(last, newest) {
  return last !== undefined && newest !== last;
}

function showUpdates(u) {
  const box = $("updates-body");
  box.className = "";
  const meta = el("dl", "meta");
  for (const [k, v] of statusFacts(u)) meta.append(el("dt", null, k), el("dd", null, v));
  const parts = [meta];
  if (u.note) parts.unshift(el("p", "muted", u.note));
  const q = Object.entries(u.quarantined || {});
  parts.push(el("h3", null, "Quarantined files (" + q.length + ")"));
  if (q.length) {
    const ul = el("ul", "quarantine");
    for (const [file, v] of q) ul.append(el("li", null, file + ": " + (v.reason || v)));
    parts.push(ul);
  }
  for (const [kind, title] of [["stale", "Stale: cannot be read now, earlier version kept"],
                               ["skipped", "Skipped: content cannot be used"]]) {
    const { total, lines, more } = unreadList(u, kind);
    parts.push(el("h3", null, title + " (" + total + ")"));
    if (lines.length) {
      const ul = el("ul", "unread " + kind);
      for (const line of lines) ul.append(el("li", null, line));
      if (more !== null) ul.append(el("li", "muted", more));
      parts.push(ul);
    }
  }
  const changes = u.changes || [];
  parts.push(el("h3", null, "What changed, newest first (" + changes.length + "; adrap changes)"));
  if (changes.length) {
    const ul = el("ul", "changes");
    for (const r of changes) ul.append(el("li", null, changeLine(r)));
    parts.push(ul);
  }
  const ups = u.updates || [];
  parts.push(el("h3", null, "Last updates (" + ups.length + ")"));
  for (const up of ups) {
    const [when, files, clusters] = updateLines(up);
    const d = el("div", "update");
    d.append(el("div", "when", when), el("div", null, files), el("div", null, clusters));
    parts.push(d);
  }
  box.replaceChildren(...parts);
  const newest = newestUpdate(u);
  if (treeChanged(lastUpdate, newest)) {
    showLayers().catch((err) => showError(err.message)); // the tree changed: recount and reload
    loadPicture();
  }
  lastUpdate = newest;
}

export async function refreshUpdates() {
  try {
    showUpdates(await state.src.updates());
  } catch (err) {
    showError("updates: " + err.message);
  }
}
