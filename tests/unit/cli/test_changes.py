"""``adrap changes``: read from the state database by its owner, from the daemon when one runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ingestor.cli import changes as changes_cli
from ingestor.cli import main
from ingestor.cli.daemon_client import DaemonClient
from ingestor.service import locking


def test_changes_lists_the_build_then_each_update(built: Path) -> None:
    runner = CliRunner()
    (built / "fables" / "fox.txt").write_text("The fox found the grapes ripe at last.\n")
    (built / "it" / "crow.txt").unlink()
    (built / "it" / "owl.txt").write_text("The owl watched the fox and the crow all night.\n")
    added = runner.invoke(main, ["add", str(built / "fables"), str(built / "it")])
    assert added.exit_code == 0, added.output
    got = runner.invoke(main, ["changes", "--json", "--digest"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.output)
    kinds = [r["kind"] for r in out["records"]]
    assert kinds in (["update", "build"], ["rebuild", "build"])  # two files: a drift rebuild
    update = {f["source"]: f["action"] for f in out["records"][0]["files"]}
    assert update == {"fables/fox.txt": "edited", "it/crow.txt": "removed", "it/owl.txt": "added"}
    assert out["files"] == {"edited": 1, "removed": 1, "added": 3}  # the build added two
    assert "digest" in out
    text = runner.invoke(main, ["changes", "--since", "1h"])
    assert text.exit_code == 0, text.output
    assert "~fables/fox.txt" in text.output
    assert "-it/crow.txt" in text.output
    future = runner.invoke(main, ["changes", "--since", "2999-01-01", "--json"])
    assert json.loads(future.output)["records"] == []


def test_changes_shows_a_renamed_file_as_a_move(built: Path) -> None:
    runner = CliRunner()
    (built / "it" / "crow.txt").rename(built / "it" / "raven.txt")
    moved = runner.invoke(main, ["add", str(built / "it")])
    assert moved.exit_code == 0, moved.output
    got = json.loads(runner.invoke(main, ["changes", "--json", "--limit", "1"]).output)
    assert got["records"][0]["files"] == [
        {
            "source": "it/raven.txt",
            "action": "moved",
            "access": got["records"][0]["files"][0]["access"],
            "owner": got["records"][0]["files"][0]["owner"],
            "from": "it/crow.txt",
            "from_access": got["records"][0]["files"][0]["access"],
        }
    ]
    text = runner.invoke(main, ["changes", "--limit", "1"])
    assert "it/crow.txt -> it/raven.txt" in text.output, text.output


def test_changes_says_which_times_it_takes(built: Path) -> None:
    got = CliRunner().invoke(main, ["changes", "--since", "last tuesday"])
    assert got.exit_code == 1
    assert "90m, 36h, 2d, 1w" in got.output


def test_changes_asks_the_running_daemon(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, dict[str, Any] | None]] = []

    def request(
        self: DaemonClient, method: str, path: str, params: Any = None, *, timeout: float = 600
    ) -> dict[str, Any]:
        sent.append((method, path, params))
        return {"tree": "default", "since": "x", "records": [], "files": {}}

    holder = {"command": "watch", "pid": 1, "http": "127.0.0.1:9"}
    monkeypatch.setattr(locking, "read_holder", lambda state_dir: holder)
    monkeypatch.setattr(DaemonClient, "request", request)
    monkeypatch.setenv("ADRAP_STATE_DIR", str(tmp_path))
    for args, method in ((["--since", "2d"], "GET"), (["--digest", "--llm"], "POST")):
        got = CliRunner().invoke(main, ["changes", *args])
        assert got.exit_code == 0, got.output
        assert sent[-1][0] == method  # an LLM digest spends tokens: POST, as /ask
        assert sent[-1][1] == "/changes"
    assert changes_cli.SHOWN_FILES > 0


def test_a_model_change_is_printed_by_what_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    record = {
        "at_iso": "2026-11-29T20:44:17+00:00",
        "kind": "model",
        "files": [],
        "summaries": [],
        "detail": "embedding model a -> b: every node's text embedded again, 0 summaries paid",
    }
    changes_cli._echo({"tree": "t", "since": "2026-11-28", "records": [record]})
    line = capsys.readouterr().out.splitlines()[1]
    assert line.endswith(
        "model       embedding model a -> b: every node's text embedded again, 0 summaries paid"
    )
