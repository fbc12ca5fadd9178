import { create } from "../static/picture.js";
import { RGBS, rgb, TOUCHED } from "../static/picture-style.js";
import { eq, test } from "./check.js";
import { IDS, canvasIn, mouse, pixel, rawMap, rawPicture } from "./fixture.js";

// a picture on two new canvases, and the log of its calls back
function picture(version = "v1") {
  const log = [];
  const icicle = canvasIn(444);
  const map = canvasIn(444);
  const p = create({
    icicle, map,
    onSelect: (id) => log.push(["select", id]),
    fetchMap: async (n) => {
      log.push(["map", n]);
      return rawMap(version);
    },
    onStale: () => {
      log.push(["stale"]);
    },
    onZoom: (zoomed) => log.push(["zoom", zoomed]),
  });
  return { p, log, icicle, map };
}

test("picture: a click on either canvas selects the node drawn there", async () => {
  const { p, log, icicle, map } = picture();
  eq(p.where(IDS[4]), null, "nothing before the picture is loaded");
  p.load(rawPicture());
  await p.showMap(0);
  const at = p.where(IDS[4]);
  eq(at, { icicle: [144, 119], map: null });
  mouse(icicle, "click", ...at.icicle);
  mouse(map, "click", ...p.where(IDS[2]).map);
  eq(log, [["map", 0], ["select", IDS[4]], ["select", IDS[2]]]);
});

test("picture: setHits ranks the ids it has, and marks them", () => {
  const { p, icicle } = picture();
  const pic = p.load(rawPicture());
  eq(pic.n, 7);
  p.setHits(["nope", IDS[5], IDS[0]]);
  eq(icicle.dataset.hits, "2");
  p.select(IDS[6]);
  eq(icicle.dataset.selected, IDS[6]);
});

test("picture: the last update's mark can be hidden", () => {
  const { p, icicle } = picture();
  p.load(rawPicture());
  eq(pixel(icicle, 344, 81), rgb(TOUCHED));
  p.setTouched(false);
  eq(pixel(icicle, 344, 81), RGBS[11]);
});

test("picture: a double-click zooms into a node, zoomOut shows the whole tree", () => {
  const { p, log, icicle } = picture();
  p.load(rawPicture());
  mouse(icicle, "dblclick", 344, 119);
  eq(log, [["zoom", true]]);
  eq(p.where(IDS[5]).icicle, [244, 119], "node 5 fills the band");
  eq(p.where(IDS[4]).icicle, null, "node 4 is out of view");
  p.zoomOut();
  eq(log, [["zoom", true], ["zoom", false]]);
  eq(p.where(IDS[4]).icicle, [144, 119]);
});

test("picture: a map of another tree version asks for a new picture", async () => {
  const { p, log, map } = picture("v2");
  p.load(rawPicture("v1"));
  eq(await p.showMap(0), undefined);
  eq(log, [["map", 0], ["stale"]]);
  eq(map.dataset.layer, "");
});
