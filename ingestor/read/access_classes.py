"""Access classes and who asks: the model every door judges a caller by.

An access class is a chain of permission checks (:class:`Step`: search on each folder below the
root, read on the file; or one access-file :class:`Rule`), its id a digest of the chain.
:meth:`AccessClass.allows` decides whether an :class:`Identity` may read its files with the
kernel's rules (acl(5)), documented in :mod:`ingestor.read.permissions`, which reads the chains
from the share. :class:`ClassRegistry` keeps every class the tree's points name.
"""

from __future__ import annotations

import grp
import hashlib
import itertools
import json
import os
import pwd
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "ANONYMOUS",
    "CLASSES_FILE",
    "READ",
    "SEARCH",
    "UNKNOWN",
    "UNKNOWN_CLASS",
    "UNRESTRICTED",
    "AccessClass",
    "AceStep",
    "AclEntry",
    "ClassRegistry",
    "Identity",
    "Rule",
    "Step",
    "class_view",
]

#: The class of a file whose permissions could not be read: readable by nobody (but the tree's
#: owner) until they can be read.
UNKNOWN_CLASS: Final = "unknown"

#: What a step asks for: read (the file), search (each folder on the way).
READ, SEARCH = 4, 1
# posix_acl_xattr.h tags
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


@dataclass(frozen=True, slots=True)
class Identity:
    """Who asks: a user (uid and every group it is in), a group alone, or nobody in particular.

    ``unrestricted``: the tree's owner (the daemon's own account, root, the owner's token), who
    may read every file the daemon reads.
    """

    name: str
    uid: int | None = None
    gids: frozenset[int] = frozenset()
    unrestricted: bool = False

    @classmethod
    def of_uid(cls, uid: int, gid: int | None = None) -> Identity:
        """The user ``uid`` with every group the system says it is in (``getgrouplist``).

        A uid unknown to the system (no passwd entry) keeps only ``gid``, the group the kernel
        gave the caller (``SO_PEERCRED``).
        """
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:
            return cls(f"uid {uid}", uid, frozenset(() if gid is None else (gid,)))
        groups = set(os.getgrouplist(pw.pw_name, pw.pw_gid))
        if gid is not None:
            groups.add(gid)
        return cls(pw.pw_name, uid, frozenset(groups), unrestricted=uid == 0)

    @classmethod
    def of_peer(cls, uid: int, gid: int, groups: frozenset[int] | None) -> Identity:
        """The process at the other end of the daemon's socket: user ``uid`` with effective
        group ``gid`` and the supplementary ``groups`` it holds (None: the kernel cannot say).

        It reads through adrap what it could open itself: the groups it holds, as the file
        system checks them (a user added to a group gets it at their next login, as with files;
        a service that dropped its groups is not given them back). Where the kernel cannot say,
        the system's user database decides (:meth:`of_uid`)."""
        if groups is None:
            return cls.of_uid(uid, gid)
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"uid {uid}"
        return cls(name, uid, frozenset(groups | {gid}), unrestricted=uid == 0)

    @classmethod
    def of_user(cls, name: str) -> Identity:
        """The user called ``name`` (or a numeric uid).

        Raises:
            KeyError: no such user; the message says where names come from.
        """
        try:
            pw = pwd.getpwnam(name) if not name.isdigit() else pwd.getpwuid(int(name))
        except KeyError:
            raise KeyError(
                f"no user {name!r} on this machine (names come from the system's user database, "
                "getent passwd); give a known user name or uid"
            ) from None
        return cls.of_uid(pw.pw_uid)

    @classmethod
    def of_group(cls, name: str) -> Identity:
        """A member of group ``name`` (or a numeric gid) and of no other group.

        Raises:
            KeyError: no such group.
        """
        try:
            gr = grp.getgrnam(name) if not name.isdigit() else grp.getgrgid(int(name))
        except KeyError:
            raise KeyError(
                f"no group {name!r} on this machine (getent group); give a known group or gid"
            ) from None
        return cls(f"group {gr.gr_name}", None, frozenset({gr.gr_gid}))

    def to_json(self) -> dict[str, object]:
        """Return who this is, for ``/status`` and ``adrap status``."""
        return {
            "name": self.name,
            "uid": self.uid,
            "gids": sorted(self.gids),
            "unrestricted": self.unrestricted,
        }


#: A caller with no principal: may read what any user of the machine may read.
ANONYMOUS: Final = Identity("anonymous")
#: The tree's owner.
UNRESTRICTED: Final = Identity("owner", unrestricted=True)


AclEntry = tuple[int, int, int]  # (tag, id, perm)


@dataclass(frozen=True, slots=True)
class Step:
    """One folder (search) or the file (read) on the way: what the kernel checks there."""

    uid: int
    gid: int
    mode: int  # permission bits (0o777)
    need: int  # 1: search (x), 4: read (r)
    acl: tuple[AclEntry, ...] = ()

    def allows(self, who: Identity) -> bool:
        """Whether ``who`` gets ``need`` here (acl(5)'s access check algorithm, as the kernel
        runs it: where the mode's group bits, the ACL's mask, are all clear, the kernel skips
        the ACL and the mode bits decide, so a named user then gets what "other" gets; Linux
        ``acl_permission_check``)."""
        need = self.need
        if who.uid is not None and who.uid == self.uid:
            return bool((self.mode >> 6) & need)
        if not self.acl or not self.mode & 0o070:
            if self.gid in who.gids:
                return bool((self.mode >> 3) & need)
            return bool(self.mode & need)
        mask = next((p for t, _, p in self.acl if t == _MASK), 7)
        if who.uid is not None:
            for tag, uid, perm in self.acl:
                if tag == _USER and uid == who.uid:
                    return bool(perm & mask & need)
        matched = False
        for tag, gid, perm in self.acl:
            if (tag == _GROUP_OBJ and self.gid in who.gids) or (tag == _GROUP and gid in who.gids):
                matched = True
                if perm & mask & need:
                    return True
        if matched:
            return False
        return any(tag == _OTHER and perm & need for tag, _, perm in self.acl)

    def key(self) -> list[object]:
        return [self.uid, self.gid, self.mode, self.need, [list(e) for e in self.acl]]


@dataclass(frozen=True, slots=True)
class AceStep:
    """A folder (search) or the file (read) whose NFSv4 ACL or SMB/CIFS security descriptor
    decides (:mod:`ingestor.read.remote_acl`): its entries concerning ``need``, in order, each
    ``(allow, who)``; the first naming the caller decides, none refuses (RFC 7530 §6.2.1)."""

    uid: int
    gid: int
    need: int
    aces: tuple[tuple[bool, str], ...]

    def allows(self, who: Identity) -> bool:
        for allow, principal in self.aces:
            if principal == "?":  # unknown: grants no one, denies everyone
                if not allow:
                    return False
                continue
            if _names(principal, self.uid, self.gid, who):
                return allow
        return False

    def key(self) -> list[object]:
        return ["aces", self.uid, self.gid, self.need, [[a, w] for a, w in self.aces]]


def _names(principal: str, uid: int, gid: int, who: Identity) -> bool:
    """Whether an entry's ``principal`` names ``who`` (``uid``/``gid``: the file's owners)."""
    if principal == "EVERYONE@":
        return True
    if principal == "AUTH@":
        return who.uid is not None or bool(who.gids)
    if principal == "OWNER@":
        return who.uid == uid
    if principal == "GROUP@":
        return gid in who.gids
    kind, _, ident = principal.partition(":")
    if kind == "u":
        return who.uid == int(ident)
    return kind == "g" and int(ident) in who.gids


@dataclass(frozen=True, slots=True)
class Rule:
    """A folder prefix of the access file: its users and groups (and whether anyone may read)."""

    prefix: str
    uids: frozenset[int] = frozenset()
    gids: frozenset[int] = frozenset()
    anyone: bool = False

    def allows(self, who: Identity) -> bool:
        return (
            self.anyone
            or (who.uid is not None and who.uid in self.uids)
            or bool(self.gids & who.gids)
        )

    def key(self) -> list[object]:
        return ["rule", self.prefix, sorted(self.uids), sorted(self.gids), self.anyone]


@dataclass(frozen=True)
class AccessClass:
    """The files whose chains of permission checks are the same: who may read one may read all.

    ``steps``: the folders below the root, then the file; or one access-file :class:`Rule`.
    """

    id: str
    steps: tuple[Step | AceStep | Rule, ...] = ()

    @classmethod
    def of(cls, steps: Iterable[Step | AceStep | Rule]) -> AccessClass:
        """The class of a chain of checks; its id is the same for every chain that lets the
        same callers through (:func:`decision_key`), so a share of many owners, folders and
        modes has as many classes as it has audiences."""
        steps = tuple(steps)
        key = decision_key(steps)
        if key is None:  # too many groups to tabulate: the chain itself
            key = [s.key() for s in steps]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        return cls("a" + digest[:20], steps)

    def allows(self, who: Identity) -> bool:
        """Whether ``who`` may read the files of this class."""
        if who.unrestricted:
            return True
        if self.id == UNKNOWN_CLASS:
            return False
        return all(s.allows(who) for s in self.steps)

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "steps": [s.key() for s in self.steps]}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> AccessClass:
        steps: list[Step | AceStep | Rule] = []
        for k in data.get("steps", []):  # type: ignore[attr-defined]
            if k and k[0] == "rule":
                steps.append(Rule(k[1], frozenset(k[2]), frozenset(k[3]), bool(k[4])))
            elif k and k[0] == "aces":
                steps.append(AceStep(k[1], k[2], k[3], tuple((bool(a), str(w)) for a, w in k[4])))
            else:
                uid, gid, mode, need, acl = k
                steps.append(Step(uid, gid, mode, need, tuple(tuple(e) for e in acl)))
        return cls(str(data["id"]), tuple(steps))

    def principals(self) -> list[str]:
        """Return a short description of who may read: ``world``, ``user:NAME``, ``group:NAME``
        (the last step's; the folders above narrow it further)."""
        if self.id == UNKNOWN_CLASS:
            return []
        last = self.steps[-1] if self.steps else None
        if last is None:
            return ["world"]
        if isinstance(last, Rule):
            out = ["world"] if last.anyone else []
            return (
                out
                + [f"user:{_user(u)}" for u in sorted(last.uids)]
                + [f"group:{_group(g)}" for g in sorted(last.gids)]
            )
        if all(s.allows(ANONYMOUS) for s in self.steps):
            return ["world"]
        if isinstance(last, AceStep):
            return [_principal(w, last) for a, w in last.aces if a and w != "?"]
        out = [f"user:{_user(last.uid)}"]
        if (last.mode >> 3) & last.need:
            out.append(f"group:{_group(last.gid)}")
        for tag, ident, perm in last.acl:
            if tag == _USER and perm & last.need:
                out.append(f"user:{_user(ident)}")
            elif tag == _GROUP and perm & last.need:
                out.append(f"group:{_group(ident)}")
        return out


UNKNOWN: Final = AccessClass(UNKNOWN_CLASS)

#: Retired classes kept for the change log's records (:class:`ClassRegistry`), the newest.
MAX_RETIRED: Final = 10_000

#: A chain naming more groups than this keeps its own digest as its class (its decision table
#: would have 2^(groups + 1) rows per user).
TABLE_MAX_GROUPS: Final = 8
#: A uid or gid no step names (ids are >= 0): every id a chain does not name acts as this one.
_ANY_OTHER: Final = -1


def _named(steps: tuple[Step | AceStep | Rule, ...]) -> tuple[set[int], set[int]]:
    """The uids and gids the checks of ``steps`` compare a caller with (a step's group where its
    mode gives the group what it gives everyone, and no ACL is read, is left out: it changes
    nothing there)."""
    uids: set[int] = set()
    gids: set[int] = set()
    for s in steps:
        if isinstance(s, Rule):
            uids |= s.uids
            gids |= s.gids
            continue
        uids.add(s.uid)
        if isinstance(s, Step):
            plain = not s.acl or not s.mode & 0o070  # the mode bits decide (Step.allows)
            if not plain or bool((s.mode >> 3) & s.need) != bool(s.mode & s.need):
                gids.add(s.gid)
            uids.update(i for tag, i, _ in s.acl if tag == _USER)
            gids.update(i for tag, i, _ in s.acl if tag == _GROUP)
            continue
        gids.add(s.gid)
        for _, principal in s.aces:
            kind, _, ident = principal.partition(":")
            if kind in ("u", "g") and ident.isdigit():  # ids are >= 0: never _ANY_OTHER
                (uids if kind == "u" else gids).add(int(ident))
    return uids, gids


def decision_key(steps: tuple[Step | AceStep | Rule, ...]) -> list[object] | None:
    """Who ``steps`` let through, as a canonical table: equal for two chains exactly when every
    caller gets the same answer from both (None: too many groups named to tabulate).

    A caller is its uid (None, one the chain names, or any other) and its groups (a subset of
    those named, plus "some other group"): the chain answers every combination. A named id that
    acts as an unnamed one everywhere (an owner whose bits equal "other", a folder's group on a
    mode-755 folder) is dropped, so the table does not depend on ids that change nothing. A
    caller maps onto the table by its kept uid (else "other"), its kept groups, and whether it
    has any group not kept; mapped so, both chains answer it from the same row.
    """
    uids, gids = _named(steps)
    if len(gids) > TABLE_MAX_GROUPS:
        return None
    pool = (_ANY_OTHER, *sorted(gids))
    subsets = [frozenset(c) for r in range(len(pool) + 1) for c in itertools.combinations(pool, r)]
    people: tuple[int | None, ...] = (None, _ANY_OTHER, *sorted(uids))
    answer = {
        (u, g): all(s.allows(Identity("", u, g)) for s in steps) for u in people for g in subsets
    }
    kept_u = [
        u for u in sorted(uids) if any(answer[u, g] != answer[_ANY_OTHER, g] for g in subsets)
    ]
    kept_g = [  # dropped: a group that acts as an unnamed one, whatever else the caller is in
        x
        for x in sorted(gids)
        if any(
            answer[u, g | {x}] != answer[u, g | {_ANY_OTHER}]
            for u in people
            for g in subsets
            if x not in g
        )
    ]
    rows = [
        [u, sorted(g)]
        for u in (None, _ANY_OTHER, *kept_u)
        for g in subsets
        if g <= {_ANY_OTHER, *kept_g} and answer[u, g]
    ]
    return ["table", kept_u, kept_g, rows]


def _principal(who: str, step: AceStep) -> str:
    if who in ("EVERYONE@", "AUTH@"):
        return "world" if who == "EVERYONE@" else "any known user"
    if who in ("OWNER@", "GROUP@"):
        return f"user:{_user(step.uid)}" if who == "OWNER@" else f"group:{_group(step.gid)}"
    kind, _, ident = who.partition(":")
    return f"user:{_user(int(ident))}" if kind == "u" else f"group:{_group(int(ident))}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


#: The registry's file in the tree's state dir.
CLASSES_FILE: Final = "access-classes.json"


class ClassRegistry:
    """Every access class the tree's points name, kept in the state dir; thread-safe.

    The writer adds (:meth:`add`) a file's class before any point naming it is stored, so a reader
    never meets a class it cannot judge; one it does not know (a file written by a crashed
    writer, a store written elsewhere) is refused to every restricted caller.

    A class no point names any more is *retired* (:meth:`retain`): left out of every reader's
    filter, but kept (the :data:`MAX_RETIRED` retired last) so that the change log's records of
    its files stay readable by those who could read them (``readable(who, history=True)``): the
    last file of ``hr/`` removed or moved away is still told to HR.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._classes: dict[str, AccessClass] = {}
        self._retired: dict[str, AccessClass] = {}  # oldest first
        self._readable: dict[tuple[Identity, bool], tuple[str, ...]] = {}
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                data = []
            except (OSError, ValueError) as exc:
                raise ValueError(
                    f"cannot read the access classes {path}: {exc}; remove it and restart the "
                    "daemon (the next pass reads every file's permissions again)"
                ) from exc
            for item in data:
                cls = AccessClass.from_json(item)
                (self._retired if item.get("retired") else self._classes)[cls.id] = cls

    def __len__(self) -> int:
        return len(self._classes)

    def ids(self) -> frozenset[str]:
        """The ids of the classes known now."""
        return frozenset(self._classes)

    def get(self, class_id: str) -> AccessClass | None:
        return self._classes.get(class_id)

    def add(self, cls: AccessClass) -> None:
        """Remember ``cls`` (written to the state dir at once when new)."""
        if cls.id in self._classes or cls.id == UNKNOWN_CLASS:
            return
        with self._lock:
            classes = {**self._classes, cls.id: cls}
            retired = {i: c for i, c in self._retired.items() if i != cls.id}
            self._write(classes, retired)
            self._classes, self._retired = classes, retired
            self._readable = {}

    def retain(self, named: set[str], known: frozenset[str]) -> int:
        """Forget the classes of ``known`` (those known when a full reading began) that no point
        names any more (``named``); a class added since is kept (a batch read it meanwhile).
        Return how many were forgotten. A tree kept for years sees its files' permissions
        change again and again: every class ever read stayed, and every reader's filter listed
        the stale ones too. A point naming a class forgotten here (a store behind its state
        after a crash) is refused to every restricted caller until the state is stored again."""
        with self._lock:
            classes = {i: c for i, c in self._classes.items() if i in named or i not in known}
            gone = len(self._classes) - len(classes)
            if gone:
                retired = self._retired | {
                    i: c for i, c in self._classes.items() if i not in classes
                }
                retired = dict(list(retired.items())[-MAX_RETIRED:])
                self._write(classes, retired)
                self._classes, self._retired = classes, retired
                self._readable = {}
        return gone

    def _write(self, classes: dict[str, AccessClass], retired: dict[str, AccessClass]) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            rows = [c.to_json() for c in classes.values()]
            rows += [c.to_json() | {"retired": True} for c in retired.values()]
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, self.path)

    def readable(self, who: Identity, *, history: bool = False) -> tuple[str, ...] | None:
        """Return the classes ``who`` may read (None: every one, ``who`` is unrestricted); with
        ``history``, the retired ones too (the change log's records name them; no point does)."""
        if who.unrestricted:
            return None
        cached = self._readable.get((who, history))
        if cached is not None:
            return cached
        classes, retired = self._classes, self._retired
        pool = [*classes.values(), *retired.values()] if history else classes.values()
        out = tuple(sorted(c.id for c in pool if c.allows(who)))
        if classes is self._classes and retired is self._retired:
            self._readable[(who, history)] = out
        return out


def class_view(
    files: Mapping[str, int], classes: ClassRegistry, caller: Identity
) -> dict[str, object]:
    """The access classes as ``/status`` and ``adrap status`` show them: how many the files are
    in (``files``: files per class; the registry keeps classes no file is in any more) and how
    many ``caller`` may read; to the owner, the files and readers of each (the 100 largest) and
    how many files have permissions that could not be read."""
    readable = classes.readable(caller)
    in_use = {cid for cid, n in files.items() if n and cid != UNKNOWN_CLASS}
    out: dict[str, object] = {
        "classes": len(in_use),
        "readable_by_caller": "all" if readable is None else len(in_use.intersection(readable)),
    }
    if caller.unrestricted:
        out["by_class"] = [
            {"id": cid, "files": n, "readers": c.principals() if c else []}
            for cid, n in sorted(files.items(), key=lambda kv: -kv[1])[:100]
            for c in [classes.get(cid)]
        ]
        out["unknown_permissions"] = files.get(UNKNOWN_CLASS, 0)
    return out
