"""``adrap build``, ``add``, ``remove``, ``rebuild``, ``index-sparse``: the commands that write
the tree."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ingestor.cli.app import Ctx, main, make_progress_printer, run, tree_options
from ingestor.cli.factories import make_embedder, make_pipeline, opened_store, writer_lock


@main.command()
@click.argument("root", type=click.Path(exists=True, file_okay=True, path_type=Path))
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: on a TTY).")
@tree_options()
@click.pass_obj
def build(ctx: Ctx, root: Path, progress: bool | None) -> None:
    """Build the tree over ROOT (a folder or one file) from scratch and store it.

    \b
    Example:
      adrap build ./docs
    """

    def body() -> None:
        settings = ctx.settings_for(creating=True)  # an unnamed tree is `default`
        show = make_progress_printer(sys.stderr.isatty() if progress is None else progress)
        # The lock first: a running daemon is named at once, before the model is loaded.
        with writer_lock(settings, "build"), opened_store(settings) as store:
            embedder = make_embedder(settings)
            pipeline = make_pipeline(settings, store, embedder)
            _check_llm(pipeline)  # an LLM that is down fails the build now, not after embedding
            report = pipeline.build(root, show)
        layers = ", ".join(f"L{k}: {v}" for k, v in report.layers.items())
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in report.stats.seconds.items())
        click.echo(
            f"built tree {settings.tree!r} from {report.files} files: {report.leaves} leaves; "
            f"nodes per layer {layers or 'none'}; {report.stats.summary_calls} summaries "
            f"({report.stats.cache_hits} from cache); {report.seconds:.1f}s ({stages})"
        )
        _say_skipped(len(report.skipped))

    run(ctx, body)


#: ``adrap add`` / ``remove``: the daemon's refresh window, for scripts.
_defer_summaries = click.option(
    "--defer-summaries",
    is_flag=True,
    help="Place the leaves now and mark the summaries they change stale (old text kept, "
    "searchable); `adrap refresh` pays for them once, however many updates touched them.",
)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_defer_summaries
@tree_options()
@click.pass_obj
def add(ctx: Ctx, paths: tuple[Path, ...], defer_summaries: bool) -> None:
    """Add or update files/folders under the tree's root in place (adRAP, no rebuild).

    New files are inserted, edited files re-chunked (unchanged chunks keep their nodes), files
    that vanished from a given folder are removed.

    \b
    Example:
      adrap add docs/new-report.md docs/minutes/
      adrap add --defer-summaries docs/a.md && adrap add --defer-summaries docs/b.md
      adrap refresh
    """
    _update(ctx, list(paths), remove=False, defer=defer_summaries)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_defer_summaries
@tree_options()
@click.pass_obj
def remove(ctx: Ctx, paths: tuple[Path, ...], defer_summaries: bool) -> None:
    """Remove files/folders from the tree in place (the files themselves are not touched).

    \b
    Example:
      adrap remove docs/old-report.md
    """
    _update(ctx, list(paths), remove=True, defer=defer_summaries)


def _update(ctx: Ctx, paths: list[Path], *, remove: bool, defer: bool) -> None:
    def body() -> None:
        settings = ctx.settings
        command = "remove" if remove else "add"
        with writer_lock(settings, command), opened_store(settings) as store:
            embedder = make_embedder(settings)
            pipeline = make_pipeline(settings, store, embedder, defer_summaries=lambda: defer)
            if not defer:  # summaries paid now: the LLM asked before reading or embedding
                _check_llm(pipeline)
            report = pipeline.update(paths, remove=remove)
        click.echo(report.summary())
        _say_skipped(len(report.skipped) + len(report.stale))

    run(ctx, body)


def _check_llm(pipeline: Any) -> None:
    """Ask the LLM that writes the pipeline's summaries, if one does, whether it can be used
    (:meth:`~ingestor.summarize.openai_compat.OpenAISummarizer.check_reachable`): a command
    fails before reading or embedding anything."""
    check = getattr(pipeline.context.builder.summaries.summarizer, "check_reachable", None)
    if check is not None:
        check()


def _say_skipped(n: int) -> None:
    """Point at ``adrap status`` for the files not read; each was logged once, with why, as read."""
    if n:
        click.echo(
            f"{n} file{'s' if n > 1 else ''} not read (logged above; `adrap status` lists them "
            "with the reason)",
            err=True,
        )


@main.command()
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: on a TTY).")
@tree_options()
@click.pass_obj
def rebuild(ctx: Ctx, progress: bool | None) -> None:
    """Rebuild every summary layer over the current leaves (cached summaries are reused).

    \b
    Example:
      adrap rebuild
    """

    def body() -> None:
        settings = ctx.settings
        show = make_progress_printer(sys.stderr.isatty() if progress is None else progress)
        with writer_lock(settings, "rebuild"), opened_store(settings) as store:
            embedder = make_embedder(settings)
            report = make_pipeline(settings, store, embedder).rebuild(show)
        layers = ", ".join(f"L{k}: {v}" for k, v in report.layers.items())
        click.echo(
            f"rebuilt tree {settings.tree!r}: {report.leaves} leaves; nodes per layer {layers}; "
            f"{report.stats.summary_calls} summaries ({report.stats.cache_hits} from cache); "
            f"{report.seconds:.1f}s"
        )

    run(ctx, body)


@main.command("index-sparse")
@tree_options()
@click.pass_obj
def index_sparse(ctx: Ctx) -> None:
    """Add the BM25 sparse vector (hybrid search) to a store built before it, keeping the tree,
    its summaries and dense vectors; a store that has it is left as it is.

    \b
    Example:
      adrap index-sparse
    """

    def body() -> None:
        settings = ctx.settings
        # The lock first, as `build` takes it: a running daemon, or a tree that is another
        # account's, is named at once, before the model is loaded.
        with writer_lock(settings, "index-sparse"), opened_store(settings) as store:
            embedder = make_embedder(settings)
            store.ensure_collection(embedder.dim, embedder.model_id)
            added = store.index_sparse()
        click.echo(
            f"added BM25 vectors to {added} points; queries are hybrid now"
            if added
            else "the store has BM25 vectors already; nothing to do"
        )

    run(ctx, body)
