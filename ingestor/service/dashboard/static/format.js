// Small texts the views share.

export const PREVIEW = 160; // characters of a node's text in a list (the daemon's previews too)

// a node's layer as its rows name it
export function layerTag(layer) {
  return layer === 0 ? "leaf" : "L" + layer;
}

// the start of a text, as a preview
export function preview(text) {
  return text.slice(0, PREVIEW);
}

// seconds since the epoch (as the daemon writes times), in the reader's locale and time zone
export function localTime(seconds) {
  return new Date(seconds * 1000).toLocaleString();
}
