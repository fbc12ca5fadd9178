// The picture of the tree, drawn on two canvases (no library, no DOM per node): the icicle
// (picture-icicle.js) and the map of one layer (picture-map.js). Both mark the query's hits
// (ranked), the selected node and the nodes the last update wrote; a click on either selects a
// node, a double-click on the icicle zooms into a node. The data: picture-data.js.
import { decode, decodeMap, idAt, indexOf } from "./picture-data.js";
import { drawIcicle, icicleAt, icicleCentre } from "./picture-icicle.js";
import { drawMap, mapAt, mapPoint } from "./picture-map.js";

// opts: the icicle and map canvases; onSelect(id) when a node is clicked; fetchMap(layer), the
// map of a layer; onStale() when that map is of another tree version; onZoom(zoomed).
export function create(opts) {
  const { icicle, map } = opts;
  const s = {
    pic: null, // the decoded picture
    view: { x0: 0, x1: 1 }, // the leaves the icicle shows
    hits: new Map(), // picture index -> rank
    selected: -1,
    showTouched: true,
    mapData: null, // the decoded map shown
    geo: null, // icicle geometry of the last draw
    mgeo: null, // map geometry of the last draw
  };
  const maps = new Map(); // layer -> decoded map

  function draw() {
    if (!s.pic) return;
    drawIcicle(icicle, s);
    drawMap(map, s);
  }

  // where node i is drawn, in css px of each canvas (null where it is not drawn)
  const where = (i) => ({ icicle: icicleCentre(s, i), map: mapPoint(s, i) });

  function choose(i) {
    if (i < 0) return;
    s.selected = i;
    draw();
    opts.onSelect(idAt(s.pic, i));
  }

  icicle.addEventListener("click", (event) => s.pic && choose(icicleAt(s, event.offsetX, event.offsetY)));
  icicle.addEventListener("dblclick", (event) => {
    const i = s.pic ? icicleAt(s, event.offsetX, event.offsetY) : -1;
    if (i < 0) return;
    s.view = { x0: s.pic.x0[i], x1: s.pic.x0[i] + Math.max(1, s.pic.size[i]) };
    opts.onZoom(true);
    draw();
  });
  map.addEventListener("click", (event) => s.pic && choose(mapAt(s, event.offsetX, event.offsetY)));
  let pending = false;
  window.addEventListener("resize", () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  });

  async function showMap(layer) {
    const t0 = performance.now();
    if (!maps.has(layer)) {
      const m = await opts.fetchMap(layer);
      if (m.version !== s.pic.raw.version) return opts.onStale();
      maps.set(layer, decodeMap(m));
    }
    s.mapData = maps.get(layer);
    drawMap(map, s);
    performance.measure("adrap:map", { start: t0 });
    return s.mapData;
  }

  return {
    load(raw) {
      s.pic = decode(raw);
      s.view = { x0: 0, x1: Math.max(1, s.pic.width) };
      maps.clear();
      s.mapData = null;
      s.selected = -1;
      s.hits = new Map();
      draw();
      return s.pic;
    },
    showMap,
    zoomOut() {
      if (!s.pic) return;
      s.view = { x0: 0, x1: Math.max(1, s.pic.width) };
      opts.onZoom(false);
      draw();
    },
    setTouched(on) {
      s.showTouched = on;
      draw();
    },
    setHits(ids) {
      if (!s.pic) return;
      s.hits = new Map();
      ids.forEach((id, k) => {
        const i = indexOf(s.pic, id);
        if (i >= 0) s.hits.set(i, k + 1);
      });
      draw();
    },
    select(id) {
      if (!s.pic) return;
      const i = indexOf(s.pic, id);
      if (i === s.selected) return;
      s.selected = i;
      draw();
    },
    where(id) {
      return s.pic ? where(indexOf(s.pic, id)) : null;
    },
  };
}
