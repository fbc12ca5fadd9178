"""The ``adrap`` command group: settings and logging are configured here, once per process.

Only click and the standard library are imported at module level: ``adrap --help``, ``status``
and a refused writer answer before numpy, torch or the store are loaded. Settings are built on a
command's first use of :attr:`Ctx.settings`, after its ``--tree`` / ``--state-dir`` are parsed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ingestor.cli.home import TreeHome
    from ingestor.config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def _mask(text: str) -> str:
    from ingestor.masking import mask_credentials

    return mask_credentials(text)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for logs collected from containers."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _mask(json.dumps(out, ensure_ascii=False))


class MaskingFormatter(logging.Formatter):
    """Plain log lines (a terminal's) with credentials in URLs (``https://user:pass@host``)
    masked, and the message's control characters escaped: a file's name can hold a newline or
    an escape sequence (:func:`~ingestor.read.names.shown`)."""

    def format(self, record: logging.LogRecord) -> str:
        return _mask(super().format(record))

    def formatMessage(self, record: logging.LogRecord) -> str:
        from ingestor.read.names import shown

        record.message = shown(record.message)
        return super().formatMessage(record)


class _ProgressLine:
    """Whether a progress line is drawn on stderr without its newline yet (see make_progress_printer)."""

    open = False


class _EndProgressLine(logging.Filter):
    """Start each log line on a line of its own: clear an unfinished progress line first.

    The bar is drawn again by its next update, below the log line.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self.stream = stream

    def filter(self, record: logging.LogRecord) -> bool:
        if _ProgressLine.open:
            _ProgressLine.open = False
            self.stream.write("\r\x1b[K" if self.stream.isatty() else "\n")
        return True


def configure_logging(level: str, verbose: bool) -> None:
    """Log JSON to stderr when it is not a terminal, plain lines otherwise."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_EndProgressLine(sys.stderr))
    if sys.stderr.isatty():
        handler.setFormatter(
            MaskingFormatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")
        )
    else:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if verbose else level)
    for noisy in (
        "httpx",
        "httpx2",
        "openai",
        "sentence_transformers",
        "numba",
        "urllib3",
        "filelock",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class Ctx:
    """What a command needs from the group: its settings, built once on first use."""

    def __init__(
        self,
        verbose: bool,
        env_file: Path | None = None,
        state_dir: str | None = None,
        tree: str | None = None,
    ) -> None:
        self.verbose = verbose
        self.env_file = env_file
        self.state_dir = state_dir
        self.tree = tree
        self._creating = False
        self._settings: Settings | None = None
        self.home: TreeHome | None = None

    @property
    def settings(self) -> Settings:
        """The command's Settings (first use: built, logging configured; errors: one line)."""
        return self.settings_for(creating=False)

    def settings_for(self, *, creating: bool) -> Settings:
        """The command's Settings; ``creating``: the command may create its tree (``build``,
        ``watch``), so an unnamed tree is ``default`` even beside other trees.

        Raises:
            RuntimeError: the settings were read without ``creating`` before a command that
                creates its tree asked for them (its tree could differ: a bug, said at once).
        """
        if self._settings is not None and creating and not self._creating:
            raise RuntimeError(
                "the settings were read before the command said it may create its tree"
            )
        if self._settings is None:
            self._creating = creating
            self._settings, self.home = load_settings(self, creating=creating)
            configure_logging(self._settings.log_level, self.verbose)
            from ingestor.cluster.numba_cache import use_state_dir_cache

            use_state_dir_cache(self._settings.state_dir, create=creating)
            if self.home.origin == "local":
                log.info(
                    "using the state dir %s found in the current directory", self.home.state_dir
                )
            else:
                log.debug("tree %r in %s", self.home.tree, self.home.state_dir)
        return self._settings


def load_settings(ctx: Ctx, *, creating: bool = False) -> tuple[Settings, TreeHome]:
    """Build Settings from their sources (ingestor.cli.settings_files); errors as one line."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from ingestor.cli.config_errors import describe_settings_error, describe_validation_error
    from ingestor.cli.home import TreeNameError
    from ingestor.cli.settings_files import build_settings, ignored_local_dotenv
    from ingestor.errors import IngestError

    if (dotenv := ignored_local_dotenv()) is not None:
        click.echo(
            f"note: {dotenv} in the current directory is not read (a shared folder's .env could "
            f"redirect adrap); use `adrap --env-file {dotenv} ...` or move it to the user's "
            "adrap.env (see `adrap trees`)",
            err=True,
        )
    try:
        return build_settings(ctx.env_file, ctx.state_dir, ctx.tree, creating=creating)
    except (IngestError, TreeNameError) as exc:
        raise click.ClickException(str(exc)) from exc
    except ValidationError as exc:
        raise click.ClickException(describe_validation_error(exc)) from exc
    except SettingsError as exc:  # a whole section given as a value that is not JSON
        raise click.ClickException(describe_settings_error(exc)) from exc


def run(ctx: Ctx, fn: Callable[[], T]) -> T:
    """Run a command body; domain errors become one line and exit 1 (tracebacks under -v)."""
    try:
        return fn()
    except click.ClickException:
        raise
    except PermissionError as exc:  # another account's tree: say whose, and the way in
        if ctx.verbose:
            log.exception("failed")
        raise click.ClickException(_not_yours(exc, ctx._settings)) from exc
    except Exception as exc:
        if not _domain_error(exc):
            raise
        if ctx.verbose:
            log.exception("failed")
        raise click.ClickException(_mask(str(exc))) from exc


def _not_yours(exc: PermissionError, settings: Settings | None) -> str:
    """The one line for a file this account may not use: whose it is and what to do instead
    (a file of the tree's state dir: its writer's alone; the daemon's doors serve the others)."""
    from ingestor.tree.changelog import owner_of

    path = Path(str(exc.filename)) if exc.filename else None
    folders = [] if path is None else [path, *path.parents]  # the nearest one this account sees
    name = next((o for f in folders if (o := owner_of(str(f.parent), f.name))), None)
    owner = f" (it belongs to the account {name!r})" if name else ""
    state = settings.state_dir.resolve() if settings is not None else None
    if path is None or state is None or not path.resolve().is_relative_to(state):
        return (
            f"permission denied: {exc.filename or exc}{owner}; run the command as an account "
            "that may use it, or give this one access to it"
        )
    return (
        f"permission denied: {exc.filename}{owner}; a tree's state dir is its writer's "
        "alone: run this command as that account, or ask its running daemon (`adrap query`, "
        "`adrap ask`, `adrap status` reach it over its socket as you)"
    )


def _domain_error(exc: Exception) -> bool:
    """Whether ``exc`` is one of ours (a one-line message), without loading numpy to find out."""
    from ingestor.errors import IngestError

    if isinstance(exc, IngestError | ValueError):
        return True
    from models_store import ModelStoreError
    from retriever import RetrieverError

    return isinstance(exc, RetrieverError | ModelStoreError)


def _remember(click_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Store a command's ``--tree`` / ``--state-dir`` in the Ctx before its settings are built."""
    if value is not None:
        obj = click_ctx.find_object(Ctx)
        if obj is not None:
            setattr(obj, str(param.name), str(value))
    return value


TREE_HELP = "The tree (default: ADRAP_TREE, else the only tree, else 'default'); see `adrap trees`."
STATE_DIR_HELP = "The tree's state dir (default: ADRAP_STATE_DIR, ./.adrap, else the tree's home)."


def tree_options() -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Add ``--tree`` and ``--state-dir`` to a command (the group's own options work too)."""

    def decorate(f: Callable[..., T]) -> Callable[..., T]:
        f = click.option(
            "--state-dir", default=None, expose_value=False, callback=_remember, help=STATE_DIR_HELP
        )(f)
        f = click.option(
            "--tree", default=None, expose_value=False, callback=_remember, help=TREE_HELP
        )(f)
        return f

    return decorate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adrap", message="adrap %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Debug logs and tracebacks.")
@click.option(
    "--env-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also read settings from this file (or ADRAP_ENV_FILE), above the state dir's and the "
    "user's adrap.env.",
)
@click.option("--tree", default=None, help=TREE_HELP)
@click.option("--state-dir", default=None, help=STATE_DIR_HELP)
@click.pass_context
def main(
    click_ctx: click.Context,
    verbose: bool,
    env_file: Path | None,
    tree: str | None,
    state_dir: str | None,
) -> None:
    """adrap: a folder kept as a RAPTOR tree in Qdrant.

    Trees live in ~/.local/share/adrap/<tree> ($XDG_DATA_HOME), so any directory finds them;
    settings come from ADRAP_* variables and adrap.env files (docs/cli.md).

    \b
    Example:
      adrap build examples/sample && adrap query "Why did the fox call the grapes sour?"
    """
    # A fault in native code (SIGBUS: a write into a mapped file on a full disk; SIGSEGV) says
    # where it happened on stderr, instead of the bare exit status it gives otherwise.
    if not faulthandler.is_enabled() and sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):  # a stderr without a descriptor
            faulthandler.enable(sys.__stderr__)
    click_ctx.obj = Ctx(verbose, env_file, state_dir, tree)


def make_progress_printer(enabled: bool) -> Callable[[str, int, int], None]:
    """Return a progress callback drawing one updating line per stage on stderr."""
    import sys

    last: dict[str, float] = {}

    def show(stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        final = total and done >= total
        redraw = not _ProgressLine.open  # a log line ended it: draw it again at once
        if not enabled or (not final and not redraw and now - last.get(stage, 0.0) < 0.2):
            return
        last[stage] = now
        if total:
            width = 30
            filled = int(width * done / total)
            bar = "#" * filled + "." * (width - filled)
            line = f"\r{stage:<16} [{bar}] {done}/{total}"
        else:
            line = f"\r{stage:<16} {done}"
        sys.stderr.write(line + ("\n" if final else ""))
        sys.stderr.flush()
        _ProgressLine.open = not final

    return show
