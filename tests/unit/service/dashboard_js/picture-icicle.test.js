import { decode } from "../static/picture-data.js";
import { GUTTER, band, drawIcicle, geometry, icicleAt, icicleCentre, span } from "../static/picture-icicle.js";
import { RGBS, TOUCHED, rgb } from "../static/picture-style.js";
import { eq, ok, test } from "./check.js";
import { canvasIn, pixel, rawPicture } from "./fixture.js";

// the fixture's state drawn cssW px wide over `view` (100 px a leaf at 444 and the whole tree)
function state(cssW = 444, view = { x0: 0, x1: 4 }) {
  const pic = decode(rawPicture());
  return { pic, view, hits: new Map(), selected: -1, showTouched: true,
    geo: geometry(cssW, pic.layers.length, view) };
}

test("picture-icicle: geometry keeps bands 16 to 80 px high and spreads the view", () => {
  eq(geometry(444, 3, { x0: 0, x1: 4 }), { bandH: 80, k: 100, w: 444 });
  eq(geometry(444, 10, { x0: 1, x1: 3 }).bandH, 30);
  eq(geometry(244, 40, { x0: 0, x1: 400 }), { bandH: 16, k: 0.5, w: 244 });
});

test("picture-icicle: band and span place a node, the top layer first", () => {
  const s = state();
  eq(band(s, s.pic.layers[2]), { y: 0, h: 78 });
  eq(band(s, s.pic.layers[0]), { y: 160, h: 78 });
  eq(span(s, 5), [GUTTER + 200, GUTTER + 400]);
  eq(span(s, 1), [GUTTER + 100, GUTTER + 200]);
  const zoomed = state(444, { x0: 2, x1: 4 });
  eq(span(zoomed, 5), [GUTTER, GUTTER + 400]);
  eq(span(zoomed, 4), [GUTTER - 400, GUTTER]);
});

test("picture-icicle: icicleAt finds the node under a point, none in the gutter", () => {
  const s = state();
  eq(icicleAt(s, 144, 119), 4);
  eq(icicleAt(s, 344, 90), 5);
  eq(icicleAt(s, 300, 10), 6);
  eq(icicleAt(s, 150, 200), 1);
  eq(icicleAt(s, 20, 200), -1);
  eq(icicleAt(s, 150, 400), -1);
});

test("picture-icicle: where nodes narrower than a pixel share a column, the widest is found", () => {
  const pic = { layers: [{ layer: 1, start: 0, count: 3 }], x0: Int32Array.of(0, 1, 3), size: Int32Array.of(1, 2, 1) };
  const s = { pic, view: { x0: 0, x1: 4 }, geo: { bandH: 80, k: 0.25, w: 45 } }; // 4 leaves a pixel
  eq(icicleAt(s, GUTTER + 0.5, 10), 1);
  const leaves = state(46); // 2 leaves a pixel
  eq(leaves.geo.k, 0.5);
  eq([icicleAt(leaves, GUTTER + 0.5, 200), icicleAt(leaves, GUTTER + 1.5, 200)], [0, 2]);
  eq(icicleAt(leaves, GUTTER + 0.5, 100), 4);
});

test("picture-icicle: icicleCentre is the middle of a node in view, null out of it", () => {
  const s = state();
  eq(icicleCentre(s, 4), [144, 119]);
  eq(icicleCentre(s, 6), [244, 39]);
  eq(icicleCentre(state(444, { x0: 2, x1: 4 }), 4), null);
  eq(icicleCentre(Object.assign(state(), { geo: null }), 4), null);
  eq(icicleCentre(state(), 9), null);
});

test("picture-icicle: drawIcicle paints each node in its folder's colour and marks the update", () => {
  const canvas = canvasIn(444);
  const s = state();
  s.hits = new Map([[4, 1], [9, 2]]);
  s.selected = 1;
  drawIcicle(canvas, s);
  eq(s.geo, { bandH: 80, k: 100, w: 444 });
  eq(pixel(canvas, 144, 140), RGBS[5], "node 4: folder 0, pure");
  eq(pixel(canvas, 344, 140), RGBS[11], "node 5: folder 1, pure");
  eq(pixel(canvas, 344, 81), rgb(TOUCHED), "node 5's top edge: the last update wrote it");
  eq(pixel(canvas, 144, 40), RGBS[3], "node 6: folder 0, half its leaves");
  eq([canvas.dataset.hits, canvas.dataset.selected], ["1", "00000001-1111-4222-8333-444444444441"]);
  s.showTouched = false;
  s.hits = new Map();
  drawIcicle(canvas, s);
  eq(pixel(canvas, 344, 81), RGBS[11], "unmarked");
  ok(canvas.dataset.hits === "0");
});
