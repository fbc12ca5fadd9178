"""The ``adrap`` command group: settings and logging are configured here, once per process."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from pydantic_settings import SettingsError

from ingestor.cli.config_errors import describe_settings_error, describe_validation_error
from ingestor.config import ENV_FILE_VARIABLE, Settings, dotenv_path, mask_credentials
from ingestor.errors import IngestError
from models_store import ModelStoreError
from retriever import RetrieverError

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        return mask_credentials(json.dumps(out, ensure_ascii=False))


class MaskingFormatter(logging.Formatter):
    """Plain log lines with credentials in URLs (``https://user:pass@host``) masked."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_credentials(super().format(record))


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


def load_settings(env_file: Path | None = None) -> Settings:
    """Build Settings exactly once: env, a .env file and /run/secrets when that directory exists.

    The .env file is ``env_file``, ``$ADRAP_ENV_FILE`` or ``<state_dir>/.env`` (never ``./.env``).
    """
    dotenv = dotenv_path(env_file)
    secrets = Path("/run/secrets")
    if secrets.is_dir():
        return Settings(_env_file=dotenv, _secrets_dir=secrets)  # type: ignore[call-arg]
    return Settings(_env_file=dotenv)  # type: ignore[call-arg]


class Ctx:
    def __init__(self, settings: Settings, verbose: bool) -> None:
        self.settings = settings
        self.verbose = verbose


def run(ctx: Ctx, fn: Callable[[], T]) -> T:
    """Run a command body; domain errors become one line and exit 1 (tracebacks under -v)."""
    try:
        return fn()
    except (IngestError, RetrieverError, ModelStoreError, ValueError) as exc:
        if ctx.verbose:
            log.exception("failed")
        raise click.ClickException(mask_credentials(str(exc))) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adrap", message="adrap %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="Debug logs and tracebacks.")
@click.option(
    "--env-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=ENV_FILE_VARIABLE,
    help="Read settings from this .env file (default: <state dir>/.env; never ./.env).",
)
@click.pass_context
def main(click_ctx: click.Context, verbose: bool, env_file: Path | None) -> None:
    """adrap: a folder kept as a RAPTOR tree in Qdrant.

    \b
    Example:
      adrap build examples/sample && adrap query "Why did the fox call the grapes sour?"
    """
    try:
        settings = load_settings(env_file)
    except IngestError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValidationError as exc:
        raise click.ClickException(describe_validation_error(exc)) from exc
    except SettingsError as exc:  # a whole section given as a value that is not JSON
        raise click.ClickException(describe_settings_error(exc)) from exc
    configure_logging(settings.log_level, verbose)
    click_ctx.obj = Ctx(settings, verbose)


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
