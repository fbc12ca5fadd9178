// A tiny test runner for the dashboard's modules, run in a real browser by
// tests/unit/service/test_dashboard_js.py. test("name", fn) registers a test (fn may be async);
// run() runs them in order and returns [{name, ok, message}]. The pytest side finds the names by
// reading the *.test.js files: write each as a string literal in double quotes right after
// `test(`, and give no two tests the same name.
const tests = [];

export function test(name, fn) {
  tests.push({ name, fn });
}

// a value as the failure messages show it (Maps, Sets and typed arrays as their contents)
export function show(v) {
  if (v === undefined) return "undefined";
  return JSON.stringify(v, (_, x) => {
    if (x instanceof Map) return { Map: [...x] };
    if (x instanceof Set) return { Set: [...x] };
    if (ArrayBuffer.isView(x)) return Array.from(x);
    return x === undefined ? "undefined" : x;
  });
}

function same(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (a instanceof Map || a instanceof Set) return same([...a], [...b]);
  if (Array.isArray(a) || ArrayBuffer.isView(a)) {
    return a.length === b.length && Array.from(a).every((x, i) => same(x, b[i]));
  }
  const ka = Object.keys(a).sort();
  return same(ka, Object.keys(b).sort()) && ka.every((k) => same(a[k], b[k]));
}

// deep equality (arrays, typed arrays, Maps, Sets, plain objects)
export function eq(actual, expected, what) {
  if (!same(actual, expected)) {
    throw new Error((what ? what + ": " : "") + "expected " + show(expected) + ", got " + show(actual));
  }
}

export function ok(cond, what) {
  if (!cond) throw new Error(what || "expected true");
}

// that the promise rejects with a message matching pattern
export async function rejects(promise, pattern) {
  let message = null;
  try {
    await promise;
  } catch (err) {
    message = String(err.message);
  }
  if (message === null) throw new Error("expected a rejection matching " + pattern + ", got none");
  if (!pattern.test(message)) throw new Error("expected a rejection matching " + pattern + ", got " + show(message));
}

export async function run() {
  const results = [];
  for (const { name, fn } of tests) {
    try {
      await fn();
      results.push({ name, ok: true, message: "" });
    } catch (err) {
      results.push({ name, ok: false, message: String((err && err.stack) || err) });
    }
  }
  return results;
}
