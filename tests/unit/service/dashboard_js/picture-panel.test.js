import { folderLabel, mapNote, mapOptionLabel } from "../static/picture-panel.js";
import { eq, test } from "./check.js";

test("picture-panel: folderLabel names a folder under the shared folders, or the files there", () => {
  eq(folderLabel({ under: "docs/" }, { name: "work" }), "docs/work");
  eq(folderLabel({ under: "docs/" }, { name: "" }), "(files directly in docs/)");
  eq(folderLabel({ under: "" }, { name: "" }), "(files directly in the root)");
});

test("picture-panel: the map's choices and note", () => {
  eq(mapOptionLabel({ layer: 0, count: 12 }), "leaves (12)");
  eq(mapOptionLabel({ layer: 3, count: 2 }), "layer 3 (2)");
  eq(mapNote({ layer: 0, count: 9, sampled: 9, explained: [0.5, 0.1234] }),
    "Leaves: 9 nodes at the two main axes of their vectors (PCA, 50.0 % + 12.3 % of the variance). " +
    "Near means alike, roughly.");
  eq(mapNote({ layer: 2, count: 9000, sampled: 4096, explained: [0.2, 0.1] }),
    "Layer 2: 9000 nodes at the two main axes of their vectors (PCA, 20.0 % + 10.0 % of the " +
    "variance, fitted on 4096). Near means alike, roughly.");
});
