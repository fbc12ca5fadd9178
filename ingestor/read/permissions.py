"""Who may read a file of the share: its access class, read from the share itself.

A file's readers follow from what the kernel would check if a user opened it through the share:
search (``x``) on every folder from the watched root down, then read (``r``) on the file, each
decided by the owner, group and mode bits and, where a folder or file has one, its POSIX ACL
(``system.posix_acl_access``). Files whose chains of those facts are equal are in one **access
class**; its id (a digest of the chain) is what every point of the tree stores
(``retriever.schema.F.ACCESS``), and whether a caller may read a class is decided here, by
:meth:`AccessClass.allows`, with the kernel's own rules (acl(5)):

1. the owner gets the owner's bits (even where others get more);
2. else a named user (ACL) gets that entry's bits, masked;
3. else a member of the owning group or of a named group gets the bits of any matching entry
   that grants them (masked); matching some group entry and none that grants is a refusal;
4. else "other".

The root itself is not checked: it is the share's door, which adrap's own doors replace (a tree
kept by a service account under a private folder still serves each reader what they may read).

Where the mount carries no useful permissions (FUSE, object stores), an **access file** in the
tree's state dir (``access.toml``) maps folder prefixes to the users and groups that may read
them (:class:`AccessFile`); a prefix it lists wins over the file system for the files under it.

The ACL is read from the kernel's extended attribute and decoded here (its layout is the
kernel's stable ABI, ``include/uapi/linux/posix_acl_xattr.h``): the maintained binding,
pylibacl, ships no wheel, and building it needs libacl's headers on every machine. Where a mount
exposes an NFSv4 ACL (``system.nfs4_acl``) or an SMB/CIFS security descriptor
(``system.cifs_acl``, a ``cifsacl`` mount) instead, that decides (:mod:`ingestor.read.remote_acl`;
SIDs are mapped by Samba's Unix-account SIDs or the access file's ``[sids]`` table).
"""

from __future__ import annotations

import difflib
import errno
import logging
import os
import stat
import struct
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ingestor.read.access_classes import (
    READ,
    SEARCH,
    UNKNOWN,
    AccessClass,
    AceStep,
    AclEntry,
    Identity,
    Rule,
    Step,
)
from ingestor.read.names import fs_name, source_text
from ingestor.read.remote_acl import read_remote_acl

log = logging.getLogger(__name__)

__all__ = [
    "ACCESS_FILE",
    "AccessFile",
    "AccessReader",
    "decode_acl",
    "read_acl",
]

#: The access file's name in the tree's state dir.
ACCESS_FILE: Final = "access.toml"

# posix_acl_xattr.h
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_NO_ID = 0xFFFFFFFF


def read_acl(path: str | int, *, dir_fd: int | None = None) -> tuple[AclEntry, ...]:
    """Return the POSIX ACL entries of ``path`` (empty: none beyond the mode bits).

    Raises:
        OSError: the attribute could not be read (other than "none there" / "not supported").
    """
    try:
        if dir_fd is not None and isinstance(path, str):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            try:
                raw = os.getxattr(fd, _ACL_XATTR)
            finally:
                os.close(fd)
        else:
            raw = os.getxattr(path, _ACL_XATTR)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return ()
        raise
    return decode_acl(raw)


def decode_acl(raw: bytes) -> tuple[AclEntry, ...]:
    """Decode ``system.posix_acl_access`` (version 2: 4-byte header, 8-byte entries).

    Raises:
        ValueError: not a version-2 POSIX ACL.
    """
    if len(raw) < 4 or (len(raw) - 4) % 8:
        raise ValueError(f"POSIX ACL of {len(raw)} bytes is not 4 + 8n")
    (version,) = struct.unpack_from("<I", raw)
    if version != _ACL_VERSION:
        raise ValueError(f"POSIX ACL version {version} (this reads version {_ACL_VERSION})")
    out = []
    for off in range(4, len(raw), 8):
        tag, perm, ident = struct.unpack_from("<HHI", raw, off)
        out.append((tag, -1 if ident == _NO_ID else ident, perm & 7))
    return tuple(sorted(out))


@dataclass
class AccessFile:
    """Folder prefixes mapped to who may read them, for mounts without useful permissions.

    ``access.toml`` in the tree's state dir::

        [[folder]]
        prefix = "hr/"            # every file under the folder hr/ (the longest prefix wins)
        users = ["alice"]         # names or uids
        groups = ["hr"]           # names or gids
        # anyone = true           # readable by every caller, anonymous included

        [sids]                    # SMB/CIFS: the SIDs a share's security descriptors name
        "S-1-5-21-1004336348-1177238915-682003330-1104" = "user:alice"
        "S-1-5-21-1004336348-1177238915-682003330-1110" = "group:hr"
    """

    rules: list[Rule] = field(default_factory=list)
    #: SIDs mapped to ``user:NAME`` / ``group:NAME`` (names or ids), for security descriptors.
    sids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> AccessFile:
        """Read ``path`` (none there: no rules).

        Every key is checked: a misspelt one (``[[folders]]``, ``group =``) or a value of the
        wrong kind (``anyone = "false"``, a string, is not the boolean ``false``) would otherwise
        leave its files to the file system's permissions, which on the mounts this file is for
        let everyone read.

        Raises:
            ValueError: a malformed file, an unknown key, a value of the wrong kind, a prefix
                listed twice or an unknown user or group, with where and the fix.
        """
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(
                f"cannot read the access file {path}: {exc}; fix it (docs/security.md, the access "
                "file) or remove it to let the file system's permissions decide"
            ) from exc
        _known_keys(path, "the file", data, ("folder", "sids"))
        folders = data.get("folder", [])
        if not isinstance(folders, list) or not all(isinstance(e, dict) for e in folders):
            raise ValueError(
                f'{path}: write each folder as a [[folder]] table with its prefix = "..."'
            )
        rules: dict[str, Rule] = {}
        for i, entry in enumerate(folders):
            rule = _rule(path, f"[[folder]] #{i + 1}", entry)
            if rule.prefix in rules:
                raise ValueError(
                    f"{path}: [[folder]] #{i + 1}: the prefix {rule.prefix!r} is listed twice; "
                    "merge its users and groups into one [[folder]]"
                )
            rules[rule.prefix] = rule
        table = data.get("sids", {})
        if not isinstance(table, dict):
            raise ValueError(f'{path}: write [sids] as a table of "S-1-..." = "user:NAME" lines')
        sids: dict[str, str] = {}
        for sid, who in table.items():
            kind, _, name = str(who).partition(":")
            if not str(sid).startswith("S-1-") or kind not in ("user", "group") or not name:
                raise ValueError(
                    f'{path}: [sids] {sid!r} = {who!r}: write "S-1-..." = "user:NAME" or "group:NAME"'
                )
            try:
                (Identity.of_user if kind == "user" else Identity.of_group)(name)
            except KeyError as exc:
                raise ValueError(f"{path}: [sids] {sid!r}: {exc.args[0]}") from None
            sids[str(sid)] = f"{kind}:{name}"
        return cls(sorted(rules.values(), key=lambda r: -len(r.prefix)), sids)

    def rule_for(self, source: str) -> Rule | None:
        """Return the rule of the longest prefix ``source`` lies under, or None. A prefix is a
        path of whole names (kept with a trailing ``/``): a folder and what lies under it, or
        one file, never every name that starts the same way."""
        path = f"{source}/"
        return next((r for r in self.rules if path.startswith(r.prefix)), None)


def _known_keys(path: Path, where: str, table: dict[str, object], known: tuple[str, ...]) -> None:
    """Refuse a key of ``table`` that is not ``known``, naming the closest known one."""
    for key in table:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"{path}: {where}: unknown key {key!r}; {hint}the keys are "
                f"{', '.join(known)} (a misspelt key would leave its files to the file system)"
            )


def _rule(path: Path, where: str, entry: dict[str, object]) -> Rule:
    """One ``[[folder]]`` table as a :class:`Rule`, every value checked."""
    _known_keys(path, where, entry, ("prefix", "users", "groups", "anyone"))
    raw = entry.get("prefix")
    # a path of whole names: "hr" and "hr/" are the folder hr/, never "hr-archive/"
    prefix = raw.strip().strip("/") if isinstance(raw, str) else ""
    if not prefix:
        raise ValueError(
            f'{path}: {where} needs a prefix, a folder or file under the root (e.g. "hr/")'
        )
    where = f"[[folder]] {prefix + '/'!r}"
    anyone = entry.get("anyone", False)
    if not isinstance(anyone, bool):
        raise ValueError(
            f"{path}: {where}: anyone = {anyone!r}: write anyone = true or anyone = false "
            "(a TOML boolean, without quotes)"
        )
    try:
        uids = frozenset(Identity.of_user(n).uid or 0 for n in _names(path, where, entry, "users"))
        gids = frozenset(
            g for n in _names(path, where, entry, "groups") for g in Identity.of_group(n).gids
        )
    except KeyError as exc:
        raise ValueError(f"{path}: {where}: {exc.args[0]}") from None
    return Rule(f"{prefix}/", uids, gids, anyone)


def _names(path: Path, where: str, entry: dict[str, object], key: str) -> list[str]:
    """The names or ids listed under ``key`` (a list of strings or whole numbers)."""
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(
            f'{path}: {where}: {key} = {value!r}: write a list of names or ids, e.g. {key} = ["hr"]'
        )
    return [str(v) for v in value]


class AccessReader:
    """Reads access classes under one root; remembers every class it has seen (the registry).

    Folders' steps are cached for one pass (:meth:`forget` between passes), so a folder of many
    files costs one ``lstat`` and one ACL read.
    """

    def __init__(self, root: Path, access_file: AccessFile | None = None) -> None:
        self.root = root
        self.access_file = access_file or AccessFile()
        self._dirs: dict[str, Step | AceStep | _Link | None] = {}
        #: Devices whose files gave neither an NFSv4 ACL nor a security descriptor (a local file
        #: system): not asked again in this reader's life.
        self._local: set[int] = set()
        self._classes: dict[
            tuple[Step | AceStep | Rule, ...], AccessClass
        ] = {}  # steps -> class, kept

    def forget(self) -> None:
        """Drop the cached folders (a pass starts: their permissions may have changed)."""
        self._dirs.clear()

    def class_of(self, source: str) -> AccessClass:
        """Return the access class of ``source`` (a path relative to the root, ``/``-separated);
        :data:`UNKNOWN` where any step's permissions cannot be read now."""
        rule = self.access_file.rule_for(source)
        if rule is not None:
            if self._is_link(source):
                return self._linked(source, rule)
            return self._class([rule])
        parts = source.split("/")
        steps: list[Step | AceStep | Rule] = []
        for i in range(1, len(parts)):
            step = self._folder("/".join(parts[:i]))
            if isinstance(step, _Link):
                return self._linked(source)
            if step is None:
                return UNKNOWN
            steps.append(step)
        last = self._step(source, READ)
        if isinstance(last, _Link):
            return self._linked(source)
        if last is None:
            return UNKNOWN
        steps.append(last)
        return self._class(steps)

    def _class(self, steps: list[Step | AceStep | Rule]) -> AccessClass:
        key = tuple(steps)
        found = self._classes.get(key)
        if found is None:
            found = self._classes[key] = AccessClass.of(key)
        return found

    def _folder(self, rel: str) -> Step | AceStep | _Link | None:
        step = self._dirs.get(rel, ...)
        if step is ...:
            step = self._dirs[rel] = self._step(rel, SEARCH)
        return step

    def _is_link(self, source: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(os.path.join(self.root, fs_name(source))).st_mode)
        except OSError:
            return False

    def _linked(self, source: str, rule: Rule | None = None) -> AccessClass:
        """The class of a ``source`` reached through a symbolic link: search on every folder the
        kernel's walk looks a name up in (the link's folders, then its target's, through every
        link on the way), then read on the file it ends at; a folder or file of the walk under a
        prefix of the access file is judged by its rule instead, and ``rule`` (the link's own
        prefix's) must let the reader in too. A walk that leaves the root, loops or cannot be
        read now is :data:`UNKNOWN` (the owner's only)."""
        walk = _kernel_walk(os.fspath(self.root), fs_name(source))
        if walk is None:
            return UNKNOWN
        *folders, file = (source_text(rel) for rel in walk)
        steps: list[Step | AceStep | Rule] = [] if rule is None else [rule]
        for rel, need in [*((d, SEARCH) for d in folders), (file, READ)]:
            step: Step | AceStep | Rule | _Link | None = self.access_file.rule_for(rel)
            if step is None:
                step = self._folder(rel) if need == SEARCH else self._step(rel, READ)
            if step is None or isinstance(step, _Link):  # a link where the walk found none
                log.debug("the path of %s changed while its permissions were read", source)
                return UNKNOWN
            if step not in steps:
                steps.append(step)
        return self._class(steps)

    def _step(self, rel: str, need: int) -> Step | AceStep | _Link | None:
        path = os.path.join(self.root, fs_name(rel))  # a source escapes undecodable bytes
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):  # what a reader meets is on the walk to its target
                return _LINK
            acl = read_acl(path)
        except (OSError, ValueError) as exc:
            log.debug("cannot read the permissions of %s: %s", path, exc)
            return None
        if not acl and st.st_dev not in self._local:
            try:
                aces = read_remote_acl(path, need, self.access_file.sids)
            except (OSError, ValueError) as exc:
                log.debug("cannot read the ACL of %s: %s", path, exc)
                return None
            if aces is not None:
                return AceStep(st.st_uid, st.st_gid, need, aces)
            self._local.add(st.st_dev)  # no NFSv4 ACL or descriptor there: mode bits decide
        return Step(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode) & 0o777, need, acl)


class _Link:
    """A path component that is a symbolic link (its permissions are its target's walk's)."""


_LINK: Final = _Link()
#: Links followed in one walk before it counts as a loop (Linux's own limit, ``ELOOP``).
MAX_LINKS = 40


def _kernel_walk(root: str, rel: str) -> list[str] | None:
    """Walk ``rel`` (file-system names, relative to ``root``) as the kernel resolves a path:
    return the folders a name is looked up in (relative, without the root itself, which is not
    checked), then the file the walk ends at; a lookup needs search on its folder, whether the
    name is a link or ``..``. None: the walk leaves the root, follows more than
    :data:`MAX_LINKS` links, or a component cannot be read now."""
    todo = rel.split("/")
    cur: list[str] = []  # the folder the walk is in, as real components (never a link's name)
    searched: dict[str, None] = {}
    links = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if cur:
            searched["/".join(cur)] = None
        if name == "..":
            if not cur:
                return None
            cur.pop()
            continue
        path = os.path.join(root, *cur, name)
        try:
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                cur.append(name)
                continue
            target = os.readlink(path)
        except OSError:
            return None
        links += 1
        if links > MAX_LINKS:
            return None
        if os.path.isabs(target):
            inside = _under_root(target, root)
            if inside is None:
                return None
            cur = []
            target = inside
        todo[:0] = target.split("/")
    if not cur:
        return None
    return [*searched, "/".join(cur)]


def _under_root(target: str, root: str) -> str | None:
    """Return absolute ``target`` relative to ``root`` (as given, or resolved), or None if it
    does not start there."""
    for base in dict.fromkeys((os.path.normpath(root), os.path.realpath(root))):
        if target == base:
            return ""
        if target.startswith(base.rstrip("/") + "/"):
            return target[len(base.rstrip("/")) + 1 :]
    return None
