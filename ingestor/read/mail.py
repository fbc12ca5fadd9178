"""E-mail (.eml, RFC 5322) with the stdlib ``email`` package: header, body, readable attachments.

Parts: the header (``# Subject`` then ``From:``/``To:``/``Cc:``/``Date:`` lines, locator
``header``), the text body (the plain part, else the HTML part's visible text; ``body``), then
every attachment a reader exists for, read by the caller's ``read_attachment`` and located
``attachment NAME`` (``attachment NAME, page 2`` when the attachment's own part has a locator).
"""

from __future__ import annotations

import email
import email.errors
import logging
from collections.abc import Callable
from email import policy
from email.message import EmailMessage, Message
from pathlib import PurePath

from ingestor.errors import SourceError
from ingestor.read.htmltext import html_to_text
from ingestor.read.parts import Extracted, Part

__all__ = ["MAX_ATTACHMENT_BYTES", "AttachmentReader", "read_eml"]

log = logging.getLogger(__name__)

# (bytes, name for messages, lower-case suffix) → its parts; raises SourceError.
AttachmentReader = Callable[[bytes, str, str], Extracted]
# Bigger attachments are skipped: the whole mail is one file read at once, kept in memory.
MAX_ATTACHMENT_BYTES = 32 * 2**20
_HEADERS = ("From", "To", "Cc", "Date")
_MAIL_ERRORS = (email.errors.MessageError, LookupError, ValueError, TypeError, AttributeError)


def read_eml(data: bytes, name: str, read_attachment: AttachmentReader | None) -> Extracted:
    """Return a mail's header, body and readable attachments as parts.

    Args:
        data: the .eml file's bytes.
        name: the file's name as messages show it.
        read_attachment: reads an attachment's bytes; None skips attachments (a mail nested
            too deep). An attachment it refuses (``SourceError``) is skipped and logged.

    Raises:
        SourceError: the message cannot be parsed.
    """
    try:
        message = email.message_from_bytes(data, policy=policy.default)
        parts = _header(message)
        parts += _body(message, name)
        attachments = list(message.iter_attachments()) if isinstance(message, EmailMessage) else []
    except _MAIL_ERRORS as exc:
        raise _unreadable(name, exc) from exc
    if read_attachment is not None:
        for index, attachment in enumerate(attachments, 1):
            parts += _attachment(attachment, index, name, read_attachment)
    return Extracted(tuple(parts))


def _header(message: Message) -> list[Part]:
    lines = []
    subject = str(message.get("Subject", "") or "").strip()
    if subject:
        lines.append(f"# {' '.join(subject.split())}")
    for field in _HEADERS:
        value = str(message.get(field, "") or "").strip()
        if value:
            lines.append(f"{field}: {' '.join(value.split())}")
    return [Part("\n".join(lines), "header")] if lines else []


def _body(message: Message, name: str) -> list[Part]:
    if not isinstance(message, EmailMessage):
        return []
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return []
    content = body.get_content()
    if not isinstance(content, str):
        return []
    text = html_to_text(content) if body.get_content_subtype() == "html" else content
    return [Part(text.strip(), "body")] if text.strip() else []


def _attachment(
    attachment: Message, index: int, name: str, read_attachment: AttachmentReader
) -> list[Part]:
    try:
        if attachment.get_content_type() == "message/rfc822":
            inner = attachment.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            filename = attachment.get_filename() or f"message {index}.eml"
            payload = inner.as_bytes() if isinstance(inner, Message) else None
        else:
            filename = attachment.get_filename() or f"attachment {index}"
            raw = attachment.get_payload(decode=True)
            payload = raw if isinstance(raw, bytes) else None
    except _MAIL_ERRORS as exc:
        log.info("%s: attachment %d cannot be decoded, skipped: %s", name, index, exc)
        return []
    if payload is None:
        return []
    if len(payload) > MAX_ATTACHMENT_BYTES:
        log.info("%s: attachment %r is %d bytes, skipped", name, filename, len(payload))
        return []
    suffix = PurePath(filename).suffix.lower()
    if attachment.get_content_type() == "message/rfc822" and not suffix:
        suffix = ".eml"
    try:
        extracted = read_attachment(payload, f"{name}: {filename}", suffix)
    except SourceError as exc:
        log.info("%s: attachment %r skipped: %s", name, filename, exc)
        return []
    where = f"attachment {filename}"
    return [
        Part(p.text, f"{where}, {p.locator}" if p.locator else where, p.continues)
        for p in extracted.parts
    ]


def _unreadable(name: str, exc: BaseException) -> SourceError:
    message = " ".join(str(exc).split())[:160]
    return SourceError(
        f"{name!r} is not a readable e-mail ({type(exc).__name__}: {message}); "
        "re-save it or remove it"
    )
