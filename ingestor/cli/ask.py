"""``adrap ask``: answer a question from the tree's context, with numbered citations."""

from __future__ import annotations

import json
from typing import Any

import click

from ingestor.answer.modes import BASES, MODES
from ingestor.cli.app import Ctx, main, run, tree_options
from ingestor.cli.query import (
    answer_locally_or_by_daemon,
    exit_if_no_match,
    format_spans,
    request_params,
)
from ingestor.read.names import shown


@main.command()
@click.argument("question")
@click.option("--mode", type=click.Choice(MODES), default=None, help="Context: default query mode.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="Context budget.")
@click.option("--top-k", type=click.IntRange(min=1), default=None, help="Traversal: per layer.")
@click.option("--base", type=click.Choice(BASES), default=None, help="postqfrap: base retriever.")
@click.option("--k0", type=click.IntRange(min=1), default=None, help="postqfrap: nodes retrieved.")
@click.option(
    "--source", "source_prefix", default=None, help="Only this folder or file (as adrap query)."
)
@click.option("--layers", default=None, help="Layer range, e.g. 0-0 for leaves only.")
@click.option("--show-context", is_flag=True, help="Also print the numbered context.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: answer, citations, context.")
@tree_options()
@click.pass_obj
def ask(
    ctx: Ctx,
    question: str,
    mode: str | None,
    max_tokens: int | None,
    top_k: int | None,
    base: str | None,
    k0: int | None,
    source_prefix: str | None,
    layers: str | None,
    show_context: bool,
    as_json: bool,
) -> None:
    """Answer QUESTION with the configured OpenAI-compatible model, citing [n] sources.

    The context comes from any query mode; each [n] maps to files and character spans. With no
    LLM configured (ADRAP_SUMMARY__BACKEND is not openai) it says so and prints the context.

    \b
    Example:
      adrap ask "Why did the fox call the grapes sour?" --mode postqfrap --show-context
    """
    params = request_params(question, mode, max_tokens, top_k, k0, base, source_prefix, layers)
    out = run(ctx, lambda: answer_locally_or_by_daemon(ctx.settings, "ask", params))
    if as_json:
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
        exit_if_no_match(out, ctx.settings.tree)
        return
    if not out["answered"]:
        click.echo(out["reason"], err=True)
        _echo_context(out)
        exit_if_no_match(out, ctx.settings.tree)
        return
    if show_context:
        _echo_context(out)
        click.echo()
    click.echo(shown(out["answer"], lines=True))  # an LLM may copy a document's escapes
    if out["citations"]:
        click.echo()
        for c in out["citations"]:
            click.echo(f"[{c['n']}] {format_spans(c['spans'])}")
    if out["unknown_citations"]:
        numbers = ", ".join(f"[{n}]" for n in out["unknown_citations"])
        click.echo(f"(the answer cites {numbers}, which name no source)", err=True)
    click.echo(
        f"{out['mode']}, {len(out['parts'])} sources, {out['model']}, {out['seconds']:.1f} s",
        err=True,
    )
    exit_if_no_match(out, ctx.settings.tree)


def _echo_context(out: dict[str, Any]) -> None:
    for n, part in enumerate(out["parts"], 1):
        click.echo(click.style(f"[{n}] {format_spans(part['spans'])}", bold=True))
        click.echo(shown(part["text"], lines=True) + "\n")
