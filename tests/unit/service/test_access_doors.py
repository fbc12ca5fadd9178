"""Who may read what, at every door of a running daemon, with real users of this machine (issue 53).

Users are made for the test (``useradd``), a secret sits in a file only its owner and a group
may reach, and each door is asked as each of them: the Unix socket (the kernel says who connects:
the client is a forked process that switched to the user), ``/query`` in every mode and ``/ask``
over HTTP with no token, a named token, a trusted proxy's header; ``/status``; a permission
changed while the daemon runs (chmod, setfacl). Needs root (to make users and switch to them).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ingestor.cli.daemon_client import DaemonClient
from ingestor.service.daemon import Daemon
from ingestor.service.identity import TOKENS_FILE, Callers, TokenBook, socket_path
from testkit.daemons import make_daemon
from testkit.spy import spy_found
from tests.conftest import wait_until
from tests.unit.service.test_watcher import make_pipeline, write_corpus

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd to make the users the doors are asked as",
)

SECRET = "zanzibarquokka"
OWNER = "own-token"
GROUP = "adrap-t-hr"
USERS = {"alice": (), "carol": (GROUP,), "bob": ()}  # test user -> its extra groups


def _user(name: str) -> str:
    return f"adrap-t-{name}"


@pytest.fixture(scope="module")
def users() -> dict[str, int]:
    """The test's users (made once, kept: useradd is idempotent by name here)."""
    subprocess.run(["groupadd", "-f", GROUP], check=True)
    out = {}
    for name, groups in USERS.items():
        login = _user(name)
        try:
            pwd.getpwnam(login)
        except KeyError:
            extra = ["-G", ",".join(groups)] if groups else []
            subprocess.run(
                ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", *extra, login], check=True
            )
        out[name] = pwd.getpwnam(login).pw_uid
    return out


def _write_secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"The salary review of {SECRET} is confidential. Pay bands rise by seven percent. "
        f"Only {SECRET} and the board know the bonus pool of the garden project.\n"
    )


@pytest.fixture
def daemon(users: dict[str, int]) -> Iterator[Daemon]:
    # A folder every user may pass through (pytest's tmp dirs are 0700): the socket is in it.
    base = Path(tempfile.mkdtemp(prefix="adrap-doors-"))
    os.chmod(base, 0o755)
    root = base / "share"
    write_corpus(root, 12)
    hr = root / "hr"
    _write_secret(hr / "pay.txt")
    os.chown(hr, users["alice"], -1)
    shutil.chown(hr, group=GROUP)
    os.chmod(hr, 0o750)
    os.chown(hr / "pay.txt", users["alice"], -1)
    shutil.chown(hr / "pay.txt", group=GROUP)
    os.chmod(hr / "pay.txt", 0o640)
    p = make_pipeline(base)
    state = base / "state"
    p.build(root)
    os.chmod(state, 0o711)
    callers = Callers(
        OWNER, TokenBook(state / TOKENS_FILE), proxy_header="X-Forwarded-User",
        proxy_addresses=["127.0.0.1"],
    )  # fmt: skip
    d = make_daemon(
        p, root, http_port=0, state_dir=state, socket=True, callers=callers,
        access_check_interval=0.1, debounce=0.05,
    )  # fmt: skip
    stop = threading.Event()
    t = threading.Thread(target=d.run, args=(stop,))
    t.start()
    try:
        wait_until(lambda: d.metrics.ready and d.address is not None, timeout=60)
        yield d
    finally:
        stop.set()
        t.join(60)
        p.context.store.close()
        shutil.rmtree(base, ignore_errors=True)


def as_user(uid: int, fn: Callable[[], Any], groups: list[int] | None = None) -> Any:
    """Return ``fn()`` (JSON-able) run in a fork that became ``uid``: its groups ``groups``, or
    as the system lists them (none for a uid without a passwd entry). An error in it fails the
    caller."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            try:
                pw = pwd.getpwuid(uid)
                held = os.getgrouplist(pw.pw_name, pw.pw_gid) if groups is None else groups
                os.setgroups(held)
                os.setgid(pw.pw_gid)
            except KeyError:
                os.setgroups(groups or [])
                os.setgid(uid)
            os.setuid(uid)
            os.write(w, json.dumps({"out": fn()}).encode())
        except BaseException as exc:
            os.write(w, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    got: dict[str, Any] = json.loads(data)
    assert "error" not in got, got
    return got["out"]


def _as_user(
    uid: int, d: Daemon, route: str, params: dict[str, Any], groups: list[int] | None = None
) -> dict[str, Any]:
    """Ask the daemon's Unix socket from a process that is ``uid`` (holding ``groups``, or the
    system's)."""

    def ask() -> dict[str, Any]:
        client = DaemonClient(str(socket_path(d.state_dir)), True)
        return client.request("POST" if route == "/ask" else "GET", route, params, timeout=60)

    out: dict[str, Any] = as_user(uid, ask, groups)
    return out


def _http(d: Daemon, route: str, params: dict[str, Any], headers: dict[str, str] | None = None,
          method: str = "GET") -> tuple[int, str]:  # fmt: skip
    host, port = d.address or ("", 0)
    url = f"http://{host}:{port}{route}?{urllib.parse.urlencode(params)}"
    req = urllib.request.Request(url, method=method, headers=headers or {},
                                 data=b"" if method == "POST" else None)  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _leaks(body: dict[str, Any] | str) -> bool:
    """Whether an answer holds the secret or its file's name (the question it echoes aside)."""
    out = json.loads(body) if isinstance(body, str) else dict(body)
    out.pop("question", None)
    text = json.dumps(out)
    return SECRET in text or "hr/pay.txt" in text


def _reads(body: dict[str, Any] | str) -> bool:
    """Whether an answer holds the secret in what it retrieved."""
    out = json.loads(body) if isinstance(body, str) else dict(body)
    out.pop("question", None)
    return SECRET in json.dumps(out)


MODES = [
    {"mode": "collapsed"},
    {"mode": "traversal"},
    {"mode": "postqfrap"},
    {"mode": "collapsed", "max_layer": "0"},
    {"mode": "collapsed", "min_layer": "1"},
]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(m.values()))
def test_no_token_reads_only_what_everyone_may_read_in_every_mode(
    daemon: Daemon, mode: dict[str, str]
) -> None:
    q = {"q": f"salary review {SECRET} bonus pool", "max_tokens": "4000", **mode}
    code, body = _http(daemon, "/query", q)
    assert code == 200, body
    assert not _leaks(body)
    code, body = _http(daemon, "/query", q, {"Authorization": f"Bearer {OWNER}"})
    assert code == 200, body
    assert _reads(body) or mode.get("min_layer") == "1", body
    code, body = _http(daemon, "/ask", q, method="POST")
    assert code == 200, body
    assert not _leaks(body), body


def test_the_unix_socket_answers_each_user_with_what_the_kernel_lets_them_read(
    daemon: Daemon, users: dict[str, int]
) -> None:
    q = {"q": f"salary review {SECRET}", "max_tokens": "4000"}
    assert _reads(_as_user(users["alice"], daemon, "/query", q)), "the owner"
    assert _reads(_as_user(users["carol"], daemon, "/query", q)), "group hr"
    assert not _leaks(_as_user(users["bob"], daemon, "/query", q)), "bob is in no group"
    assert not _leaks(_as_user(65534, daemon, "/query", q)), "nobody"
    assert _reads(_as_user(0, daemon, "/query", q)), "root: the owner of the tree"


def _kernel_says_groups() -> bool:
    """Whether this kernel answers ``SO_PEERGROUPS`` (Linux >= 4.13)."""
    import socket

    from ingestor.service.identity import PEERGROUPS_BYTES, SO_PEERGROUPS

    a, b = socket.socketpair()
    try:
        a.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, PEERGROUPS_BYTES)
    except OSError:
        return False
    finally:
        a.close()
        b.close()
    return True


@pytest.mark.skipif(not _kernel_says_groups(), reason="the kernel does not say (SO_PEERGROUPS)")
def test_the_socket_counts_the_groups_the_calling_process_holds(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """As the kernel does: carol's process without her groups (a service that dropped them,
    ``setpriv --clear-groups``) may not open hr/pay.txt, so adrap does not serve it either; bob's
    process holding the group (``SupplementaryGroups=``, ``sg``) may, whatever the user database
    says. Each answer is checked against ``os.access`` in the same kind of process."""
    hr = grp.getgrnam(GROUP).gr_gid
    secret = daemon.root / "hr" / "pay.txt"
    q = {"q": f"salary review {SECRET}", "max_tokens": "4000"}
    for who, held in (("carol", []), ("bob", [hr]), ("carol", [hr]), ("bob", [])):
        kernel = as_user(users[who], partial(os.access, secret, os.R_OK), held)
        got = _as_user(users[who], daemon, "/query", q, held)
        assert _reads(got) == kernel, f"{who} holding {held}: the kernel says {kernel}"
        assert kernel or not _leaks(got)


def test_named_tokens_and_the_pinned_proxy_header_stand_for_their_principals(
    daemon: Daemon,
) -> None:
    book = daemon.callers.tokens
    assert book is not None
    hr, bob = book.add("hr-bot", f"group:{GROUP}"), book.add("bob", f"user:{_user('bob')}")
    q = {"q": f"salary review {SECRET}", "max_tokens": "4000"}
    assert _reads(_http(daemon, "/query", q, {"Authorization": f"Bearer {hr}"})[1])
    assert not _leaks(_http(daemon, "/query", q, {"api-key": bob})[1])
    assert book.revoke("hr-bot")
    assert _http(daemon, "/query", q, {"Authorization": f"Bearer {hr}"})[0] == 401
    assert _http(daemon, "/query", q, {"Authorization": "Bearer guessed"})[0] == 401
    # At rest only digests: the token itself is nowhere in the file.
    assert hr not in (daemon.state_dir / TOKENS_FILE).read_text()
    carol = {"X-Forwarded-User": _user("carol")}
    assert _reads(_http(daemon, "/query", q, carol)[1]), "the proxy (127.0.0.1) names carol"
    daemon.callers.proxy_networks = ()  # the same header from an address not pinned: ignored
    assert not _leaks(_http(daemon, "/query", q, carol)[1])


def test_the_access_map_is_filled_beside_the_queries_and_never_opens_a_secret(
    daemon: Daemon,
) -> None:
    """A reader's query walks unfiltered and keeps what the store's access map says they may
    read (retriever.access_map): the daemon fills the map on its own thread once a reader wants
    it; no mode of /query serves the secret before, during or after."""
    from retriever.edge_store import EdgeNodeStore
    from retriever.plan import Planner

    store = daemon.store.inner
    assert isinstance(store, EdgeNodeStore)
    store.planner = Planner(exact_max_points=0)  # walks, as a big tree's readers' queries do
    store.estimates.clear()
    q = {"q": f"salary review {SECRET} bonus pool", "max_tokens": "4000"}
    assert not _leaks(_http(daemon, "/query", q)[1])
    wait_until(lambda: store.access_map.complete, timeout=30, what="the access map filled")
    for mode in MODES:
        code, body = _http(daemon, "/query", {**q, **mode})
        assert code == 200, body
        assert not _leaks(body), mode
    code, body = _http(daemon, "/query", q, {"Authorization": f"Bearer {OWNER}"})
    assert _reads(body)


def test_a_readers_points_are_copied_beside_the_queries_and_never_open_a_secret(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader whose query the store scans is served from a copy of their points in memory
    (retriever.reader_copy), which the daemon makes on its own thread once asked; no mode of
    /query serves the secret before or after."""
    from retriever.edge_store import EdgeNodeStore

    store = daemon.store.inner
    assert isinstance(store, EdgeNodeStore)
    copies = store.access_map.copies
    q = {"q": f"salary review {SECRET} bonus pool", "max_tokens": "4000"}
    assert not _leaks(_http(daemon, "/query", q)[1])
    wait_until(lambda: copies.held[0] > 0 and not copies.wanted, timeout=30, what="the copy filled")
    served = spy_found(monkeypatch, copies, "hits")
    for mode in MODES:
        code, body = _http(daemon, "/query", {**q, **mode})
        assert code == 200, body
        assert not _leaks(body), mode
    assert any(served), "the reader's scans were served from the copy"
    code, body = _http(daemon, "/query", q, {"Authorization": f"Bearer {OWNER}"})
    assert _reads(body)


def test_status_tells_who_asks_and_names_no_file_to_a_stranger(daemon: Daemon) -> None:
    code, body = _http(daemon, "/status", {})
    assert code == 200
    status = json.loads(body)
    assert status["caller"]["name"] == "anonymous"
    # the classes files are in, once the daemon's first pass read their permissions
    wait_until(lambda: json.loads(_http(daemon, "/status", {})[1])["access"]["classes"] == 2)
    assert not _leaks(body)
    assert "d0.txt" not in body

    def owner() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {OWNER}"}
        out: dict[str, Any] = json.loads(_http(daemon, "/status", {}, headers)[1])
        return out

    assert owner()["caller"]["unrestricted"] is True
    # the secret's class (one file) and the public one, once permissions were read
    wait_until(lambda: sorted(c["files"] for c in owner()["access"]["by_class"]) == [1, 12])
    assert _http(daemon, "/retry", {}, method="POST")[0] == 403, "the owner's action"
    # Opened to everyone: one audience, so one class in use (the registry keeps the old one).
    os.chmod(daemon.root / "hr", 0o755)
    os.chmod(daemon.root / "hr" / "pay.txt", 0o644)
    wait_until(lambda: [c["files"] for c in owner()["access"]["by_class"]] == [13])
    assert owner()["access"]["classes"] == 1
    assert json.loads(_http(daemon, "/status", {})[1])["access"]["readable_by_caller"] == 1


def test_a_chmod_and_a_setfacl_while_the_daemon_runs_change_who_reads(
    daemon: Daemon, users: dict[str, int]
) -> None:
    q = {"q": f"salary review {SECRET}", "max_tokens": "4000"}
    hr = daemon.root / "hr"
    if shutil.which("setfacl"):
        bob = _user("bob")
        subprocess.run(["setfacl", "-m", f"u:{bob}:rx", str(hr)], check=True)
        subprocess.run(["setfacl", "-m", f"u:{bob}:r", str(hr / "pay.txt")], check=True)
        wait_until(lambda: _reads(_as_user(users["bob"], daemon, "/query", q)))
        subprocess.run(["setfacl", "-b", str(hr), str(hr / "pay.txt")], check=True)
        wait_until(lambda: not _leaks(_as_user(users["bob"], daemon, "/query", q)))
    os.chmod(hr, 0o755)
    os.chmod(hr / "pay.txt", 0o644)
    wait_until(lambda: _reads(_http(daemon, "/query", q)[1]), what="public after chmod")
    os.chmod(hr / "pay.txt", 0o600)
    wait_until(lambda: not _leaks(_http(daemon, "/query", q)[1]), what="private again")
    assert not _leaks(_as_user(users["carol"], daemon, "/query", q)), "600: the owner alone"
    assert _reads(_as_user(users["alice"], daemon, "/query", q))


def test_a_share_that_went_away_keeps_who_reads_what(daemon: Daemon) -> None:
    """The share away (an unmount, a pulled disk) is not a permission change: the public files
    stay readable to anonymous callers and the secret stays private, until it is back."""
    q = {"q": f"salary review {SECRET} and the seven percent", "max_tokens": "4000"}

    def public_sources() -> set[str]:
        body = json.loads(_http(daemon, "/query", q)[1])
        assert not _leaks(body)
        return {s for hit in body["hits"] for s in hit["sources"]}

    before = public_sources()
    assert before
    away = daemon.root.with_name("away")
    daemon.root.rename(away)
    try:
        wait_until(lambda: _status_available(daemon) is False, what="the share seen missing")
        time.sleep(1.0)  # ten permission checks at 0.1 s
        assert public_sources() == before
    finally:
        away.rename(daemon.root)
    wait_until(lambda: _status_available(daemon) is True, what="the share seen back")
    assert public_sources() == before


def _owner_status(d: Daemon) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        _http(d, "/status", {}, headers={"Authorization": f"Bearer {OWNER}"})[1]
    )
    return out


def _status_available(d: Daemon) -> bool:
    return bool(_owner_status(d)["watched_folder"]["available"])


def test_adrap_status_by_another_account_says_the_state_is_private_and_asks_the_daemon(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """`adrap status` run by a local user who may not open the state dir's files answers from
    the daemon's socket (who they are, what they may read) instead of a PermissionError."""
    from click.testing import CliRunner

    from ingestor.cli.app import main
    from ingestor.service.locking import state_lock

    def status() -> dict[str, Any]:
        env = {"ADRAP_STATE_DIR": str(daemon.state_dir), "ADRAP_TREE": "t"}
        result = CliRunner().invoke(main, ["status", "--json"], env=env)
        return {"code": result.exit_code, "out": result.output, "error": repr(result.exception)}

    blob = daemon.root / "blob.txt"  # a file the daemon skips (binary): its name is the owner's
    blob.write_bytes(b"\x00\x01" * 200)
    wait_until(lambda: _owner_status(daemon)["unread"]["skipped"] == 1, timeout=30)
    # The writer's lock, as `adrap watch` holds it: its state dir private, its file too.
    with state_lock(daemon.state_dir, "watch"):
        got = as_user(users["bob"], status)
    assert got["code"] == 0, got
    out = json.loads(got["out"])
    assert out["state"].startswith("private to"), out
    assert out["caller"]["unrestricted"] is False, out
    assert "hr/pay.txt" not in got["out"]
    # what the daemon counts, not the owner's private ledger read as empty; no names
    assert out["unread"] == {"skipped": 1, "stale": 0}, out
    assert out["documents"] == _owner_status(daemon)["documents"], out
    assert "blob.txt" not in got["out"]
    assert "ignored the unreadable" not in got["out"]


def test_the_owner_s_commands_run_by_another_account_fail_in_one_line_naming_the_owner(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """`adrap token list` listed nothing and `adrap token add` raised a PermissionError
    traceback for another account; both now say whose tree it is and what to do."""
    from click.testing import CliRunner

    from ingestor.cli.app import main
    from ingestor.service.locking import state_lock

    def run(args: list[str]) -> dict[str, Any]:
        env = {"ADRAP_STATE_DIR": str(daemon.state_dir), "ADRAP_TREE": "t"}
        result = CliRunner().invoke(main, args, env=env)
        return {"code": result.exit_code, "out": result.output}

    with state_lock(daemon.state_dir, "watch"):
        for args in (
            ["token", "list"],
            ["token", "add", "bobs", "--user", _user("bob")],
            ["add", str(daemon.root)],  # a writer: "cannot open the lock file" named no owner
            # It loaded the model before the lock: an import the caller could not read (CI's
            # interpreter under a private home) hid the owner's name.
            ["index-sparse"],
        ):
            got = as_user(users["bob"], lambda args=args: run(args))
            assert got["code"] == 1, (args, got)
            assert "Traceback" not in got["out"]
            assert "permission denied" in got["out"], (args, got)
            assert "belongs to the account 'root'" in got["out"], got["out"]


def test_adrap_explore_by_another_account_points_to_the_daemon_s_doors(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """Another account's `adrap explore` reads nothing and names the doors that serve it."""
    from click.testing import CliRunner

    from ingestor.cli.app import main
    from ingestor.service.locking import state_lock

    out = Path(tempfile.mkdtemp(prefix="adrap-explore-"))
    os.chmod(out, 0o777)

    def run() -> dict[str, Any]:
        env = {"ADRAP_STATE_DIR": str(daemon.state_dir), "ADRAP_TREE": "t"}
        result = CliRunner().invoke(main, ["explore", "-o", str(out / "t.html")], env=env)
        return {"code": result.exit_code, "out": result.output}

    try:
        with state_lock(daemon.state_dir, "watch"):
            got = as_user(users["bob"], run)
        assert got["code"] == 1
        assert "/dashboard with a named token" in got["out"]
        assert not (out / "t.html").exists()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_adrap_mcp_by_another_account_serves_through_the_daemon_s_socket(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """Another account's `adrap mcp` refused to start ("the store is private") although the
    daemon's socket would answer it; it starts now, and its calls go to the daemon as that
    user (the runner's own choice of the socket is what is checked)."""
    from click.testing import CliRunner

    from ingestor.cli.app import main
    from ingestor.cli.mcp_stdio import StdioRunner
    from ingestor.config import Settings

    env = {"ADRAP_STATE_DIR": str(daemon.state_dir), "ADRAP_TREE": "t"}

    def run() -> dict[str, Any]:
        result = CliRunner().invoke(main, ["mcp"], input="", env=env)
        runner = StdioRunner(Settings(_env_file=None, state_dir=daemon.state_dir, tree="t"))  # type: ignore[call-arg]
        client = runner._daemon()
        return {
            "code": result.exit_code,
            "out": result.output,
            "unix": bool(client and client.unix),
        }

    from ingestor.service.locking import state_lock

    with state_lock(daemon.state_dir, "watch"):
        got = as_user(users["bob"], run)
    assert got["code"] == 0, got["out"]
    assert "private" not in got["out"]
    assert got["unix"], "the daemon's socket, where the kernel says who bob is"


def test_a_source_filter_by_another_account_goes_to_the_daemon_as_written(
    daemon: Daemon, users: dict[str, int]
) -> None:
    """`adrap query --source public/a.txt` by another account failed with "permission denied"
    on the tree's state (read to resolve the path); the filter now goes to the daemon as written,
    relative to the root, and is answered there with what that user may read."""
    from ingestor.cli.sources import resolve_source
    from ingestor.config import Settings

    def run() -> dict[str, Any]:
        s = Settings(_env_file=None, state_dir=daemon.state_dir, tree="t")  # type: ignore[call-arg]
        return {"hr": resolve_source(s, "/hr/pay.txt"), "docs": resolve_source(s, " ./docs/ ")}

    os.chmod(daemon.state_dir / "models", 0o700)  # as the writer keeps it (the fixture's: not)
    assert as_user(users["bob"], run) == {"hr": "hr/pay.txt", "docs": "docs/"}
    q = {"q": f"salary review {SECRET}", "max_tokens": "4000", "source": "hr/pay.txt"}
    assert not _leaks(_as_user(users["bob"], daemon, "/query", q))
    assert _reads(_as_user(users["carol"], daemon, "/query", q))


def test_a_denied_file_outside_the_state_dir_is_not_called_the_tree_s(tmp_path: Path) -> None:
    """The one line names the state dir's owner only for the state dir's files."""
    from types import SimpleNamespace

    from ingestor.cli.app import _not_yours

    state = tmp_path / "state"
    state.mkdir()
    inside = PermissionError(13, "Permission denied", str(state / "tokens.json"))
    outside = PermissionError(13, "Permission denied", str(tmp_path / "share" / "a.txt"))
    settings: Any = SimpleNamespace(state_dir=state)
    assert "state dir is its writer's alone" in _not_yours(inside, settings)
    said = _not_yours(outside, settings)
    assert "state dir" not in said
    assert "belongs to the account" in said
