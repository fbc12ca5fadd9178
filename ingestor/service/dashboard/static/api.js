// The daemon's API: GETs relative to the page (so it works behind a path prefix too), with the
// bearer token. The token comes from the URL fragment (#token=..., never sent to the server, and
// removed from the address bar at once) or the form shown after a 401; it is kept for this tab
// only (sessionStorage).
import { $ } from "./dom.js";

export const PAGE = 50; // nodes a page, in a layer or a node's children
const TOKEN_KEY = "adrap-token";

// the token in a URL fragment ("#token=..." or "#...&token=..."), or null
export function tokenFromHash(hash) {
  const m = /(?:^#|&)token=([^&]*)/.exec(hash);
  return m ? decodeURIComponent(m[1]) : null;
}

export function keepToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function takeTokenFromUrl() {
  const token = tokenFromHash(location.hash);
  if (token !== null) {
    keepToken(token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

// the URL of path relative to base, with the params that have a value (not null, undefined, "")
export function requestUrl(path, base, params) {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, v);
  }
  return url;
}

async function get(path, params) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(requestUrl(path, location.href, params), { headers });
  if (resp.status === 401) {
    $("token-form").hidden = false;
    throw new Error("the daemon needs its bearer token (ADRAP_WATCH__HTTP_TOKEN)");
  }
  const body = await resp.json().catch(() => ({ error: resp.status + " " + resp.statusText }));
  if (!resp.ok) throw new Error(body.error || String(resp.status));
  return body;
}

// the data source of the served page (exported.js has the same methods)
export const live = {
  layers: () => get("dashboard/api/layers"),
  layer: (n, offset) => get("dashboard/api/layer/" + n, { offset, limit: PAGE }),
  node: (id) => get("dashboard/api/node/" + encodeURIComponent(id)),
  children: (id, offset) =>
    get("dashboard/api/children/" + encodeURIComponent(id), { offset, limit: PAGE }),
  updates: () => get("dashboard/api/updates"),
  query: (params) => get("query", params),
  picture: () => get("dashboard/api/picture"),
  map: (n) => get("dashboard/api/picture/map/" + n),
};
