import { localTime } from "../static/format.js";
import { driftText, nodeFacts } from "../static/node.js";
import { eq, test } from "./check.js";

test("node: nodeFacts of a leaf: its file, span, chunk and where in the file", () => {
  const n = { node_id: "x", layer: 0, n_tokens: 30, source: "a.pdf", char_start: 5, char_end: 60,
    chunk_index: 2, locator: "page 3", section: "", updated_at: 1700000000 };
  eq(nodeFacts(n, 2), [
    ["id", "x"], ["layer", "0 (leaf chunk)"], ["tokens", 30],
    ["source", "a.pdf · characters 5–60 · chunk 2"], ["where", "page 3"],
    ["updated", localTime(1700000000)], ["query rank", "#2"],
  ]);
});

test("node: nodeFacts of a summary says how many sources are not listed", () => {
  const n = { node_id: "s", layer: 2, n_tokens: 90, sources: ["a", "b"], n_sources: 5,
    summarizer: "m", stale: true, updated_at: 0 };
  const facts = new Map(nodeFacts(n, undefined));
  eq(facts.get("layer"), "2 (summary)");
  eq(facts.get("sources (5)"), "a, b … and 3 more");
  eq(facts.get("summarizer"), "m");
  eq(facts.has("stale"), true);
  eq(facts.has("query rank"), false);
});

test("node: a capped summary's sources are not listed", () => {
  const n = { node_id: "s", layer: 1, n_tokens: 9, sources: [], n_sources: 0, sources_capped: true, updated_at: 0 };
  eq(new Map(nodeFacts(n)).get("sources"), "more files than the tree's max_node_sources: not listed");
});

test("node: a summary's drift: the tokens changed since it was written, and when it is regenerated", () => {
  const drift = { tokens: 120, children_tokens: 1000, share: 0.12, regenerate_at: 0.2, removed: false };
  const n = { node_id: "s", layer: 1, n_tokens: 9, sources: ["a"], n_sources: 1, drift, updated_at: 0 };
  eq(new Map(nodeFacts(n)).get("drift"),
    "120 of its children's 1000 tokens changed since it was written (12 %; regenerated at 20 %)");
  eq(driftText({ tokens: null, children_tokens: 5, share: null, regenerate_at: 0.2, removed: true }),
    "it may hold a removed file's text: regenerated at the next update or refresh");
  eq(new Map(nodeFacts({ ...n, drift: null })).has("drift"), false);
});
