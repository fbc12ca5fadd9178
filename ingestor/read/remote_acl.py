"""NFSv4 ACLs and SMB/CIFS security descriptors, decoded to the entries adrap judges callers by.

Where the mount exposes them, the Linux NFS client gives a file's NFSv4 ACL as the extended
attribute ``system.nfs4_acl`` (XDR, RFC 7530 §6: a count, then per entry its type, flags, access
mask and who), and the CIFS client (mounted with ``cifsacl``) gives the Windows security descriptor
as ``system.cifs_acl`` (MS-DTYP §2.4.6: self-relative, little-endian; its DACL's entries name SIDs).
Both are decoded here without a library: the formats are fixed by their specifications, and the
maintained tools (nfs4-acl-tools, cifs-utils) ship programs, not Python bindings.

Each entry that concerns what is asked (read on the file: NFSv4 ``READ_DATA``, Windows
``FILE_READ_DATA``/``GENERIC_READ``/``GENERIC_ALL``; search on a folder: ``EXECUTE``/
``FILE_TRAVERSE``/``GENERIC_EXECUTE``/``GENERIC_ALL``) becomes ``(allow, who)``, in order; entries
that only pass on to children (``INHERIT_ONLY``) are left out. ``who`` is what adrap knows:

- ``OWNER@``, ``GROUP@``, ``EVERYONE@`` (NFSv4's special names; Windows' Everyone ``S-1-1-0``);
- ``AUTH@``: any caller adrap knows by a user or group (Windows' Authenticated Users ``S-1-5-11``);
- ``u:<uid>`` / ``g:<gid>``: an NFSv4 ``name@domain`` (or a bare numeric id) looked up as a local
  user or, with the group flag, a group; a SID Samba gives a Unix account (``S-1-22-1-<uid>``,
  ``S-1-22-2-<gid>``); any other SID through the access file's ``[sids]`` table;
- ``?``: a principal adrap cannot map. It never grants, and where it denies it denies everyone:
  who it stands for is unknown, so the file is kept from all rather than shown to some it was not
  meant for.

:class:`~ingestor.read.access_classes.AceStep` decides with the first entry naming the caller
(NFSv4 §6.2.1; Windows checks a canonical DACL the same way for one right).
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import struct
from collections.abc import Mapping
from typing import Final

from ingestor.read.access_classes import READ, SEARCH

__all__ = ["NFS4_XATTR", "NTSD_XATTR", "decode_nfs4", "decode_ntsd", "read_remote_acl"]

NFS4_XATTR: Final = "system.nfs4_acl"
NTSD_XATTR: Final = "system.cifs_acl"

Ace = tuple[bool, str]

# RFC 7530 §6.2.1
_NFS4_ALLOW, _NFS4_DENY = 0, 1
_NFS4_INHERIT_ONLY, _NFS4_GROUP = 0x8, 0x40
_NFS4_MASK = {READ: 0x1, SEARCH: 0x20}  # READ_DATA / LIST_DIRECTORY, EXECUTE
# MS-DTYP §2.4.4.1, §2.4.3
_NT_ALLOW, _NT_DENY = 0, 1
_NT_INHERIT_ONLY = 0x08
_NT_OTHER_DENIES = frozenset({0x06, 0x0A, 0x0C})  # object, callback, callback-object denies
_GENERIC_ALL, _GENERIC_READ, _GENERIC_EXECUTE = 0x10000000, 0x80000000, 0x20000000
_NT_MASK = {
    READ: 0x1 | _GENERIC_READ | _GENERIC_ALL,  # FILE_READ_DATA
    SEARCH: 0x20 | _GENERIC_EXECUTE | _GENERIC_ALL,  # FILE_TRAVERSE
}
_WELL_KNOWN = {"S-1-1-0": "EVERYONE@", "S-1-5-11": "AUTH@"}


def read_remote_acl(
    path: str, need: int, sids: Mapping[str, str] | None = None
) -> tuple[Ace, ...] | None:
    """Return the entries concerning ``need`` of ``path``'s NFSv4 ACL or security descriptor;
    None where it has neither (a local file system: its mode bits and POSIX ACL decide).

    Raises:
        OSError: an attribute could not be read (other than "none there" / "not supported").
        ValueError: an attribute is malformed.
    """
    for name in (NFS4_XATTR, NTSD_XATTR):
        try:
            raw = os.getxattr(path, name)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL):
                continue
            raise
        return decode_nfs4(raw, need) if name == NFS4_XATTR else decode_ntsd(raw, need, sids)
    return None


def decode_nfs4(raw: bytes, need: int) -> tuple[Ace, ...]:
    """Decode ``system.nfs4_acl`` (XDR) to the entries concerning ``need``.

    Raises:
        ValueError: truncated or not an NFSv4 ACL.
    """
    bit = _NFS4_MASK[need]
    (count,) = _unpack(">I", raw, 0)
    off, out = 4, []
    for _ in range(count):
        kind, flags, mask, size = _unpack(">IIII", raw, off)
        off += 16
        who = raw[off : off + size]
        if len(who) != size:
            raise ValueError(f"NFSv4 ACL of {len(raw)} bytes ends inside an entry")
        off += (size + 3) & ~3
        if flags & _NFS4_INHERIT_ONLY or not mask & bit or kind not in (_NFS4_ALLOW, _NFS4_DENY):
            continue  # audit/alarm entries (types 2, 3) decide nothing
        out.append((kind == _NFS4_ALLOW, _nfs4_who(who.decode("utf-8", "replace"), flags)))
    return tuple(out)


def decode_ntsd(raw: bytes, need: int, sids: Mapping[str, str] | None = None) -> tuple[Ace, ...]:
    """Decode a self-relative security descriptor to its DACL's entries concerning ``need``.

    ``sids``: SIDs mapped to ``user:NAME`` / ``group:NAME`` (the access file's ``[sids]``).
    A descriptor without a DACL lets everyone in (Windows' rule); an empty DACL no one.

    Raises:
        ValueError: truncated or not a security descriptor.
    """
    bit = _NT_MASK[need]
    revision, _, _control, owner_at, group_at, _sacl_at, dacl_at = _unpack("<BBHIIII", raw, 0)
    if revision != 1:
        raise ValueError(f"security descriptor revision {revision} (this reads revision 1)")
    owner = _sid(raw, owner_at) if owner_at else None
    group = _sid(raw, group_at) if group_at else None
    if not dacl_at:
        return ((True, "EVERYONE@"),)
    _, _, _, count, _ = _unpack("<BBHHH", raw, dacl_at)
    off, out = dacl_at + 8, []
    for _ in range(count):
        kind, flags, size = _unpack("<BBH", raw, off)
        if size < 8:
            raise ValueError(f"security descriptor: an entry of {size} bytes")
        (mask,) = _unpack("<I", raw, off + 4)
        if not flags & _NT_INHERIT_ONLY and mask & bit:
            if kind in (_NT_ALLOW, _NT_DENY):
                sid = _sid(raw, off + 8)
                who = "OWNER@" if sid == owner else "GROUP@" if sid == group else ""
                out.append((kind == _NT_ALLOW, who or _nt_who(sid, sids)))
            elif kind in _NT_OTHER_DENIES:  # a deny adrap does not read: it may be anyone's
                out.append((False, "?"))
            # object and callback allows grant nothing here; audit and alarm entries decide nothing
        off += size
    return tuple(out)


def _nfs4_who(who: str, flags: int) -> str:
    if who in ("OWNER@", "GROUP@", "EVERYONE@"):
        return who
    return _local(bool(flags & _NFS4_GROUP), who.split("@", 1)[0])


def _nt_who(sid: str, sids: Mapping[str, str] | None) -> str:
    if sid in _WELL_KNOWN:
        return _WELL_KNOWN[sid]
    for prefix, group in (("S-1-22-1-", False), ("S-1-22-2-", True)):  # Samba's Unix accounts
        if sid.startswith(prefix) and sid[len(prefix) :].isdigit():
            return _local(group, sid[len(prefix) :])
    kind, _, name = (sids or {}).get(sid, "").partition(":")
    return _local(kind == "group", name) if kind in ("user", "group") else "?"


def _local(group: bool, name: str) -> str:
    """``u:<uid>`` / ``g:<gid>`` of the local user or group ``name`` (a name or a number);
    ``?`` where the system knows no such name."""
    if name.isdigit():
        return f"{'g' if group else 'u'}:{int(name)}"
    try:
        return f"g:{grp.getgrnam(name).gr_gid}" if group else f"u:{pwd.getpwnam(name).pw_uid}"
    except KeyError:
        return "?"


def _sid(raw: bytes, off: int) -> str:
    revision, count = _unpack("<BB", raw, off)
    authority = int.from_bytes(_slice(raw, off + 2, 6), "big")
    subs = _unpack(f"<{count}I", raw, off + 8)
    return "-".join(["S", str(revision), str(authority), *map(str, subs)])


def _unpack(fmt: str, raw: bytes, off: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, raw, off)
    except struct.error:
        raise ValueError(f"ACL attribute of {len(raw)} bytes ends at offset {off}") from None


def _slice(raw: bytes, off: int, n: int) -> bytes:
    out = raw[off : off + n]
    if len(out) != n:
        raise ValueError(f"ACL attribute of {len(raw)} bytes ends at offset {off}")
    return out
