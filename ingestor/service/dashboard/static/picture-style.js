// The picture's colours and canvases: one colour per top-level folder (the last one stands for
// "other folders"), in SHADES steps from full (every leaf under the node in that folder) to pale;
// the colours of the marks (a query's hits, the selected node, the nodes the last update wrote).
export const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0a4ab"];
export const HIT = "#c2410c";
export const SELECTED = "#1d4ed8";
export const TOUCHED = "#111827";
export const SHADES = 6;

// "#rrggbb" as [r, g, b]
export function rgb(hex) {
  const v = parseInt(hex.slice(1), 16);
  return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
}

// folder f at purity step q (index f * SHADES + q): mixed with white as the folder's share falls
const table = PALETTE.flatMap((hex) => {
  const c = rgb(hex);
  return Array.from({ length: SHADES }, (_, q) => {
    const pale = 0.75 * (1 - q / (SHADES - 1));
    return c.map((x) => Math.round(x + (255 - x) * pale));
  });
});
export const RGBS = table;
export const STYLES = table.map((m) => "rgb(" + m.join(",") + ")");

// the index in STYLES / RGBS of node i of a decoded picture: its folder and purity (0..255)
export function shade(pic, i) {
  return Math.min(pic.folder[i], PALETTE.length - 1) * SHADES +
    Math.round((pic.purity[i] / 255) * (SHADES - 1));
}

// the legend's colour of folder f (folders past the palette share its last colour)
export function colour(f) {
  return PALETTE[Math.min(f, PALETTE.length - 1)];
}

// size a canvas to cssW x cssH css px at the screen's pixel ratio r; draw in css px on g
export function fit(canvas, cssW, cssH) {
  const r = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.round(cssW * r));
  canvas.height = Math.max(1, Math.round(cssH * r));
  canvas.style.width = cssW + "px";
  canvas.style.height = cssH + "px";
  const g = canvas.getContext("2d");
  g.setTransform(r, 0, 0, r, 0, 0);
  return { g, r };
}
