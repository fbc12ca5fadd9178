import { PAGE, keepToken, live, requestUrl, tokenFromHash } from "../static/api.js";
import { eq, ok, rejects, test } from "./check.js";

test("api: tokenFromHash reads the token first or after other keys", () => {
  eq(tokenFromHash("#token=abc"), "abc");
  eq(tokenFromHash("#x=1&token=a%20b&y=2"), "a b");
  eq(tokenFromHash("#token="), "");
  eq(tokenFromHash("#mytoken=abc"), null);
  eq(tokenFromHash(""), null);
});

test("api: requestUrl is relative to the page and keeps the params with a value", () => {
  const url = requestUrl("dashboard/api/layer/2", "http://h:1/pre/dashboard#token=x",
    { offset: null, limit: 50, q: "", mode: undefined, after: "a b" });
  eq(String(url), "http://h:1/pre/dashboard/api/layer/2?limit=50&after=a+b");
});

// fetch answering every request with `status` and `body`, recording [url, Authorization]
async function withFetch(status, body, fn) {
  const seen = [];
  const real = window.fetch;
  window.fetch = async (url, init) => {
    seen.push([String(url), init.headers.Authorization]);
    return new Response(body, { status, headers: { "Content-Type": "application/json" } });
  };
  try {
    await fn();
  } finally {
    window.fetch = real;
    sessionStorage.clear();
  }
  return seen;
}

test("api: live asks the daemon's endpoints with the bearer token and the page size", async () => {
  keepToken("tk");
  const base = new URL(".", location.href).href;
  const seen = await withFetch(200, '{"nodes": []}', async () => {
    eq(await live.layer(2, "abc"), { nodes: [] });
    await live.children("a/b", 50);
    await live.map(1);
  });
  eq(PAGE, 50);
  eq(seen, [
    [base + "dashboard/api/layer/2?offset=abc&limit=50", "Bearer tk"],
    [base + "dashboard/api/children/a%2Fb?offset=50&limit=50", "Bearer tk"],
    [base + "dashboard/api/picture/map/1", "Bearer tk"],
  ]);
});

test("api: an error answer rejects with the daemon's message; 401 asks for the token", async () => {
  await withFetch(503, '{"error": "reconciling; retry shortly"}', () =>
    rejects(live.layers(), /^reconciling; retry shortly$/));
  await withFetch(500, "not json", () => rejects(live.layers(), /^500 /));
  const form = document.getElementById("token-form");
  form.hidden = true;
  const seen = await withFetch(401, "{}", () => rejects(live.updates(), /bearer token/));
  ok(!form.hidden, "the token form is shown");
  eq(seen[0][1], undefined, "no token kept: no Authorization header");
  form.hidden = true;
});
