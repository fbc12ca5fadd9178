// The map: one layer's nodes at their 2-D PCA coordinates (uint16 on a GRID), written into an
// ImageData, in the folders' colours, with the marks of the icicle. `s` is the picture's state
// (picture.js): pic, mapData (the decoded map shown, or null), hits, selected, showTouched, and
// mgeo, set by each draw.
import { HIT, RGBS, SELECTED, TOUCHED, fit, shade } from "./picture-style.js";

export const GRID = 65535;
export const MAP_PAD = 8; // css px

// the side of a point in device px: smaller as the layer has more nodes
export function dotSize(n, r) {
  return Math.max(1, Math.round((n > 20000 ? 1 : n > 2000 ? 2.5 : n > 200 ? 4 : 7) * r));
}

// where point k of the map is, [x, y] in css px at sc css px per grid step (y grows down)
export function pointAt(xy, k, sc) {
  return [MAP_PAD + xy[2 * k] * sc, MAP_PAD + (GRID - xy[2 * k + 1]) * sc];
}

// where node i is drawn on the map (null: not on the layer shown, or not drawn yet)
export function mapPoint(s, i) {
  const m = s.mapData;
  if (!m || !s.mgeo || i < m.start || i >= m.start + m.count) return null;
  return pointAt(m.xy, i - m.start, s.mgeo.sc);
}

function paintPoints(g, s, P, r) {
  const { pic, mapData } = s;
  const img = g.createImageData(P, P);
  const px = img.data;
  const dot = dotSize(mapData.count, r);
  const sc = s.mgeo.sc * r;
  for (let k = 0; k < mapData.count; k++) {
    const i = mapData.start + k;
    const x = Math.floor(MAP_PAD * r + mapData.xy[2 * k] * sc - dot / 2);
    const y = Math.floor(MAP_PAD * r + (GRID - mapData.xy[2 * k + 1]) * sc - dot / 2);
    const c = RGBS[shade(pic, i)];
    for (let dy = 0; dy < dot; dy++) {
      for (let dx = 0; dx < dot; dx++) {
        if (x + dx < 0 || x + dx >= P || y + dy < 0 || y + dy >= P) continue;
        const o = ((y + dy) * P + x + dx) * 4;
        px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
      }
    }
  }
  g.putImageData(img, 0, 0);
}

export function drawMap(canvas, s) {
  const t0 = performance.now();
  const S = Math.max(160, Math.min(360, canvas.parentElement.clientWidth));
  const { g, r } = fit(canvas, S, S);
  g.clearRect(0, 0, S, S);
  const { pic, mapData } = s;
  s.mgeo = { S, sc: (S - 2 * MAP_PAD) / GRID };
  canvas.dataset.layer = mapData ? String(mapData.layer) : "";
  if (!mapData) {
    canvas.dataset.hits = "0";
    return;
  }
  paintPoints(g, s, canvas.width, r);
  const ring = (i, colour, rad, width) => {
    const p = mapPoint(s, i);
    if (!p) return false;
    g.strokeStyle = colour;
    g.lineWidth = width;
    g.beginPath();
    g.arc(p[0], p[1], rad, 0, 2 * Math.PI);
    g.stroke();
    return true;
  };
  if (s.showTouched) {
    for (let k = 0; k < mapData.count; k++) {
      if (pic.touched[mapData.start + k]) ring(mapData.start + k, TOUCHED, 3, 1);
    }
  }
  let shown = 0;
  g.font = "bold 11px system-ui, sans-serif";
  for (const [i, rank] of s.hits) {
    if (ring(i, HIT, 7, 2.5)) {
      shown++;
      const p = mapPoint(s, i);
      g.fillStyle = HIT;
      g.fillText("#" + rank, p[0] > S - 40 ? p[0] - 30 : p[0] + 8, p[1] - 6);
    }
  }
  if (s.selected >= 0) ring(s.selected, SELECTED, 10, 2.5);
  canvas.dataset.hits = String(shown);
  performance.measure("adrap:map-draw", { start: t0 });
}

// the node nearest (x, y) css px of the last draw, within 12 px (-1: none)
export function mapAt(s, x, y) {
  const m = s.mapData;
  if (!m) return -1;
  let best = -1;
  let bestD = 12 * 12;
  for (let k = 0; k < m.count; k++) {
    const [px, py] = pointAt(m.xy, k, s.mgeo.sc);
    const d = (px - x) * (px - x) + (py - y) * (py - y);
    if (d < bestD) {
      bestD = d;
      best = m.start + k;
    }
  }
  return best;
}
