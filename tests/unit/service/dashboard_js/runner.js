// Imports the test files named in ?files=a.test.js,b.test.js (each registers its tests), runs
// them, and leaves {results: [{name, ok, message}], errors: ["file: why it did not load"]} in
// window.adrapTests for the pytest side.
import { run } from "./check.js";

const files = (new URLSearchParams(location.search).get("files") || "").split(",").filter(Boolean);
const errors = [];
for (const file of files) {
  try {
    await import("./" + file);
  } catch (err) {
    errors.push(file + ": " + String((err && err.stack) || err));
  }
}
const results = await run();
window.adrapTests = { results, errors };
document.title = "done";
