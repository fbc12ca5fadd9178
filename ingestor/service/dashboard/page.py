"""The dashboard page: ``static/index.html`` with its CSS and JavaScript inlined, and a CSP.

One document, no build toolchain, no CDN: the daemon serves it at ``/dashboard`` (the script then
fetches ``/dashboard/api/...``), and ``adrap explore`` writes it with the tree embedded as a JSON
blob (the script then reads the blob and fetches nothing). Inlining is what makes the exported
file self-contained; serving the same document keeps one code path.

The script is written as small ES modules, one concept each (``static/*.js``, entry
``main.js``; docs/dashboard.md lists them), which a browser can import as they are (the tests
of their functions do). A file opened from disk cannot import modules, so
:func:`inline_modules` puts them in the page as one inline ``<script type="module">``: each
module a function scope, evaluated in the browser's order (its imports first), that returns its
exports; an ``import`` becomes a ``const`` of the names it takes from an earlier one. That asks
the modules to keep to two forms, checked here: ``import { a, b as c } from "./x.js";`` on one
line, and ``export`` before a top-level ``function``, ``async function``, ``const`` or ``class``
(no ``export let``: an importer holds the value it got, not a live binding); no import cycles.

Security: node texts are document contents, so the script only ever sets ``textContent``; the
Content-Security-Policy allows exactly the page's own inline script and style (by hash), no other
script, and network requests to the daemon itself only (none at all in an exported file). The
JSON blob is escaped so no ``</script>`` in a document can end it early.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, Final

#: Markers in ``static/index.html`` replaced when the page is rendered.
_STYLE: Final = "/*@STYLE@*/"
_SCRIPT: Final = "/*@SCRIPT@*/"
_DATA: Final = "@DATA@"
_CSP: Final = "@CSP@"

#: The script's entry module in ``static/`` (it imports the others).
ENTRY: Final = "main.js"
_IMPORT: Final = re.compile(r'import \{([\w$\s,]+)\} from "\./([\w-]+\.js)";')
_EXPORT: Final = re.compile(r"export ((?:async )?function\*? |const |class )([\w$]+)")
_MODULE_SYNTAX: Final = re.compile(r"\s*(import|export)\b")
_ALIAS: Final = re.compile(r"([\w$]+)(?:\s+as\s+([\w$]+))?")


@cache
def _asset(name: str) -> str:
    """Return a file of the package's ``static/`` folder (package data, in wheels too)."""
    return (resources.files(__package__) / "static" / name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


class _Module:
    """One module's text split into its imports, its exported names and the rest."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.imports: list[tuple[list[tuple[str, str]], str]] = []  # ([(name, as)], module)
        self.exports: list[str] = []
        self.body: list[str] = []
        self.head = 0  # where the imports were (after the module's opening comment)
        for n, line in enumerate(text.splitlines(), 1):
            if m := _IMPORT.fullmatch(line):
                names = [_ALIAS.fullmatch(part.strip()) for part in m[1].split(",")]
                if not all(names):
                    raise RuntimeError(f"static/{name}:{n}: cannot read the names of {line!r}")
                if not self.imports:
                    self.head = len(self.body)
                self.imports.append(([(a[1], a[2] or a[1]) for a in names if a], m[2]))
            elif m := _EXPORT.match(line):
                self.exports.append(m[2])
                self.body.append(line.removeprefix("export "))
            elif _MODULE_SYNTAX.match(line):
                raise RuntimeError(
                    f"static/{name}:{n}: the page inlines its modules and reads only "
                    '`import { a, b as c } from "./x.js";` and `export function|const|class '
                    f"name` at the start of a line: {line!r}"
                )
            else:
                self.body.append(line)

    @property
    def var(self) -> str:
        return "mod_" + re.sub(r"\W", "_", self.name.removesuffix(".js"))


def inline_modules(read: Callable[[str], str], entry: str = ENTRY) -> str:
    """Return the ES modules reached from ``entry`` as one script with no import or export.

    Args:
        read: a module's text by file name (``"tree.js"``).
        entry: the module that starts the page; the others run first, in the order a browser
            would (depth first, each import before the module that imports it).

    Raises:
        RuntimeError: a module outside the forms this reads, an import cycle, or an import of a
            name its module does not export.
    """
    done: dict[str, _Module] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in chain:
            raise RuntimeError("static/: import cycle " + " -> ".join((*chain, name)))
        module = _Module(name, read(name))
        for names, dep in module.imports:
            visit(dep, (*chain, name))
            missing = [n for n, _ in names if n not in done[dep].exports]
            if missing:
                raise RuntimeError(f"static/{name}: {dep} exports no {', '.join(missing)}")
        done[name] = module

    visit(entry, ())
    parts = []
    for m in done.values():  # in the order visited: each module after those it imports
        takes = [
            f"const {{ {', '.join(n if n == a else f'{n}: {a}' for n, a in names)} }} = "
            f"{done[dep].var};"
            for names, dep in m.imports
        ]
        ret = f"return {{ {', '.join(m.exports)} }};"
        body = [*m.body[: m.head], *takes, *m.body[m.head :]]
        parts.append("\n".join([f"// {m.name}", f"const {m.var} = (() => {{", *body, ret, "})();"]))
    return "\n".join(parts) + "\n"


@cache
def _script() -> str:
    return inline_modules(_asset)


def embed_json(data: Any) -> str:
    """Return ``data`` as JSON safe inside ``<script type="application/json">``.

    Every ``<``, ``>`` and ``&`` is written as a JSON unicode escape, so the document's text can
    never close the script element or open a comment there.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(data: Any = None) -> str:
    """Return the page: served (``data`` None: the script fetches) or exported (data embedded).

    Args:
        data: the exported tree (:func:`ingestor.service.dashboard.export.export_data`), or None.
    """
    style, script = _asset("style.css"), _script()
    connect = "'none'" if data is not None else "'self'"
    csp = (
        f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
        f"connect-src {connect}; img-src data:; base-uri 'none'; form-action 'none'"
    )
    html = _asset("index.html")
    for marker, value in (
        (_CSP, csp),
        (_STYLE, style),
        (_SCRIPT, script),
        (_DATA, "" if data is None else embed_json(data)),
    ):
        if html.count(marker) != 1:
            raise RuntimeError(f"static/index.html must contain {marker!r} exactly once")
        html = html.replace(marker, value)
    return html
