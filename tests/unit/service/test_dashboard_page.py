"""The page's script: the ES modules of ``static/`` inlined as one script (``inline_modules``).

What the inlined script does in a browser is checked by test_dashboard_js.py (and the browser
tests of tests/integration); here, how the modules are put together and what is refused.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from ingestor.service import dashboard
from ingestor.service.dashboard.page import inline_modules, render_page

STATIC = Path(dashboard.__file__).with_name("static")


def test_the_page_holds_every_module_once_in_one_script_its_csp_allows() -> None:
    html = render_page()
    scripts = re.findall(r"<script(?: [^>]*)?>(.*?)</script>", html, re.S)
    inline = re.search(r'<script type="module">(.*?)</script>', html, re.S)
    assert inline is not None
    script = inline.group(1)
    assert len(scripts) == 2  # that one and the (empty) data blob
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in html
    names = re.findall(r"^// ([\w-]+\.js)$", script, re.M)
    assert sorted(names) == sorted(p.name for p in STATIC.glob("*.js"))  # none left out
    assert names[-1] == "main.js"
    assert not re.search(r"^\s*(import|export)\b", script, re.M)


def test_each_module_runs_after_those_it_imports_and_gets_their_exports() -> None:
    modules = {
        "main.js": 'import { b } from "./b.js";\nimport { a as first } from "./a.js";\nb(first);\n',
        "b.js": '// b\nimport { a } from "./a.js";\n\nexport function b(x) {\n  return a + x;\n}\n',
        "a.js": "export const a = 1;\nconst hidden = 2;\n",
    }
    script = inline_modules(modules.__getitem__, "main.js")
    assert re.findall(r"^// (\w+\.js)$", script, re.M) == ["a.js", "b.js", "main.js"]
    assert "const mod_a = (() => {\nconst a = 1;\nconst hidden = 2;\nreturn { a };\n})();" in script
    assert "// b\nconst { a } = mod_a;\n\nfunction b(x) {" in script
    assert "const { b } = mod_b;\nconst { a: first } = mod_a;\nb(first);" in script


@pytest.mark.parametrize(
    ("modules", "error"),
    [
        ({"main.js": 'import { x } from "./a.js";', "a.js": "const x = 1;"}, "exports no x"),
        (
            {"main.js": 'import { a } from "./a.js";', "a.js": 'import { m } from "./main.js";'},
            "import cycle main.js -> a.js -> main.js",
        ),
        ({"main.js": "export default function f() {}"}, "main.js:1"),
        ({"main.js": "export let x = 1;"}, "main.js:1"),
        ({"main.js": "const a = 1;\nexport { a };"}, "main.js:2"),
        ({"main.js": 'import a from "./a.js";', "a.js": ""}, "main.js:1"),
        ({"main.js": 'import { a } from "https://cdn.example/a.js";'}, "main.js:1"),
    ],
)
def test_what_the_inliner_cannot_keep_the_meaning_of_is_refused(
    modules: dict[str, str], error: str
) -> None:
    with pytest.raises(RuntimeError, match=re.escape(error)):
        inline_modules(modules.__getitem__, "main.js")
