"""Office files written as a user's tools write them (python-pptx; OpenDocument's zip laid out
as LibreOffice lays it), for the format tests and bench/hostile.py."""

from __future__ import annotations

import io
import zipfile

FACT = "The heron nests by the canal in March"


def make_pptx() -> bytes:
    import pptx

    presentation = pptx.Presentation()
    for title, body, notes in [("Intro", "hello", ""), ("Herons", FACT, "Say it slowly")]:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"'
)


def make_odf(body: str, *, manifest: str = "<manifest/>") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("META-INF/manifest.xml", manifest)
        archive.writestr(
            "content.xml",
            f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>'
            f"<office:body>{body}</office:body></office:document-content>",
        )
    return buffer.getvalue()
