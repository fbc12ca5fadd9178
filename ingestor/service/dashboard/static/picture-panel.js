// The picture's panel around the canvases (picture.js): loading the picture, its legend, the
// choice of the map's layer and the note under the map.
import { $, el, showError } from "./dom.js";
import { HIT, TOUCHED, colour } from "./picture-style.js";
import { state } from "./state.js";

// a folder's name in the legend (raw: the picture; under: the folders every file shares)
export function folderLabel(raw, f) {
  return f.name === "" ? "(files directly in " + (raw.under || "the root") + ")" : raw.under + f.name;
}

// a layer in the map's choice
export function mapOptionLabel(l) {
  return (l.layer === 0 ? "leaves" : "layer " + l.layer) + " (" + l.count + ")";
}

// the note under a map: the layer, and how much of its nodes' variance the two axes show
export function mapNote(m) {
  const pct = m.explained.map((v) => (100 * v).toFixed(1) + " %").join(" + ");
  return (m.layer === 0 ? "Leaves" : "Layer " + m.layer) + ": " + m.count +
    " nodes at the two main axes of their vectors (PCA, " + pct + " of the variance" +
    (m.sampled < m.count ? ", fitted on " + m.sampled : "") + "). Near means alike, roughly.";
}

function legend(p) {
  const ul = $("legend");
  ul.replaceChildren();
  const item = (swatchClass, colourOf, name, count) => {
    const li = el("li");
    const sw = el("span", "swatch " + swatchClass);
    if (swatchClass === "ring") sw.style.borderColor = colourOf;
    else sw.style.backgroundColor = colourOf; // CSSOM: allowed by the page's CSP
    li.append(sw, el("span", null, name));
    if (count !== null) li.append(el("span", "count", count));
    ul.append(li);
  };
  p.raw.folders.forEach((f, k) => item("", colour(k), folderLabel(p.raw, f), f.leaves + " leaves"));
  item("", TOUCHED, "top edge: " + p.raw.touched_note, p.nTouched ? p.nTouched + " nodes" : null);
  item("ring", HIT, "a query's hits, ranked", null);
}

// show the map of a layer, and its note
export async function showMapOf(layer) {
  try {
    const m = await state.picture.showMap(layer);
    if (!m) return;
    $("map-note").textContent = mapNote(m);
  } catch (err) {
    showError("map of layer " + layer + ": " + err.message);
  }
}

let pictureLoad = null;

// (re)load the picture, one load at a time; hidden while the tree is empty
export async function loadPicture() {
  if (pictureLoad) return pictureLoad;
  pictureLoad = (async () => {
    const t0 = performance.now();
    try {
      const raw = await state.src.picture();
      if (!raw || !raw.n) {
        $("picture").hidden = true;
        return;
      }
      $("picture").hidden = false;
      const p = state.picture.load(raw);
      legend(p);
      const select = $("map-layer");
      select.replaceChildren();
      for (const l of raw.layers) {
        const o = el("option", null, mapOptionLabel(l));
        o.value = String(l.layer);
        select.append(o);
      }
      select.value = String(raw.map_layer);
      performance.measure("adrap:picture", { start: t0 }); // read by bench/dashboard.py
      await showMapOf(raw.map_layer);
      if (state.hits.size) state.picture.setHits([...state.hits.keys()]);
      document.body.dataset.picture = "1";
    } catch (err) {
      showError("picture: " + err.message);
    } finally {
      pictureLoad = null;
    }
  })();
  return pictureLoad;
}
