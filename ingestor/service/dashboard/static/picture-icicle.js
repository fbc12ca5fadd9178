// The icicle: one band per layer (leaves at the bottom), each node as wide as the leaves under
// it, coloured by folder. Nodes narrower than a pixel are merged: each pixel column shows the
// widest node in it. `s` is the picture's state (picture.js): pic (decoded), view ({x0, x1}: the
// leaves shown), hits (index -> rank), selected, showTouched, and geo, set by each draw.
import { idAt, layerOf, upper } from "./picture-data.js";
import { HIT, SELECTED, STYLES, TOUCHED, fit, shade } from "./picture-style.js";

export const GUTTER = 44; // css px left of the bands for the layers' names

// the sizes of a draw cssW px wide: band height, css px per leaf
export function geometry(cssW, nLayers, view) {
  const bandH = Math.max(16, Math.min(80, Math.floor(300 / nLayers)));
  return { bandH, k: (cssW - GUTTER) / (view.x1 - view.x0), w: cssW };
}

// the band of layer l: top y and height, in css px
export function band(s, l) {
  const row = s.pic.layers.length - 1 - s.pic.layers.indexOf(l);
  return { y: row * s.geo.bandH, h: s.geo.bandH - 2 };
}

// the left and right edges of node i, in css px (off the canvas when zoomed away)
export function span(s, i) {
  const { pic, view } = s;
  const k = s.geo.k;
  return [GUTTER + (pic.x0[i] - view.x0) * k, GUTTER + (pic.x0[i] + pic.size[i] - view.x0) * k];
}

function paintBand(g, s, l) {
  const { pic, view } = s;
  const { y, h } = band(s, l);
  g.fillStyle = "#6b7280";
  g.fillText(l.layer === 0 ? "leaves" : "L" + l.layer, 2, y + h / 2);
  const end = l.start + l.count;
  let i = Math.max(l.start, upper(pic.x0, l.start, end, view.x0) - 1);
  let col = -1;
  let best = -1;
  let colTouched = false;
  const flush = () => {
    if (best < 0) return;
    g.fillStyle = STYLES[shade(pic, best)];
    g.fillRect(GUTTER + col, y, 1, h);
    if (colTouched && s.showTouched) {
      g.fillStyle = TOUCHED;
      g.fillRect(GUTTER + col, y, 1, 4);
    }
    best = -1;
    colTouched = false;
  };
  for (; i < end; i++) {
    if (pic.x0[i] >= view.x1) break;
    if (pic.size[i] === 0) continue;
    const [a, b] = span(s, i);
    if (b <= GUTTER) continue;
    if (b - a >= 1.5) {
      flush();
      g.fillStyle = STYLES[shade(pic, i)];
      g.fillRect(Math.max(a, GUTTER), y, b - Math.max(a, GUTTER) - (b - a > 4 ? 1 : 0), h);
      if (pic.touched[i] && s.showTouched) {
        g.fillStyle = TOUCHED;
        g.fillRect(Math.max(a, GUTTER), y, Math.max(1, b - Math.max(a, GUTTER) - 1), 4);
      }
    } else {
      const c = Math.floor(a - GUTTER);
      if (c !== col) {
        flush();
        col = c;
      }
      if (best < 0 || pic.size[i] > pic.size[best]) best = i;
      colTouched = colTouched || pic.touched[i] === 1;
    }
  }
  flush();
}

// outline node i (with a label, or none); false where it is not on the canvas
function outline(g, s, i, colour, label) {
  const l = layerOf(s.pic, i);
  if (!l || s.pic.size[i] === 0) return false;
  const [a, b] = span(s, i);
  if (b < GUTTER || a > s.geo.w) return false;
  const { y, h } = band(s, l);
  const x = Math.max(a, GUTTER);
  const wd = Math.max(3, Math.min(b, s.geo.w) - x);
  g.strokeStyle = colour;
  g.lineWidth = 2;
  g.strokeRect(x - 1, y, wd + 2, h);
  if (label) {
    g.fillStyle = colour;
    g.fillText(label, x + wd / 2 - 4, y + h / 2);
  }
  return true;
}

export function drawIcicle(canvas, s) {
  const t0 = performance.now();
  const { pic } = s;
  const cssW = Math.max(200, canvas.parentElement.clientWidth);
  const nb = pic.layers.length;
  s.geo = geometry(cssW, nb, s.view);
  const { g } = fit(canvas, cssW, s.geo.bandH * nb);
  g.clearRect(0, 0, cssW, s.geo.bandH * nb);
  g.font = "11px system-ui, sans-serif";
  g.textBaseline = "middle";
  for (const l of pic.layers) paintBand(g, s, l);
  let shown = 0;
  for (const [i, rank] of s.hits) if (outline(g, s, i, HIT, "#" + rank)) shown++;
  if (s.selected >= 0) outline(g, s, s.selected, SELECTED, null);
  canvas.dataset.hits = String(shown);
  canvas.dataset.selected = s.selected >= 0 ? idAt(pic, s.selected) : "";
  performance.measure("adrap:picture-draw", { start: t0 }); // read by bench/dashboard.py
}

// the node at (x, y) css px of the last draw: the widest in that pixel column (-1: none)
export function icicleAt(s, x, y) {
  const { pic, view, geo } = s;
  const row = Math.floor(y / geo.bandH);
  const l = pic.layers[pic.layers.length - 1 - row];
  if (!l || x < GUTTER) return -1;
  const end = l.start + l.count;
  const lo = view.x0 + (Math.floor(x - GUTTER)) / geo.k; // the pixel column, in leaves
  const hi = view.x0 + (Math.floor(x - GUTTER) + 1) / geo.k;
  let best = -1;
  for (let i = Math.max(l.start, upper(pic.x0, l.start, end, lo) - 1); i < end && pic.x0[i] < hi; i++) {
    if (pic.size[i] > 0 && pic.x0[i] + pic.size[i] > lo && (best < 0 || pic.size[i] > pic.size[best])) best = i;
  }
  return best;
}

// where node i is drawn, [x, y] in css px (null: not drawn, or not in view)
export function icicleCentre(s, i) {
  const l = s.pic && layerOf(s.pic, i);
  if (!l || !s.geo || s.pic.size[i] <= 0) return null;
  const [a, b] = span(s, i);
  const { y, h } = band(s, l);
  const x = (Math.max(a, GUTTER) + Math.min(b, s.geo.w)) / 2;
  return b > GUTTER && a < s.geo.w ? [x, y + h / 2] : null;
}
