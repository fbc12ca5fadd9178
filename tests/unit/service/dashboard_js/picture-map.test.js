import { decode, decodeMap } from "../static/picture-data.js";
import { MAP_PAD, dotSize, drawMap, mapAt, mapPoint, pointAt } from "../static/picture-map.js";
import { RGBS } from "../static/picture-style.js";
import { eq, test } from "./check.js";
import { canvasIn, pixel, rawMap, rawPicture } from "./fixture.js";

const SC = (360 - 2 * MAP_PAD) / 65535; // a 360 px map

function state() {
  return { pic: decode(rawPicture()), mapData: decodeMap(rawMap()), hits: new Map(), selected: -1,
    showTouched: true, mgeo: { S: 360, sc: SC } };
}

test("picture-map: dotSize shrinks as the layer grows", () => {
  eq([dotSize(10, 1), dotSize(201, 1), dotSize(2001, 1), dotSize(20001, 1)], [7, 4, 3, 1]);
  eq([dotSize(10, 2), dotSize(20001, 0.5)], [14, 1]);
});

test("picture-map: pointAt puts the grid in the padded square, y up", () => {
  const xy = Uint16Array.of(0, 0, 65535, 65535);
  eq(pointAt(xy, 0, SC).map(Math.round), [8, 352]);
  eq(pointAt(xy, 1, SC).map(Math.round), [352, 8]);
});

test("picture-map: mapPoint is null off the layer shown or before a draw", () => {
  const s = state();
  eq(mapPoint(s, 2), [8, 8]);
  eq(mapPoint(s, 4), null);
  eq(mapPoint(Object.assign(state(), { mgeo: null }), 2), null);
  eq(mapPoint(Object.assign(state(), { mapData: null }), 2), null);
});

test("picture-map: mapAt finds the nearest point within 12 px", () => {
  const s = state();
  eq(mapAt(s, 12, 12), 2);
  eq(mapAt(s, 350, 345), 3);
  eq(mapAt(s, 180, 180), -1);
  eq(mapAt(s, 8, 21), -1);
  eq(mapAt(Object.assign(state(), { mapData: null }), 8, 8), -1);
});

test("picture-map: drawMap paints each point in its folder's colour", () => {
  const canvas = canvasIn(444);
  const s = state();
  s.hits = new Map([[3, 1], [5, 2]]);
  drawMap(canvas, s);
  eq(s.mgeo, { S: 360, sc: SC });
  eq(pixel(canvas, 8, 8), RGBS[11], "node 2: folder 1");
  eq(pixel(canvas, 9, 351), RGBS[5], "node 0: folder 0");
  eq([canvas.dataset.layer, canvas.dataset.hits], ["0", "1"]);
  s.mapData = null;
  drawMap(canvas, s);
  eq([canvas.dataset.layer, canvas.dataset.hits], ["", "0"]);
});
