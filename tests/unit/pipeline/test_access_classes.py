"""Who may read what: access classes on every point, summaries included, and permission changes
applied without reading, embedding or summarising anything (issue 53)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ingestor.answer.changes import ChangeFeed
from ingestor.answer.service import QueryService
from ingestor.pipeline import UpdateReport
from ingestor.read import permissions
from ingestor.read.access_classes import ANONYMOUS, UNKNOWN_CLASS, UNRESTRICTED, Identity
from ingestor.tree.invariants import violations
from ingestor.tree.persist import state_path
from models_store import RowStore
from retriever import SearchFilter
from testkit.corpus import make_pipeline as corpus_pipeline
from testkit.fakes import QuotingSummarizer
from tests.unit.service.test_watcher import CountingEmbedder, make_pipeline, write_corpus

SECRET = "zanzibarquokka"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to other users needs root")
ALICE = Identity("alice", 51001, frozenset({51001}))
HR = Identity("hr member", 51002, frozenset({51002, 52000}))


def _secret_doc(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"The salary review of {SECRET} is confidential. Pay bands rise by seven percent. "
        f"Only {SECRET} and the board know the bonus pool.\n"
    )


def _texts(p, who: Identity) -> list[str]:  # type: ignore[no-untyped-def]
    service = QueryService(
        p.context.store, p.context.embedder, "t", classes=p.context.access.registry
    )
    flt = service.reader_filter(SearchFilter(tree="t"), who)
    nodes, _ = p.context.store.scroll(flt, 10_000)
    return [n.text for n in nodes]


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    write_corpus(root, 12)
    _secret_doc(root / "hr" / "pay.txt")
    os.chown(root / "hr", 51001, 52000)
    os.chmod(root / "hr", 0o750)  # alice and group hr may pass, nobody else
    os.chown(root / "hr" / "pay.txt", 51001, 52000)
    os.chmod(root / "hr" / "pay.txt", 0o644)  # its own mode says "everyone": the folder decides
    return root


@root_only
def test_a_file_under_a_folder_others_cannot_traverse_reaches_none_of_them(
    share: Path, tmp_path: Path
) -> None:
    p = make_pipeline(tmp_path)
    p.build(share)
    state = p.require_state()
    assert violations(state) == []
    owner, anonymous = _texts(p, UNRESTRICTED), _texts(p, ANONYMOUS)
    assert any(SECRET in t for t in owner)
    assert not any(SECRET in t for t in anonymous), "a leaf or a summary leaked the secret"
    assert any(SECRET in t for t in _texts(p, ALICE)), "the owner of the folder reads it"
    assert any(SECRET in t for t in _texts(p, HR)), "a member of the folder's group reads it"
    # Summaries over the secret and public files are the readers-of-both's alone.
    blended = [n for n in state.nodes.values() if n.layer > 0 and len(n.access) > 1]
    assert blended, "the fixture should blend the secret into a summary with public files"
    p.context.store.close()


@root_only
def test_a_chmod_changes_who_reads_without_embedding_again(share: Path, tmp_path: Path) -> None:
    p = make_pipeline(tmp_path)
    p.build(share)
    embedder = p.context.embedder
    assert isinstance(embedder, CountingEmbedder)
    before = len(embedder.texts)
    os.chmod(share / "hr", 0o755)
    report = p.update_access(p.require_state())
    assert report.files_reclassed == 1
    assert len(embedder.texts) == before, "a permission change embedded text again"
    assert violations(p.require_state()) == []
    assert any(SECRET in t for t in _texts(p, ANONYMOUS))
    os.chmod(share / "hr" / "pay.txt", 0o600)  # back to its owner alone
    assert p.update_access(p.require_state()).files_reclassed == 1
    assert not any(SECRET in t for t in _texts(p, ANONYMOUS))
    assert not any(SECRET in t for t in _texts(p, HR))
    assert any(SECRET in t for t in _texts(p, ALICE))
    # Nothing changed: nothing rewritten.
    assert p.update_access(p.require_state()).files_reclassed == 0
    p.context.store.close()


def test_a_chmod_that_changes_no_reader_rewrites_nothing(tmp_path: Path) -> None:
    """A class is its audience: a group's write bit, or a file of another mode that the same
    callers may read, is not a new class (every point of the file was rewritten, and a share of
    many owners and modes had a class per combination)."""
    root = tmp_path / "docs"
    write_corpus(root, 10)
    os.chmod(root / "d1.txt", 0o444)
    p = make_pipeline(tmp_path / "t")
    p.build(root)
    classes = {n.access for n in p.require_state().nodes.values() if n.layer == 0}
    assert len(classes) == 1, classes  # 0o644 and 0o444 files: the same readers
    os.chmod(root / "d0.txt", 0o664)
    os.chmod(root, 0o775)
    assert p.update_access(p.require_state()).files_reclassed == 0
    os.chmod(root / "d0.txt", 0o660)  # others lose it: a new class
    assert p.update_access(p.require_state()).files_reclassed == 1
    p.context.store.close()


def test_a_single_owner_folder_builds_the_tree_it_always_built(tmp_path: Path) -> None:
    """Access classes never steer the clustering: one class, the same nodes."""
    root = tmp_path / "docs"
    write_corpus(root, 10)
    a = make_pipeline(tmp_path / "a")
    a.build(root)
    os.chmod(root / "d0.txt", 0o600)  # another class: the same tree, other payloads
    b = make_pipeline(tmp_path / "b")
    b.build(root)
    assert set(a.require_state().nodes.keys()) == set(b.require_state().nodes.keys())
    a.context.store.close()
    b.context.store.close()


def test_a_name_that_is_not_utf8_gets_its_file_s_class_not_unknown(tmp_path: Path) -> None:
    """Sources escape undecodable bytes (``caf\\xe9.txt``); the permissions are read from the
    file the escape names, not from a path that does not exist (which would be "unknown")."""
    root = tmp_path / "docs"
    write_corpus(root, 4)
    raw = os.fsencode(root) + b"/caf\xe9.txt"
    with open(raw, "wb") as f:
        f.write(b"Notes about the canal, the lock keeper and the barges.\n")
    os.chmod(raw, 0o600)
    p = make_pipeline(tmp_path)
    p.build(root)
    entry = p.require_state().sources["caf\\xe9.txt"]
    assert entry.access not in ("", "unknown")
    cls = p.context.access.registry.get(entry.access)
    assert cls is not None
    assert not cls.allows(ANONYMOUS)
    p.context.store.close()


@root_only
def test_files_not_there_keep_their_readers_and_files_still_there_but_unreadable_lose_them(
    share: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share that went away (or a mountpoint left empty) is not a permission change: the
    public files stay readable to everyone until the share answers again. A file that is there
    but whose permissions cannot be read is still readable by nobody (but the owner)."""
    p = make_pipeline(tmp_path)
    p.build(share)
    anonymous = _texts(p, ANONYMOUS)
    assert anonymous
    assert not any(SECRET in t for t in anonymous)
    away = share.with_name("away")
    share.rename(away)
    assert p.update_access(p.require_state()).files_reclassed == 0
    share.mkdir()  # an unmounted share: its mountpoint, empty
    assert p.update_access(p.require_state()).files_reclassed == 0
    assert sorted(_texts(p, ANONYMOUS)) == sorted(anonymous)
    share.rmdir()
    away.rename(share)
    assert p.update_access(p.require_state()).files_reclassed == 0
    # There, but behind a folder whose ACL cannot be read (root reads any file system's, so
    # the failure is made): readable by nobody.
    real = permissions.read_acl

    def failing(path: str):  # type: ignore[no-untyped-def]
        if path.endswith("/hr"):
            raise OSError(errno.EIO, "Input/output error", path)
        return real(path)

    monkeypatch.setattr(permissions, "read_acl", failing)
    assert p.update_access(p.require_state()).files_reclassed == 1
    assert not any(SECRET in t for t in _texts(p, HR))
    assert any(SECRET in t for t in _texts(p, UNRESTRICTED))
    p.context.store.close()


def test_a_stale_summary_keeps_the_readers_of_a_removed_file_it_still_quotes(
    tmp_path: Path,
) -> None:
    """A summary whose regeneration waits (deferred) keeps the text of a file removed under it
    until then: it must stay readable only by who could read that file. It lost the file's
    class and served the secret to everyone until its refresh."""
    root = tmp_path / "share"
    write_corpus(root, 12)
    secret = root / "hr" / "pay.txt"
    secret.parent.mkdir()
    secret.write_text(f"{SECRET} salary review. Only {SECRET} and the board know the pool.\n")
    os.chmod(secret.parent, 0o700)
    defer = {"now": False}
    p = corpus_pipeline(tmp_path, QuotingSummarizer(), defer_summaries=lambda: defer["now"])
    p.build(root)
    assert any(SECRET in t for t in _texts(p, UNRESTRICTED))
    assert not any(SECRET in t for t in _texts(p, ANONYMOUS))
    defer["now"] = True
    secret.unlink()
    assert p.reconcile(root).stats.summaries_deferred > 0
    state = p.require_state()
    quoting = [n for n in state.nodes.values() if SECRET in n.text]
    assert quoting, "the deferred summary still quotes the removed file"
    assert all(n.stale and len(n.access) > 1 for n in quoting)
    assert violations(state) == []
    assert not any(SECRET in t for t in _texts(p, ANONYMOUS)), "a stale summary leaked it"
    os.chmod(root / "d0.txt", 0o600)  # a permission change under it keeps the old class too
    p.update_access(p.require_state())
    assert not any(SECRET in t for t in _texts(p, ANONYMOUS))
    defer["now"] = False
    p.refresh()  # the regeneration purges the text, and the summary's readers are its files'
    state = p.require_state()
    assert not any(SECRET in n.text for n in state.nodes.values())
    assert violations(state) == []
    p.context.store.close()


def test_a_share_gone_between_reading_a_file_and_applying_it_changes_no_ones_access(
    tmp_path: Path,
) -> None:
    """The daemon's rescan read a file, then the share went away (an unmount) before the batch
    was applied: the apply read the file's permissions again, found nothing, and gave the
    unchanged text the class of unreadable files, so every public file read in that batch
    vanished from everyone's answers until the share came back and was read again. An
    unchanged text keeps its class; a changed one read that way is still readable by nobody
    (its new readers are not known)."""
    root = tmp_path / "share"
    write_corpus(root, 6)
    p = make_pipeline(tmp_path)
    p.build(root)
    state = p.require_state()
    d0 = [state.nodes[i].text for i in state.sources["d0.txt"].node_ids]
    assert set(d0) <= set(_texts(p, ANONYMOUS))
    (root / "d1.txt").write_text("The otter counted the new reeds of the river bank twice.\n")
    docs, gone = p.collect(state, [root / "d0.txt", root / "d1.txt"], UpdateReport())
    assert sorted(d.source for d in docs) == ["d0.txt", "d1.txt"]
    away = root.with_name("away")
    root.rename(away)  # the share goes away between the read and the apply
    p.apply_batch(state, docs, gone, UpdateReport())
    after = _texts(p, ANONYMOUS)
    assert set(d0) <= set(after), "an unchanged public text stays public"
    committed = p.require_state()
    assert committed.sources["d0.txt"].access != UNKNOWN_CLASS
    assert committed.sources["d1.txt"].access == UNKNOWN_CLASS
    assert not any("otter counted" in t for t in after), "a new text of unknown readers"
    assert violations(p.require_state()) == []
    p.context.store.close()


@root_only
def test_a_file_moved_into_a_closed_folder_loses_its_readers_summaries_included(
    share: Path, tmp_path: Path
) -> None:
    """A moved file's leaves keep their places (``test_moves``), and their readers become the new
    folder's: the summaries over them are the readers-of-both's alone, none written again."""
    _secret_doc(share / "open" / "memo.txt")
    summ = QuotingSummarizer()
    p = corpus_pipeline(tmp_path, summ)
    p.build(share)
    assert any(SECRET in t for t in _texts(p, ANONYMOUS)), "the memo is public before the move"
    calls = summ.calls
    summaries = {i for i, n in p.require_state().nodes.items() if n.layer > 0}
    (share / "open" / "memo.txt").rename(share / "hr" / "memo.txt")
    report = p.reconcile(share)
    state = p.require_state()
    assert (report.files_added, report.files_removed, report.files_moved) == (0, 0, 1)
    assert summ.calls == calls, "a move wrote summaries again"
    assert {i for i, n in state.nodes.items() if n.layer > 0} == summaries, "summaries replaced"
    assert violations(state) == []
    assert not any(SECRET in t for t in _texts(p, ANONYMOUS)), "the moved secret leaked"
    assert any(SECRET in t for t in _texts(p, HR))
    p.context.store.close()


@root_only
def test_the_last_file_of_a_class_moved_away_stays_in_its_readers_change_log(
    share: Path, tmp_path: Path
) -> None:
    """Once no file has ``hr/``'s class, the class leaves every reader's filter, but the change
    log's records of ``hr/pay.txt`` still name it: HR is told the move, a stranger only that a
    file appeared where they may read it (its ``hr/`` name untold)."""
    p = corpus_pipeline(tmp_path)
    p.build(share)
    hr = p.require_state().sources["hr/pay.txt"].access
    (share / "open").mkdir()
    (share / "hr" / "pay.txt").rename(share / "open" / "pay.txt")
    assert p.reconcile(share).files_moved == 1
    p.update_access(p.require_state())
    assert hr not in p.context.access.registry.ids(), "the class no file has is retired"
    rows = RowStore(state_path(p.context.models, "t"), readonly=True)
    feed = ChangeFeed(lambda: rows, "t", classes=p.context.access.registry)

    def files(who: Identity) -> list[tuple[str, str, str | None]]:
        records = feed.changes({"since": "1h"}, who)["records"]
        return [(f["source"], f["action"], f.get("from")) for r in records for f in r["files"]]

    for reader in (HR, ALICE):
        assert files(reader)[0] == ("open/pay.txt", "moved", "hr/pay.txt")
        assert ("hr/pay.txt", "added", None) in files(reader), "the build of it, still theirs"
    assert files(ANONYMOUS)[0] == ("open/pay.txt", "added", None)
    assert not any("hr/" in source for source, _, _ in files(ANONYMOUS))
    p.context.store.close()
