// The picture's data: the arrays of /dashboard/api/picture and of a layer's map, decoded from
// base64 into typed arrays (little-endian; see ingestor/service/dashboard/picture.py), and the
// lookups in them. Node i of a picture: its leaves come first (i < width, leaf i at column i),
// then each layer's summaries, layer by layer (pic.layers: {layer, start, count}).

// base64 as bytes
export function bytes(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

// the picture as typed arrays: each node's first leaf (x0) and leaf count (size), folder and
// purity, whether the last update wrote it (touched), its 16-byte id
export function decode(p) {
  const n = p.n;
  const w = p.width;
  const x0 = new Int32Array(n);
  const size = new Int32Array(n);
  for (let i = 0; i < w; i++) {
    x0[i] = i;
    size[i] = 1;
  }
  x0.set(new Int32Array(bytes(p.x0).buffer), w);
  size.set(new Int32Array(bytes(p.size).buffer), w);
  const purity = new Uint8Array(n);
  purity.fill(255, 0, w);
  purity.set(bytes(p.purity), w);
  const touched = new Uint8Array(n);
  const marked = new Int32Array(bytes(p.touched).buffer);
  for (const i of marked) touched[i] = 1;
  const ids = bytes(p.ids);
  return {
    raw: p, n, width: w, x0, size, purity, touched, nTouched: marked.length,
    folder: bytes(p.folder), ids, ids32: new Uint32Array(ids.buffer), layers: p.layers,
  };
}

// a layer's map: point k (uint16 pairs in xy) is picture node start + k
export function decodeMap(m) {
  return { layer: m.layer, start: m.start, count: m.count,
    xy: new Uint16Array(bytes(m.xy).buffer), explained: m.explained, sampled: m.sampled };
}

// the id of node i, as a UUID
export function idAt(pic, i) {
  let h = "";
  for (let k = 16 * i; k < 16 * i + 16; k++) h += pic.ids[k].toString(16).padStart(2, "0");
  return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
}

// the index of the node of that id (-1: not in the picture)
export function indexOf(pic, id) {
  const hex = String(id).replace(/-/g, "");
  if (hex.length !== 32) return -1;
  const want = new Uint8Array(16);
  for (let k = 0; k < 16; k++) want[k] = parseInt(hex.slice(2 * k, 2 * k + 2), 16);
  const w = new Uint32Array(want.buffer);
  const a = pic.ids32;
  for (let i = 0; i < pic.n; i++) {
    const o = 4 * i;
    if (a[o] === w[0] && a[o + 1] === w[1] && a[o + 2] === w[2] && a[o + 3] === w[3]) return i;
  }
  return -1;
}

// the layer of node i (null: none)
export function layerOf(pic, i) {
  for (const l of pic.layers) if (i >= l.start && i < l.start + l.count) return l;
  return null;
}

// first index in [lo, hi) whose x0 is > u (x0 ascending there)
export function upper(x0, lo, hi, u) {
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x0[mid] <= u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
