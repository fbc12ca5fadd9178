// A small picture in the daemon's JSON (ingestor/service/dashboard/picture.py), built here
// without the modules under test: 4 leaves (folders 0, 0, 1, 1), layer 1 of two nodes over
// leaves [0, 2) and [2, 4), layer 2 of one node over all four (purity 128). The last update
// wrote node 5. Its map: the four leaves at the grid's corners.
export const IDS = Array.from({ length: 7 }, (_, i) => "0000000" + i + "-1111-4222-8333-44444444444" + i);

export function b64(typed) {
  const u8 = new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
  let s = "";
  for (const b of u8) s += String.fromCharCode(b);
  return btoa(s);
}

function idBytes(ids) {
  const out = new Uint8Array(16 * ids.length);
  ids.forEach((id, i) => {
    const hex = id.replaceAll("-", "");
    for (let k = 0; k < 16; k++) out[16 * i + k] = parseInt(hex.slice(2 * k, 2 * k + 2), 16);
  });
  return out;
}

export function rawPicture(version = "v1") {
  return {
    tree: "t", version, n: 7, width: 4,
    layers: [{ layer: 0, start: 0, count: 4 }, { layer: 1, start: 4, count: 2 }, { layer: 2, start: 6, count: 1 }],
    ids: b64(idBytes(IDS)),
    x0: b64(Int32Array.of(0, 2, 0)),
    size: b64(Int32Array.of(2, 2, 4)),
    folder: b64(Uint8Array.of(0, 0, 1, 1, 0, 1, 0)),
    purity: b64(Uint8Array.of(255, 255, 128)),
    folders: [{ name: "a", leaves: 2 }, { name: "b", leaves: 2 }],
    under: "docs/",
    touched: b64(Int32Array.of(5)),
    touched_note: "nodes written by the last update",
    map_layer: 0,
  };
}

export function rawMap(version = "v1") {
  return {
    layer: 0, version, start: 0, count: 4,
    xy: b64(Uint16Array.of(0, 0, 65535, 65535, 0, 65535, 65535, 0)),
    explained: [0.5, 0.25], sampled: 4,
  };
}

// a canvas in a box `width` css px wide, in the page (so it has a size to draw at)
export function canvasIn(width) {
  const box = document.createElement("div");
  box.style.width = width + "px";
  const canvas = document.createElement("canvas");
  box.append(canvas);
  document.getElementById("canvases").append(box);
  return canvas;
}

// the [r, g, b] at (x, y) css px of a canvas
export function pixel(canvas, x, y) {
  const r = window.devicePixelRatio || 1;
  const d = canvas.getContext("2d").getImageData(Math.floor(x * r), Math.floor(y * r), 1, 1).data;
  return [d[0], d[1], d[2]];
}

// a mouse event of that type at (x, y) css px of the canvas
export function mouse(canvas, type, x, y) {
  const box = canvas.getBoundingClientRect();
  canvas.dispatchEvent(new MouseEvent(type, { clientX: box.left + x, clientY: box.top + y, bubbles: true }));
}
