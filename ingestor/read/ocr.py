"""Optical character recognition with Debian's ``tesseract`` through pytesseract (extra ``ocr``).

Off by default (``ADRAP_READ__OCR``). Nothing is downloaded: tesseract's language data comes from
the distribution's packages (``tesseract-ocr-eng`` and friends).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ingestor.errors import SourceError

if TYPE_CHECKING:
    from PIL.Image import Image

__all__ = ["INSTALL_HINT", "ocr_image_bytes", "ocr_images"]

log = logging.getLogger(__name__)

INSTALL_HINT = "apt-get install tesseract-ocr and pip install 'adrap[ocr]' (see docs/formats.md)"
# Tesseract reads text best at roughly 300 dpi; tiny embedded images are upscaled to this height.
_MIN_SIDE = 32


def ocr_image_bytes(data: bytes, name: str) -> str:
    """Return the text tesseract reads in an image file's bytes (every frame of a TIFF/GIF).

    Raises:
        SourceError: pytesseract, Pillow or the ``tesseract`` binary is missing, or the bytes are
            not a readable image.
    """
    image_module = _pil(name)
    try:
        image = image_module.open(io.BytesIO(data))
        frames = []
        for index in range(getattr(image, "n_frames", 1)):
            image.seek(index)
            frames.append(image.convert("RGB"))
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        # Pillow raises UnidentifiedImageError (an OSError) for unknown or truncated data.
        raise SourceError(
            f"{name!r} is not a readable image ({type(exc).__name__}); re-save it or remove it"
        ) from exc
    return ocr_images(frames, name)


def ocr_images(images: Iterable[Image], name: str) -> str:
    """Return the text tesseract reads in ``images``, one paragraph per image that has text.

    Raises:
        SourceError: pytesseract or the ``tesseract`` binary is missing, or tesseract fails.
    """
    pytesseract = _pytesseract(name)
    texts: list[str] = []
    for image in images:
        if min(image.size) < _MIN_SIDE:
            continue  # icons and rules: no text worth reading, and tesseract warns about them
        try:
            text = pytesseract.image_to_string(image)
        except pytesseract.TesseractNotFoundError as exc:
            raise _missing(name, "the tesseract program is not installed") from exc
        except (pytesseract.TesseractError, OSError, RuntimeError) as exc:
            message = " ".join(str(exc).split())[:200]
            raise SourceError(
                f"{name!r} could not be read by tesseract ({message}); check the image"
            ) from exc
        if text.strip():
            texts.append(text.strip())
    return "\n\n".join(texts)


def _pytesseract(name: str) -> Any:  # pytesseract ships no type hints
    try:
        import pytesseract
    except ImportError as exc:
        raise _missing(name, "pytesseract is not installed") from exc
    return pytesseract


def _pil(name: str) -> ModuleType:
    try:
        from PIL import Image
    except ImportError as exc:
        raise _missing(name, "Pillow is not installed") from exc
    return Image


def _missing(name: str, what: str) -> SourceError:
    return SourceError(f"{name!r} needs OCR but {what}; {INSTALL_HINT}")
