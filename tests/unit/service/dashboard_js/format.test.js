import { PREVIEW, layerTag, localTime, preview } from "../static/format.js";
import { eq, test } from "./check.js";

test("format: layerTag names leaves and summary layers", () => {
  eq(layerTag(0), "leaf");
  eq(layerTag(1), "L1");
  eq(layerTag(12), "L12");
});

test("format: preview keeps the first PREVIEW characters", () => {
  eq(PREVIEW, 160);
  eq(preview("x".repeat(200)), "x".repeat(160));
  eq(preview("short"), "short");
});

test("format: localTime reads seconds since the epoch", () => {
  eq(localTime(1700000000), new Date(1700000000 * 1000).toLocaleString());
  eq(localTime(0.5), new Date(500).toLocaleString());
});
