// adrap dashboard: the tree by layers, a node's text and links, a query's hits, the last updates.
// Plain JavaScript, no libraries. Two sources of data with the same shapes: the daemon's
// /dashboard/api endpoints (served page) or the JSON blob of an `adrap explore` file.
// Document text is only ever put in the page through textContent (never as HTML).
"use strict";
(() => {
  const PAGE = 50;
  const PREVIEW = 160;
  const TOKEN_KEY = "adrap-token";
  const $ = (id) => document.getElementById(id);
  const blob = $("adrap-data").textContent.trim();
  const embedded = blob ? JSON.parse(blob) : null;
  const rows = new Map(); // node id -> Set of <li> showing it
  let hits = new Map(); // node id -> rank (1-based) of the last query
  let lastUpdate; // undefined until the first look at the updates

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function showError(message) {
    const b = $("banner");
    b.textContent = message;
    b.hidden = !message;
  }

  // -- data: the daemon's API ---------------------------------------------------------------
  // The token comes from the URL fragment (#token=..., never sent to the server, removed from
  // the address bar at once) or the form shown after a 401; it is kept for this tab only.
  function takeTokenFromUrl() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
  }

  async function get(path, params) {
    const url = new URL(path, location.href); // relative: works behind a path prefix too
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, v);
    }
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const resp = await fetch(url, { headers });
    if (resp.status === 401) {
      $("token-form").hidden = false;
      throw new Error("the daemon needs its bearer token (ADRAP_WATCH__HTTP_TOKEN)");
    }
    const body = await resp.json().catch(() => ({ error: resp.status + " " + resp.statusText }));
    if (!resp.ok) throw new Error(body.error || String(resp.status));
    return body;
  }

  const live = {
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

  // -- data: an exported file ------------------------------------------------------------------
  function previewOf(n) {
    return {
      node_id: n.node_id, layer: n.layer, kind: n.kind, n_tokens: n.n_tokens, source: n.source,
      char_start: n.char_start, char_end: n.char_end, n_sources: n.sources.length,
      section: n.section || null, locator: n.locator || null,
      sources_capped: Boolean(n.sources_capped),
      n_children: n.children.length, preview: n.text.slice(0, PREVIEW),
    };
  }

  function exportedSource(data) {
    const nodes = data.nodes;
    const page = (ids, offset) => {
      const start = Number(offset || 0);
      return { start, ids: ids.slice(start, start + PAGE), more: start + PAGE < ids.length };
    };
    return {
      layers: async () => ({ tree: data.tree, layers: data.layers }),
      layer: async (n, offset) => {
        const p = page(data.order[String(n)] || [], offset);
        const next = p.more ? String(p.start + PAGE) : null;
        return { layer: n, nodes: p.ids.map((id) => previewOf(nodes[id])), next };
      },
      node: async (id) => {
        const n = nodes[id];
        if (!n) throw new Error("node " + id + " is not in this file (see the note above)");
        const parents = n.parents.filter((p) => nodes[p]).map((p) => previewOf(nodes[p]));
        const counts = { n_children: n.children.length, n_sources: n.sources.length };
        return Object.assign({}, n, { parents_preview: parents }, counts);
      },
      children: async (id, offset) => {
        const n = nodes[id];
        const p = page(n ? n.children : [], offset);
        const present = p.ids.filter((c) => nodes[c]);
        return {
          node_id: id, total: n ? n.children.length : 0, offset: p.start,
          nodes: present.map((c) => previewOf(nodes[c])), missing: p.ids.length - present.length,
          next: p.more ? p.start + PAGE : null,
        };
      },
      updates: async () => data.updates,
      query: null,
      picture: async () => data.picture || null,
      map: async (n) => data.picture.maps[String(n)],
    };
  }

  const src = embedded ? exportedSource(embedded) : live;

  // -- the tree ----------------------------------------------------------------------------------
  function mark(li) {
    const rank = hits.get(li.dataset.nodeId);
    li.classList.toggle("hit", rank !== undefined);
    li.querySelector(".rank").textContent = rank === undefined ? "" : "#" + rank;
  }

  function nodeRow(p) {
    const li = el("li", "node");
    li.dataset.nodeId = p.node_id;
    li.dataset.layer = p.layer;
    const head = el("div", "row");
    const toggle = el("button", "toggle", p.n_children ? "▸" : "·");
    toggle.type = "button";
    toggle.disabled = !p.n_children;
    toggle.title = p.n_children ? "open its " + p.n_children + " children" : "a leaf";
    const label = el("span", "label");
    label.append(el("span", "kind k-" + p.kind, p.layer === 0 ? "leaf" : "L" + p.layer));
    label.append(el("span", "text", p.preview));
    if (p.source) label.append(el("span", "src", p.source + ":" + p.char_start + "–" + p.char_end));
    else if (p.sources_capped) label.append(el("span", "src", "many files"));
    else if (p.n_sources) label.append(el("span", "src", p.n_sources + " files"));
    label.append(el("span", "tok", p.n_tokens + " tok"));
    if (p.stale) label.append(el("span", "stale", "stale"));
    head.append(toggle, el("span", "rank"), label);
    const kids = el("ul", "nodes children");
    kids.hidden = true;
    li.append(head, kids);
    let loaded = false;
    toggle.addEventListener("click", async () => {
      kids.hidden = !kids.hidden;
      toggle.textContent = kids.hidden ? "▸" : "▾";
      li.classList.toggle("open", !kids.hidden);
      if (!loaded) {
        loaded = true;
        const t0 = performance.now();
        await loadChildren(kids, p.node_id, 0);
        performance.measure("adrap:expand", { start: t0 }); // read by bench/dashboard.py
      }
    });
    label.addEventListener("click", () => showNode(p.node_id));
    if (!rows.has(p.node_id)) rows.set(p.node_id, new Set());
    rows.get(p.node_id).add(li);
    mark(li);
    return li;
  }

  function moreButton(list, text, load) {
    const b = el("button", "more", text);
    b.type = "button";
    b.addEventListener("click", () => {
      b.remove();
      load();
    });
    list.after(b);
  }

  async function loadLayerPage(list, layer, offset) {
    try {
      const page = await src.layer(layer, offset);
      list.append(...page.nodes.map(nodeRow));
      if (page.next !== null) moreButton(list, "more of layer " + layer, () => loadLayerPage(list, layer, page.next));
      list.classList.add("loaded");
    } catch (err) {
      showError("layer " + layer + ": " + err.message);
    }
  }

  async function loadChildren(list, id, offset) {
    try {
      const page = await src.children(id, offset);
      list.append(...page.nodes.map(nodeRow));
      if (page.missing) list.append(el("li", "muted", page.missing + " children not in this file"));
      if (page.next !== null) moreButton(list, "more children", () => loadChildren(list, id, page.next));
      list.classList.add("loaded");
    } catch (err) {
      showError("children of " + id + ": " + err.message);
    }
  }

  async function showLayers() {
    const data = await src.layers();
    $("tree-name").textContent = data.tree;
    document.title = "adrap · " + data.tree;
    const box = $("layers");
    box.replaceChildren();
    rows.clear();
    if (!data.layers.length) box.append(el("p", "muted", "The tree is empty."));
    let first = null;
    data.layers.forEach((l, i) => {
      const sec = el("details", "layer");
      sec.dataset.layer = l.layer;
      const name = l.layer === 0 ? "Leaves (layer 0)" : "Layer " + l.layer;
      let count = l.count + " nodes";
      if (l.embedded !== undefined && l.embedded < l.count) count += ", " + l.embedded + " in this file";
      const summary = el("summary", null, name + " — " + count);
      summary.append(el("span", "hits-in"));
      const list = el("ul", "nodes");
      sec.append(summary, list);
      let loaded = false;
      const load = async () => {
        if (!loaded) {
          loaded = true;
          const t0 = performance.now();
          await loadLayerPage(list, l.layer, null);
          performance.measure("adrap:layer", { start: t0 }); // read by bench/dashboard.py
        }
      };
      sec.addEventListener("toggle", () => sec.open && load());
      box.append(sec);
      if (i === 0) {
        sec.open = true; // the top layer: shown and loaded at once
        loaded = true;
        first = loadLayerPage(list, l.layer, null);
      }
    });
    await first;
  }

  // -- one node ----------------------------------------------------------------------------------
  function links(items, empty) {
    if (!items.length) return el("p", "muted", empty);
    const ul = el("ul", "links");
    for (const p of items) {
      const li = el("li", null, (p.layer === 0 ? "leaf" : "L" + p.layer) + " · " + p.preview);
      li.dataset.nodeId = p.node_id;
      li.addEventListener("click", () => showNode(p.node_id));
      ul.append(li);
    }
    return ul;
  }

  async function showNode(id) {
    picture.select(id);
    const box = $("detail");
    for (const li of document.querySelectorAll("li.node.selected")) li.classList.remove("selected");
    for (const li of rows.get(id) || []) li.classList.add("selected");
    try {
      const n = await src.node(id);
      const meta = el("dl", "meta");
      const add = (k, v) => meta.append(el("dt", null, k), el("dd", null, v));
      add("id", n.node_id);
      add("layer", n.layer + (n.layer === 0 ? " (leaf chunk)" : " (summary)"));
      add("tokens", n.n_tokens);
      if (n.layer === 0) {
        add("source", n.source + " · characters " + n.char_start + "–" + n.char_end + " · chunk " + n.chunk_index);
        if (n.locator) add("where", n.locator);
        if (n.section) add("section", n.section);
      } else {
        const more = n.sources.length < n.n_sources ? " … and " + (n.n_sources - n.sources.length) + " more" : "";
        if (n.sources_capped) add("sources", "more files than the tree's max_node_sources: not listed");
        else add("sources (" + n.n_sources + ")", n.sources.join(", ") + more);
        if (n.summarizer) add("summarizer", n.summarizer);
        if (n.stale) add("stale", "its children changed; its text is regenerated at the next refresh");
      }
      add("updated", new Date(n.updated_at * 1000).toLocaleString());
      if (hits.has(n.node_id)) add("query rank", "#" + hits.get(n.node_id));
      const kids = el("ul", "links");
      box.replaceChildren(el("h2", null, "Node"), meta, el("pre", "text", n.text),
        el("h3", null, "Parents (" + n.parents.length + ")"), links(n.parents_preview, "none: a top node"),
        el("h3", null, "Children (" + n.n_children + ")"), kids);
      if (n.n_children) loadLinks(kids, id, 0);
      else kids.replaceWith(el("p", "muted", "none: a leaf"));
    } catch (err) {
      showError(err.message);
    }
  }

  async function loadLinks(list, id, offset) {
    const page = await src.children(id, offset);
    for (const li of links(page.nodes, "").children) list.append(li);
    if (page.next !== null) moreButton(list, "more children", () => loadLinks(list, id, page.next));
  }

  // -- a query ----------------------------------------------------------------------------------
  function showHits(out) {
    hits = new Map(out.hits.map((h, i) => [h.node_id, i + 1]));
    picture.setHits(out.hits.map((h) => h.node_id));
    const list = $("hits");
    list.replaceChildren();
    for (const h of out.hits) {
      const li = el("li");
      li.dataset.nodeId = h.node_id;
      li.append(el("span", "score", h.score.toFixed(3)));
      li.append((h.layer === 0 ? "leaf " : "L" + h.layer + " ") + h.n_tokens + " tok · " + h.text.slice(0, PREVIEW));
      li.addEventListener("click", () => showNode(h.node_id));
      list.append(li);
    }
    $("results-summary").textContent = out.hits.length + " nodes in score order, " + out.total_tokens +
      " of " + out.max_tokens + " tokens used (" + out.mode + ", " + Math.round(out.seconds * 1000) + " ms)";
    for (const set of rows.values()) for (const li of set) mark(li);
    const per = new Map();
    for (const h of out.hits) per.set(String(h.layer), (per.get(String(h.layer)) || 0) + 1);
    for (const sec of document.querySelectorAll("details.layer")) {
      const n = per.get(sec.dataset.layer);
      sec.querySelector(".hits-in").textContent = n ? n + " hit" + (n > 1 ? "s" : "") : "";
    }
    $("results").hidden = false;
    $("results").dataset.state = "done";
  }

  async function runQuery(event) {
    event.preventDefault();
    if (!src.query) return;
    $("results").dataset.state = "running";
    showError("");
    try {
      showHits(await src.query({ q: $("q").value, mode: $("qmode").value, max_tokens: $("budget").value }));
    } catch (err) {
      $("results").dataset.state = "failed";
      showError("query: " + err.message);
    }
  }

  // -- updates ----------------------------------------------------------------------------------
  function showUpdates(u) {
    const box = $("updates-body");
    box.className = "";
    const meta = el("dl", "meta");
    const add = (k, v) => v !== undefined && v !== null && meta.append(el("dt", null, k), el("dd", null, v));
    add("documents", u.documents);
    add("pending events", u.pending_events);
    add("ready", u.ready === undefined || u.ready === null ? undefined : String(u.ready));
    add("deletions paused", u.deletions_paused);
    add("awaiting confirmation", u.awaiting_confirmation);
    for (const [k, v] of Object.entries(u.state || {})) add(k.replaceAll("_", " "), v);
    const parts = [meta];
    if (u.note) parts.unshift(el("p", "muted", u.note));
    const q = Object.entries(u.quarantined || {});
    parts.push(el("h3", null, "Quarantined files (" + q.length + ")"));
    if (q.length) {
      const ul = el("ul", "quarantine");
      for (const [file, v] of q) ul.append(el("li", null, file + ": " + (v.reason || v)));
      parts.push(ul);
    }
    const unread = u.unread || {};
    for (const [kind, title] of [["stale", "Stale: cannot be read now, earlier version kept"],
                                 ["skipped", "Skipped: content cannot be used"]]) {
      const rows = unread[kind + "_files"] || [];
      parts.push(el("h3", null, title + " (" + (unread[kind] || 0) + ")"));
      if (rows.length) {
        const ul = el("ul", "unread " + kind);
        for (const r of rows) {
          ul.append(el("li", null, r.source + " (since " + new Date(r.since * 1000).toLocaleString() + "): " + r.reason));
        }
        if ((unread[kind] || 0) > rows.length) ul.append(el("li", "muted", "… " + (unread[kind] - rows.length) + " more: adrap status --offset " + rows.length));
        parts.push(ul);
      }
    }
    const ups = u.updates || [];
    parts.push(el("h3", null, "Last updates (" + ups.length + ")"));
    for (const up of ups) {
      const d = el("div", "update");
      d.append(el("div", "when", new Date(up.at * 1000).toLocaleString() + " · " + up.seconds + " s"));
      d.append(el("div", null, "files +" + up.files_added + " ~" + up.files_changed + " −" + up.files_removed +
        "; leaves +" + up.leaves_added + " −" + up.leaves_removed));
      d.append(el("div", null, "clusters changed " + up.clusters_changed + ", created " + up.clusters_created +
        ", split " + up.clusters_split + ", removed " + up.clusters_removed + "; summaries regenerated " +
        up.summaries_regenerated + ", stale " + (up.summaries_deferred || 0) + ", within tolerance " +
        (up.summaries_tolerated || 0) + (up.rebuilt ? "; full rebuild" : "")));
      parts.push(d);
    }
    box.replaceChildren(...parts);
    const newest = ups.length ? ups[0].at : null;
    if (lastUpdate !== undefined && newest !== lastUpdate) {
      showLayers().catch((err) => showError(err.message)); // the tree changed: recount and reload
      loadPicture();
    }
    lastUpdate = newest;
  }

  async function refreshUpdates() {
    try {
      showUpdates(await src.updates());
    } catch (err) {
      showError("updates: " + err.message);
    }
  }

  // -- the picture ------------------------------------------------------------------------------
  const picture = AdrapPicture.create({
    icicle: $("icicle"),
    map: $("map"),
    onSelect: (id) => showNode(id),
    fetchMap: (n) => src.map(n),
    onStale: () => loadPicture(),
    onZoom: (zoomed) => {
      $("zoom-out").hidden = !zoomed;
    },
  });

  function legend(p) {
    const ul = $("legend");
    ul.replaceChildren();
    const item = (swatchClass, colour, name, count) => {
      const li = el("li");
      const sw = el("span", "swatch " + swatchClass);
      if (swatchClass === "ring") sw.style.borderColor = colour;
      else sw.style.backgroundColor = colour; // CSSOM: allowed by the page's CSP
      li.append(sw, el("span", null, name));
      if (count !== null) li.append(el("span", "count", count));
      ul.append(li);
    };
    p.raw.folders.forEach((f, k) => {
      const name = f.name === "" ? "(files directly in " + (p.raw.under || "the root") + ")" : p.raw.under + f.name;
      item("", picture.colour(k), name, f.leaves + " leaves");
    });
    item("", picture.touchedColour, "top edge: " + p.raw.touched_note, p.nTouched ? p.nTouched + " nodes" : null);
    item("ring", picture.hitColour, "a query's hits, ranked", null);
  }

  async function showMapOf(layer) {
    try {
      const m = await picture.showMap(layer);
      if (!m) return;
      const pct = m.explained.map((v) => (100 * v).toFixed(1) + " %").join(" + ");
      $("map-note").textContent = (m.layer === 0 ? "Leaves" : "Layer " + m.layer) + ": " + m.count +
        " nodes at the two main axes of their vectors (PCA, " + pct + " of the variance" +
        (m.sampled < m.count ? ", fitted on " + m.sampled : "") + "). Near means alike, roughly.";
    } catch (err) {
      showError("map of layer " + layer + ": " + err.message);
    }
  }

  let pictureLoad = null;
  async function loadPicture() {
    if (pictureLoad) return pictureLoad; // one load at a time
    pictureLoad = (async () => {
      const t0 = performance.now();
      try {
        const raw = await src.picture();
        if (!raw || !raw.n) {
          $("picture").hidden = true;
          return;
        }
        $("picture").hidden = false;
        const p = picture.load(raw);
        legend(p);
        const select = $("map-layer");
        select.replaceChildren();
        for (const l of raw.layers) {
          const o = el("option", null, (l.layer === 0 ? "leaves" : "layer " + l.layer) + " (" + l.count + ")");
          o.value = String(l.layer);
          select.append(o);
        }
        select.value = String(raw.map_layer);
        performance.measure("adrap:picture", { start: t0 }); // read by bench/dashboard.py
        await showMapOf(raw.map_layer);
        if (hits.size) picture.setHits([...hits.keys()]);
        document.body.dataset.picture = "1";
      } catch (err) {
        showError("picture: " + err.message);
      } finally {
        pictureLoad = null;
      }
    })();
    return pictureLoad;
  }

  $("map-layer").addEventListener("change", (event) => showMapOf(Number(event.target.value)));
  $("show-touched").addEventListener("change", (event) => picture.setTouched(event.target.checked));
  $("zoom-out").addEventListener("click", () => picture.zoomOut());

  // -- start ------------------------------------------------------------------------------------
  async function start() {
    showError("");
    try {
      await showLayers();
      loadPicture(); // drawn when it comes (a big tree's first picture takes seconds)
      await refreshUpdates();
      document.body.dataset.ready = "1";
      performance.mark("adrap:ready"); // the first view is drawn (bench/dashboard.py reads it)
    } catch (err) {
      showError(err.message);
      if (/reconciling/.test(err.message)) setTimeout(start, 2000);
    }
  }

  $("search").addEventListener("submit", runQuery);
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token-form").hidden = true;
    start();
  });
  if (embedded) {
    for (const e of $("search").elements) e.disabled = true;
    $("note").textContent = embedded.note;
    $("note").hidden = false;
  } else {
    takeTokenFromUrl();
    setInterval(refreshUpdates, 10000);
  }
  start();
})();
