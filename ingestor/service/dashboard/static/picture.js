// adrap dashboard: the picture of the tree, drawn on two canvases (no library, no DOM per node).
// - the icicle: one band per layer (leaves at the bottom); each node as wide as the leaves under
//   it, coloured by top-level folder (paler when its leaves come from several folders). Nodes
//   narrower than a pixel are merged: each pixel column shows the widest node in it.
// - the map: one layer's nodes at their 2-D PCA coordinates, written into an ImageData.
// Both mark the query's hits (ranked), the selected node and the nodes the last update wrote.
// The data are typed arrays decoded from base64 (see ingestor/service/dashboard/picture.py).
"use strict";
const AdrapPicture = (() => {
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0a4ab"]; // the last: "other folders"
  const HIT = "#c2410c";
  const SELECTED = "#1d4ed8";
  const TOUCHED = "#111827";
  const GUTTER = 44; // css px left of the icicle for the layer names
  const GRID = 65535;
  const MAP_PAD = 8;

  function bytes(b64) {
    const s = atob(b64);
    const out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  function rgb(hex) {
    const v = parseInt(hex.slice(1), 16);
    return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  }

  // colour of folder f at purity p (0..255): mixed with white as the share of that folder falls
  const SHADES = 6;
  const styles = [];
  const rgbs = [];
  PALETTE.forEach((hex, f) => {
    const c = rgb(hex);
    for (let q = 0; q < SHADES; q++) {
      const pale = 0.75 * (1 - q / (SHADES - 1));
      const m = c.map((x) => Math.round(x + (255 - x) * pale));
      styles[f * SHADES + q] = "rgb(" + m.join(",") + ")";
      rgbs[f * SHADES + q] = m;
    }
  });
  const shade = (pic, i) => Math.min(pic.folder[i], PALETTE.length - 1) * SHADES +
    Math.round((pic.purity[i] / 255) * (SHADES - 1));

  function decode(p) {
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

  function idAt(pic, i) {
    let h = "";
    for (let k = 16 * i; k < 16 * i + 16; k++) h += pic.ids[k].toString(16).padStart(2, "0");
    return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
  }

  function indexOf(pic, id) {
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

  function layerOf(pic, i) {
    for (const l of pic.layers) if (i >= l.start && i < l.start + l.count) return l;
    return null;
  }

  // first index in [lo, hi) whose x0 is > u
  function upper(x0, lo, hi, u) {
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (x0[mid] <= u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  function fit(canvas, cssW, cssH) {
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(cssW * r));
    canvas.height = Math.max(1, Math.round(cssH * r));
    canvas.style.width = cssW + "px";
    canvas.style.height = cssH + "px";
    const g = canvas.getContext("2d");
    g.setTransform(r, 0, 0, r, 0, 0);
    return { g, r };
  }

  function create(opts) {
    const icicle = opts.icicle;
    const map = opts.map;
    let pic = null;
    let view = { x0: 0, x1: 1 };
    let hits = new Map(); // picture index -> rank
    let selected = -1;
    let showTouched = true;
    let mapData = null; // {layer, start, count, xy}
    const maps = new Map(); // layer -> decoded map
    let geo = null; // icicle geometry of the last draw
    let mgeo = null; // map geometry of the last draw

    function band(l) {
      const row = pic.layers.length - 1 - pic.layers.indexOf(l);
      return { y: row * geo.bandH, h: geo.bandH - 2 };
    }

    function span(i) {
      const k = geo.k;
      return [GUTTER + (pic.x0[i] - view.x0) * k, GUTTER + (pic.x0[i] + pic.size[i] - view.x0) * k];
    }

    function drawIcicle() {
      const t0 = performance.now();
      const cssW = Math.max(200, icicle.parentElement.clientWidth);
      const nb = pic.layers.length;
      const bandH = Math.max(16, Math.min(80, Math.floor(300 / nb)));
      const { g } = fit(icicle, cssW, bandH * nb);
      geo = { bandH, k: (cssW - GUTTER) / (view.x1 - view.x0), w: cssW };
      g.clearRect(0, 0, cssW, bandH * nb);
      g.font = "11px system-ui, sans-serif";
      g.textBaseline = "middle";
      for (const l of pic.layers) {
        const { y, h } = band(l);
        g.fillStyle = "#6b7280";
        g.fillText(l.layer === 0 ? "leaves" : "L" + l.layer, 2, y + h / 2);
        const end = l.start + l.count;
        let i = Math.max(l.start, upper(pic.x0, l.start, end, view.x0) - 1);
        let col = -1;
        let best = -1;
        let colTouched = false;
        const flush = () => {
          if (best < 0) return;
          g.fillStyle = styles[shade(pic, best)];
          g.fillRect(GUTTER + col, y, 1, h);
          if (colTouched && showTouched) {
            g.fillStyle = TOUCHED;
            g.fillRect(GUTTER + col, y, 1, 4);
          }
          best = -1;
          colTouched = false;
        };
        for (; i < end; i++) {
          if (pic.x0[i] >= view.x1) break;
          if (pic.size[i] === 0) continue;
          const [a, b] = span(i);
          if (b <= GUTTER) continue;
          if (b - a >= 1.5) {
            flush();
            g.fillStyle = styles[shade(pic, i)];
            g.fillRect(Math.max(a, GUTTER), y, b - Math.max(a, GUTTER) - (b - a > 4 ? 1 : 0), h);
            if (pic.touched[i] && showTouched) {
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
      let shown = 0;
      const mark = (i, colour, label) => {
        const l = layerOf(pic, i);
        if (!l || pic.size[i] === 0) return false;
        const [a, b] = span(i);
        if (b < GUTTER || a > cssW) return false;
        const { y, h } = band(l);
        const x = Math.max(a, GUTTER);
        const wd = Math.max(3, Math.min(b, cssW) - x);
        g.strokeStyle = colour;
        g.lineWidth = 2;
        g.strokeRect(x - 1, y, wd + 2, h);
        if (label) {
          g.fillStyle = colour;
          g.fillText(label, x + wd / 2 - 4, y + h / 2);
        }
        return true;
      };
      for (const [i, rank] of hits) if (mark(i, HIT, "#" + rank)) shown++;
      if (selected >= 0) mark(selected, SELECTED, null);
      icicle.dataset.hits = String(shown);
      icicle.dataset.selected = selected >= 0 ? idAt(pic, selected) : "";
      performance.measure("adrap:picture-draw", { start: t0 }); // read by bench/dashboard.py
    }

    function drawMap() {
      const t0 = performance.now();
      const S = Math.max(160, Math.min(360, map.parentElement.clientWidth));
      const { g, r } = fit(map, S, S);
      g.clearRect(0, 0, S, S);
      mgeo = { S, sc: (S - 2 * MAP_PAD) / GRID };
      map.dataset.layer = mapData ? String(mapData.layer) : "";
      if (!mapData) {
        map.dataset.hits = "0";
        return;
      }
      const P = map.width;
      const img = g.createImageData(P, P);
      const px = img.data;
      const n = mapData.count;
      const dot = Math.max(1, Math.round((n > 20000 ? 1 : n > 2000 ? 2.5 : n > 200 ? 4 : 7) * r));
      const sc = mgeo.sc * r;
      for (let k = 0; k < mapData.count; k++) {
        const i = mapData.start + k;
        const x = Math.floor(MAP_PAD * r + mapData.xy[2 * k] * sc - dot / 2);
        const y = Math.floor(MAP_PAD * r + (GRID - mapData.xy[2 * k + 1]) * sc - dot / 2);
        const c = rgbs[shade(pic, i)];
        for (let dy = 0; dy < dot; dy++) {
          for (let dx = 0; dx < dot; dx++) {
            if (x + dx < 0 || x + dx >= P || y + dy < 0 || y + dy >= P) continue;
            const o = ((y + dy) * P + x + dx) * 4;
            px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 255;
          }
        }
      }
      g.putImageData(img, 0, 0);
      const ring = (i, colour, rad, width) => {
        const p = where(i).map;
        if (!p) return false;
        g.strokeStyle = colour;
        g.lineWidth = width;
        g.beginPath();
        g.arc(p[0], p[1], rad, 0, 2 * Math.PI);
        g.stroke();
        return true;
      };
      if (showTouched) {
        for (let k = 0; k < mapData.count; k++) {
          if (pic.touched[mapData.start + k]) ring(mapData.start + k, TOUCHED, 3, 1);
        }
      }
      let shown = 0;
      g.font = "bold 11px system-ui, sans-serif";
      for (const [i, rank] of hits) {
        if (ring(i, HIT, 7, 2.5)) {
          shown++;
          const p = where(i).map;
          g.fillStyle = HIT;
          g.fillText("#" + rank, p[0] > S - 40 ? p[0] - 30 : p[0] + 8, p[1] - 6);
        }
      }
      if (selected >= 0) ring(selected, SELECTED, 10, 2.5);
      map.dataset.hits = String(shown);
      performance.measure("adrap:map-draw", { start: t0 });
    }

    // where node i is drawn, in css px of each canvas (null where it is not drawn)
    function where(i) {
      let ic = null;
      let mp = null;
      const l = pic && layerOf(pic, i);
      if (l && geo && pic.size[i] > 0) {
        const [a, b] = span(i);
        const { y, h } = band(l);
        const x = (Math.max(a, GUTTER) + Math.min(b, geo.w)) / 2;
        if (b > GUTTER && a < geo.w) ic = [x, y + h / 2];
      }
      if (mapData && mgeo && i >= mapData.start && i < mapData.start + mapData.count) {
        const k = i - mapData.start;
        mp = [MAP_PAD + mapData.xy[2 * k] * mgeo.sc, MAP_PAD + (GRID - mapData.xy[2 * k + 1]) * mgeo.sc];
      }
      return { icicle: ic, map: mp };
    }

    function draw() {
      if (!pic) return;
      drawIcicle();
      drawMap();
    }

    function atIcicle(event) {
      const x = event.offsetX;
      const row = Math.floor(event.offsetY / geo.bandH);
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

    function atMap(event) {
      if (!mapData) return -1;
      let best = -1;
      let bestD = 12 * 12;
      for (let k = 0; k < mapData.count; k++) {
        const dx = MAP_PAD + mapData.xy[2 * k] * mgeo.sc - event.offsetX;
        const dy = MAP_PAD + (GRID - mapData.xy[2 * k + 1]) * mgeo.sc - event.offsetY;
        const d = dx * dx + dy * dy;
        if (d < bestD) {
          bestD = d;
          best = mapData.start + k;
        }
      }
      return best;
    }

    function choose(i) {
      if (i < 0) return;
      selected = i;
      draw();
      opts.onSelect(idAt(pic, i));
    }

    icicle.addEventListener("click", (event) => pic && choose(atIcicle(event)));
    icicle.addEventListener("dblclick", (event) => {
      const i = pic ? atIcicle(event) : -1;
      if (i < 0) return;
      view = { x0: pic.x0[i], x1: pic.x0[i] + Math.max(1, pic.size[i]) };
      opts.onZoom(true);
      draw();
    });
    map.addEventListener("click", (event) => pic && choose(atMap(event)));
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
        if (m.version !== pic.raw.version) return opts.onStale();
        maps.set(layer, { layer: m.layer, start: m.start, count: m.count,
          xy: new Uint16Array(bytes(m.xy).buffer), explained: m.explained, sampled: m.sampled });
      }
      mapData = maps.get(layer);
      drawMap();
      performance.measure("adrap:map", { start: t0 });
      return mapData;
    }

    return {
      load(raw) {
        pic = decode(raw);
        view = { x0: 0, x1: Math.max(1, pic.width) };
        maps.clear();
        mapData = null;
        selected = -1;
        hits = new Map();
        draw();
        return pic;
      },
      showMap,
      zoomOut() {
        if (!pic) return;
        view = { x0: 0, x1: Math.max(1, pic.width) };
        opts.onZoom(false);
        draw();
      },
      setTouched(on) {
        showTouched = on;
        draw();
      },
      setHits(ids) {
        if (!pic) return;
        hits = new Map();
        ids.forEach((id, k) => {
          const i = indexOf(pic, id);
          if (i >= 0) hits.set(i, k + 1);
        });
        draw();
      },
      select(id) {
        if (!pic) return;
        const i = indexOf(pic, id);
        if (i === selected) return;
        selected = i;
        draw();
      },
      where(id) {
        return pic ? where(indexOf(pic, id)) : null;
      },
      colour: (f) => PALETTE[Math.min(f, PALETTE.length - 1)],
      touchedColour: TOUCHED,
      hitColour: HIT,
    };
  }

  return { create };
})();
