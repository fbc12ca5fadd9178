import { hitLine, hitsLabel, hitsPerLayer, querySummary, ranksOf } from "../static/query.js";
import { eq, test } from "./check.js";

const hits = [
  { node_id: "a", layer: 0, n_tokens: 10, text: "z".repeat(200), score: 0.9 },
  { node_id: "b", layer: 2, n_tokens: 20, text: "summary", score: 0.8 },
  { node_id: "c", layer: 0, n_tokens: 30, text: "leaf", score: 0.7 },
];

test("query: ranksOf numbers the hits from 1 in their order", () => {
  eq(ranksOf(hits), new Map([["a", 1], ["b", 2], ["c", 3]]));
  eq(ranksOf([]), new Map());
});

test("query: hitsPerLayer counts the hits of each layer, keyed as data-layer", () => {
  eq(hitsPerLayer(hits), new Map([["0", 2], ["2", 1]]));
  eq([hitsLabel(undefined), hitsLabel(1), hitsLabel(2)], ["", "1 hit", "2 hits"]);
});

test("query: a hit's line and the query's summary", () => {
  eq(hitLine(hits[0]), "leaf 10 tok · " + "z".repeat(160));
  eq(hitLine(hits[1]), "L2 20 tok · summary");
  const out = { hits, total_tokens: 60, max_tokens: 600, mode: "collapsed", seconds: 0.1234 };
  eq(querySummary(out), "3 nodes in score order, 60 of 600 tokens used (collapsed, 123 ms)");
});
