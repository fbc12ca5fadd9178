"""NFSv4 ACLs and SMB/CIFS security descriptors decide who may read where a mount exposes them
(issue 53). The attributes are built byte for byte as their specifications lay them out (RFC 7530
§6 in XDR; MS-DTYP §2.4.6, self-relative), as the Linux NFS and CIFS clients return them."""

from __future__ import annotations

import json
import os
import pwd
import re
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from ingestor.read import remote_acl
from ingestor.read.access_classes import READ, SEARCH, AccessClass, AceStep, Identity
from ingestor.read.permissions import AccessFile, AccessReader
from ingestor.read.remote_acl import decode_nfs4, decode_ntsd

ALLOW, DENY = 0, 1
READ_DATA, EXECUTE = 0x1, 0x20
INHERIT_ONLY, GROUP_FLAG = 0x8, 0x40
GENERIC_READ, GENERIC_ALL = 0x80000000, 0x10000000

OWNER = Identity("owner", 1000, frozenset({1000}))
MEMBER = Identity("member", 1001, frozenset({1000, 2000}))
OTHER = Identity("other", 1002, frozenset({1002}))
ANON = Identity("anonymous")
SYSTEM_USER = pwd.getpwuid(1).pw_name  # Debian's "daemon": a name the system knows


def nfs4(*aces: tuple[int, int, int, str]) -> bytes:
    """``system.nfs4_acl``: count, then type, flag, access mask and who (an XDR string)."""
    out = struct.pack(">I", len(aces))
    for kind, flags, mask, who in aces:
        raw = who.encode()
        out += struct.pack(">IIII", kind, flags, mask, len(raw)) + raw + b"\0" * (-len(raw) % 4)
    return out


def sid(text: str) -> bytes:
    parts = text.split("-")
    subs = [int(x) for x in parts[3:]]
    return (
        struct.pack("<BB", int(parts[1]), len(subs))
        + int(parts[2]).to_bytes(6, "big")
        + struct.pack(f"<{len(subs)}I", *subs)
    )


def ntsd(owner: str, group: str, aces: Sequence[tuple[int, int, int, str]] | None) -> bytes:
    """A self-relative security descriptor: header, owner SID, group SID, DACL (None: no DACL)."""
    o, g = sid(owner), sid(group)
    header = 20
    dacl = b""
    if aces is not None:
        body = b""
        for kind, flags, mask, who in aces:
            s = sid(who)
            body += struct.pack("<BBHI", kind, flags, 8 + len(s), mask) + s
        dacl = struct.pack("<BBHHH", 2, 0, 8 + len(body), len(aces), 0) + body
    dacl_at = header + len(o) + len(g) if aces is not None else 0
    return struct.pack("<BBHIIII", 1, 0, 0x8004, header, header + len(o), 0, dacl_at) + o + g + dacl


def step(aces: tuple[tuple[bool, str], ...], need: int = READ) -> AceStep:
    return AceStep(1000, 1000, need, aces)


def test_an_nfs4_acl_decides_in_order_with_its_special_names() -> None:
    raw = nfs4(
        (ALLOW, 0, READ_DATA, "OWNER@"),
        (DENY, 0, READ_DATA, "GROUP@"),
        (ALLOW, INHERIT_ONLY, READ_DATA, "EVERYONE@"),  # for children only: not here
        (ALLOW, 0, EXECUTE, "EVERYONE@"),  # search, not read
        (ALLOW, 0, READ_DATA | EXECUTE, "EVERYONE@"),
    )
    aces = decode_nfs4(raw, READ)
    assert aces == ((True, "OWNER@"), (False, "GROUP@"), (True, "EVERYONE@"))
    s = step(aces)
    assert [s.allows(w) for w in (OWNER, MEMBER, OTHER, ANON)] == [True, False, True, True]
    search = step(decode_nfs4(raw, SEARCH), SEARCH)
    assert all(search.allows(w) for w in (OWNER, MEMBER, OTHER, ANON))


def test_nfs4_names_map_to_local_users_and_groups_and_unknown_ones_deny_everyone() -> None:
    raw = nfs4(
        (ALLOW, 0, READ_DATA, f"{SYSTEM_USER}@example.org"),
        (ALLOW, GROUP_FLAG, READ_DATA, "2000"),  # idmapping off: numeric ids
    )
    aces = decode_nfs4(raw, READ)
    assert aces == ((True, "u:1"), (True, "g:2000"))
    s = step(aces)
    assert s.allows(Identity("d", 1))
    assert s.allows(MEMBER)
    assert not s.allows(OWNER), "the owner of an NFSv4 file reads only if an entry says so"
    unknown = step(decode_nfs4(nfs4((DENY, 0, READ_DATA, "ghost@example.org"),
                                    (ALLOW, 0, READ_DATA, "EVERYONE@")), READ))  # fmt: skip
    assert unknown.aces[0] == (False, "?")
    assert not any(unknown.allows(w) for w in (OWNER, MEMBER, OTHER, ANON))


def test_a_security_descriptor_maps_sids_and_decides_in_order() -> None:
    owner, group = "S-1-22-1-1000", "S-1-22-2-1000"  # Samba's Unix accounts
    raw = ntsd(
        owner,
        group,
        [
            (DENY, 0, READ_DATA, "S-1-22-1-1001"),
            (ALLOW, 0, GENERIC_READ, owner),
            (ALLOW, INHERIT_ONLY, GENERIC_ALL, "S-1-1-0"),
            (ALLOW, 0, READ_DATA, "S-1-5-11"),  # Authenticated Users
        ],
    )
    aces = decode_ntsd(raw, READ)
    assert aces == ((False, "u:1001"), (True, "OWNER@"), (True, "AUTH@"))
    s = step(aces)
    assert [s.allows(w) for w in (OWNER, MEMBER, OTHER, ANON)] == [True, False, True, False]
    assert decode_ntsd(raw, SEARCH) == ()
    assert not step((), SEARCH).allows(OWNER), "no entry: refused"


def test_descriptor_edge_cases_no_dacl_empty_dacl_mapped_and_unknown_sids() -> None:
    everyone = decode_ntsd(ntsd("S-1-22-1-1000", "S-1-22-2-1000", None), READ)
    assert step(everyone).allows(ANON), "no DACL: everyone (Windows' rule)"
    assert decode_ntsd(ntsd("S-1-22-1-1000", "S-1-22-2-1000", []), READ) == ()
    domain = "S-1-5-21-1004336348-1177238915-682003330-1104"
    raw = ntsd("S-1-22-1-1000", "S-1-22-2-1000", [(ALLOW, 0, READ_DATA, domain)])
    assert decode_ntsd(raw, READ) == ((True, "?"),)
    assert decode_ntsd(raw, READ, {domain: f"user:{SYSTEM_USER}"}) == ((True, "u:1"),)
    assert not step(decode_ntsd(raw, READ)).allows(OWNER), "an unmapped allow grants no one"
    deny = ntsd("S-1-22-1-1000", "S-1-22-2-1000", [(DENY, 0, READ_DATA, domain),
                                                  (ALLOW, 0, READ_DATA, "S-1-1-0")])  # fmt: skip
    assert not any(step(decode_ntsd(deny, READ)).allows(w) for w in (OWNER, OTHER, ANON))
    object_deny = ntsd("S-1-22-1-1000", "S-1-22-2-1000", [(6, 0, READ_DATA, "S-1-1-0")])
    assert decode_ntsd(object_deny, READ) == ((False, "?"),), "a deny it cannot read denies all"
    with pytest.raises(ValueError, match="ends at offset"):
        decode_ntsd(raw[:30], READ)
    with pytest.raises(ValueError, match="ends"):
        decode_nfs4(nfs4((ALLOW, 0, READ_DATA, "EVERYONE@"))[:-6], READ)


def test_the_reader_takes_the_mounts_acls_and_classes_survive_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share whose folder and files carry NFSv4 ACLs (the NFS client's attribute, here served
    by a patched getxattr over real files): classes by ACL, kept across a registry round trip."""
    root = tmp_path / "share"
    (root / "hr").mkdir(parents=True)
    for name in ("hr/pay.txt", "hr/bands.txt", "open.txt"):
        (root / name).write_text("x")
    acls = {
        "hr": nfs4((ALLOW, GROUP_FLAG, EXECUTE, "2000")),
        "hr/pay.txt": nfs4((ALLOW, 0, READ_DATA, "EVERYONE@")),
        "hr/bands.txt": nfs4((ALLOW, 0, READ_DATA, "EVERYONE@")),
        "open.txt": nfs4((ALLOW, 0, READ_DATA, "EVERYONE@")),
    }
    real = os.getxattr

    def getxattr(path: str, name: str, *args: object) -> bytes:
        rel = os.path.relpath(path, root)
        if name == remote_acl.NFS4_XATTR and rel in acls:
            return acls[rel]
        return real(path, name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(remote_acl.os, "getxattr", getxattr)
    reader = AccessReader(root, AccessFile())
    pay, bands, public = (reader.class_of(s) for s in ("hr/pay.txt", "hr/bands.txt", "open.txt"))
    assert pay.id == bands.id != public.id, "the same chain: one class"
    assert isinstance(pay.steps[0], AceStep)
    assert pay.allows(MEMBER)
    assert not pay.allows(OTHER)
    assert not pay.allows(ANON)
    assert public.allows(ANON)
    assert pay.principals() == ["world"], "the file's entries; its folder narrows them"
    again = AccessClass.from_json(json.loads(json.dumps(pay.to_json())))
    assert again == pay


def test_the_access_file_maps_sids_and_refuses_bad_entries(tmp_path: Path) -> None:
    good = tmp_path / "access.toml"
    good.write_text(f'[sids]\n"S-1-5-21-1-2-3-1104" = "user:{SYSTEM_USER}"\n')
    assert AccessFile.load(good).sids == {"S-1-5-21-1-2-3-1104": f"user:{SYSTEM_USER}"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[sids]\n"S-1-5-21-1-2-3-1104" = "alice"\n')
    with pytest.raises(ValueError, match=re.escape('write "S-1-..." = "user:NAME"')):
        AccessFile.load(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[sids]\n"S-1-5-21-1-2-3-1104" = "user:no-such-user-here"\n')
    with pytest.raises(ValueError, match="no-such-user-here"):
        AccessFile.load(unknown)
