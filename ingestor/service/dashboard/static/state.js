// What the views share: where the data come from, the last query's ranks, the rows showing each
// node, the picture. main.js sets src and picture once, before anything is shown.
export const state = {
  src: null, // the data: the daemon's API (api.js) or an exported file's blob (exported.js)
  hits: new Map(), // node id -> rank (1-based) of the last query
  rows: new Map(), // node id -> Set of <li> showing it in the tree
  picture: null, // the picture's canvases (picture.js)
};
