"""The dashboard page: ``static/index.html`` with its CSS and JavaScript inlined, and a CSP.

One document, no build toolchain, no CDN: the daemon serves it at ``/dashboard`` (the script then
fetches ``/dashboard/api/...``), and ``adrap explore`` writes it with the tree embedded as a JSON
blob (the script then reads the blob and fetches nothing). Inlining is what makes the exported
file self-contained; serving the same document keeps one code path.

Security: node texts are document contents, so the script only ever sets ``textContent``; the
Content-Security-Policy allows exactly the page's own inline script and style (by hash), no other
script, and network requests to the daemon itself only (none at all in an exported file). The
JSON blob is escaped so no ``</script>`` in a document can end it early.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any, Final

#: Markers in ``static/index.html`` replaced when the page is rendered.
_STYLE: Final = "/*@STYLE@*/"
_SCRIPT: Final = "/*@SCRIPT@*/"
_DATA: Final = "@DATA@"
_CSP: Final = "@CSP@"


@cache
def _asset(name: str) -> str:
    """Return a file of the package's ``static/`` folder (package data, in wheels too)."""
    return (resources.files(__package__) / "static" / name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


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
    # one script: the picture's module first (app.js uses it), so one hash in the CSP
    style, script = _asset("style.css"), _asset("picture.js") + "\n" + _asset("app.js")
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
