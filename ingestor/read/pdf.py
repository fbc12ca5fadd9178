"""PDF: the text layer of each page (pypdf), and OCR of a text-less page's images when asked."""

from __future__ import annotations

import io
import logging

from ingestor.errors import SourceError
from ingestor.read.parts import Extracted, Part

__all__ = ["read_pdf"]

log = logging.getLogger(__name__)

_ENCRYPTED = "is an encrypted PDF; save an unencrypted copy"


def read_pdf(data: bytes, name: str, *, ocr: bool = False) -> Extracted:
    """Return one part per page with text, located ``page N`` (1-based).

    With ``ocr`` a page without a text layer is read by tesseract from the images embedded in it
    (a scanner's page is one image); pages are not rendered.

    Raises:
        SourceError: the PDF is encrypted, malformed, or has no text (and OCR is off or found none).
    """
    # imported here: pypdf is only needed when a folder holds PDFs
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PyPdfError

    parts: list[Part] = []
    textless = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise SourceError(f"{name!r} {_ENCRYPTED}")
        for number, page in enumerate(reader.pages, 1):
            text = page.extract_text() or ""
            if not text.strip() and ocr:
                text = _ocr_page(page, f"{name}, page {number}")
            if text.strip():
                parts.append(Part(text, f"page {number}"))
            else:
                textless += 1
    except (FileNotDecryptedError, DependencyError) as exc:
        raise SourceError(f"{name!r} {_ENCRYPTED}") from exc
    # pypdf raises its own errors for most damage, but plain ValueError/KeyError/TypeError and
    # friends escape it for some malformed objects; all of them mean "corrupt file" here.
    except (
        PyPdfError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        AssertionError,
        RecursionError,
        OSError,
        ZeroDivisionError,
    ) as exc:
        raise SourceError(
            f"{name!r} is not a readable PDF ({type(exc).__name__}: {_one_line(exc)}); "
            "re-export it or remove it"
        ) from exc
    if not parts:
        if ocr:
            raise SourceError(
                f"{name!r} has no text layer and OCR found no text in its images; "
                "check the scan's quality or remove it"
            )
        raise SourceError(
            f"{name!r} has no text layer (a scan?); OCR is off: set ADRAP_READ__OCR=true and "
            "install the ocr extra (see docs/formats.md)"
        )
    if textless:
        log.info("%s: %d of %d pages have no text", name, textless, textless + len(parts))
    return Extracted(tuple(parts))


def _ocr_page(page: object, label: str) -> str:
    from ingestor.read.ocr import ocr_images

    images = []
    for image_file in getattr(page, "images", ()):
        try:
            images.append(image_file.image)
        except (OSError, ValueError, NotImplementedError) as exc:
            log.debug("%s: an embedded image cannot be decoded: %s", label, exc)
    return ocr_images((i for i in images if i is not None), label)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
