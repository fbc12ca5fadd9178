"""Build the Settings of one command from its sources, in a documented order of precedence.

Highest first:

1. ``--tree`` / ``--state-dir`` options;
2. ``ADRAP_*`` environment variables;
3. the file named by ``--env-file`` / ``ADRAP_ENV_FILE``;
4. the state dir's ``adrap.env`` (and its ``.env``, the name it had before);
5. the user's ``$XDG_CONFIG_HOME/adrap/adrap.env`` (``~/.config/adrap/adrap.env``);
6. the defaults.

``./.env`` is not read: started inside a shared folder, a collaborator's ``.env`` could send
document text to another endpoint (``ADRAP_SUMMARY__OPENAI__BASE_URL``). When one holds
``ADRAP_`` lines, a note says so and how to use it (``--env-file .env``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ingestor.cli.home import SETTINGS_FILE, TreeHome, locate, user_settings_file
from ingestor.config import ENV_FILE_VARIABLE, Settings, explicit_env_file
from ingestor.errors import ConfigError

#: What a state dir's file may not set: where the state dir is (it is read from there).
_NOT_IN_STATE_FILE = "ADRAP_STATE_DIR"
#: The name a state dir's settings file had before ``adrap.env`` (still read, below it).
LEGACY_STATE_FILE = ".env"


def settings_files(home: TreeHome, explicit: Path | None) -> list[Path]:
    """Return the settings files that exist, lowest precedence first (pydantic-settings order)."""
    candidates = [
        user_settings_file(),
        home.state_dir / LEGACY_STATE_FILE,
        home.state_dir / SETTINGS_FILE,
        explicit,
    ]
    return [p for p in candidates if p is not None and _is_file(p)]


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file this user may see: a folder it may not enter (another user's
    config, a share's state dir) holds no settings for it, rather than stopping the command."""
    try:
        return path.is_file()
    except OSError:
        return False


def build_settings(
    env_file: Path | None,
    state_dir: str | None,
    tree: str | None,
    *,
    creating: bool = False,
) -> tuple[Settings, TreeHome]:
    """Return the command's Settings and where its tree lives.

    Args:
        env_file: ``--env-file`` (None: ``$ADRAP_ENV_FILE``, else no explicit file).
        state_dir: ``--state-dir`` (None: from the environment or a file, else the tree's home).
        tree: ``--tree`` (None: likewise).
        creating: the command may create the tree (build, watch).

    Raises:
        ConfigError: a named env file is missing; a state dir's file sets ADRAP_STATE_DIR.
        TreeNameError: no tree named and several exist.
        ValidationError, SettingsError: a bad value (the caller words them).
    """
    from dotenv import dotenv_values

    explicit = explicit_env_file(env_file)
    early = [p for p in (user_settings_file(), explicit) if p is not None and _is_file(p)]
    early_values = [dotenv_values(p) for p in reversed(early)]  # highest first

    def named(variable: str, option: str | None) -> str | None:
        if option:
            return option
        if os.environ.get(variable):
            return os.environ[variable]
        return next((str(v) for values in early_values if (v := values.get(variable))), None)

    home = locate(named("ADRAP_STATE_DIR", state_dir), named("ADRAP_TREE", tree), creating=creating)
    files = settings_files(home, explicit)
    tree_name = home.tree
    for path in files:
        if path in early:
            continue
        values = dotenv_values(path)
        if values.get(_NOT_IN_STATE_FILE):
            raise ConfigError(
                f"{path} sets {_NOT_IN_STATE_FILE}={values[_NOT_IN_STATE_FILE]!r}, but it is read "
                f"from that state dir; remove the line (set it in the environment, --state-dir or "
                f"{user_settings_file()} instead)"
            )
        if named("ADRAP_TREE", tree) is None and values.get("ADRAP_TREE"):
            tree_name = str(values["ADRAP_TREE"])  # the name of the tree this state dir holds
    init = {"state_dir": home.state_dir, "tree": tree_name}
    secrets = Path("/run/secrets")
    if secrets.is_dir():
        settings = Settings(_env_file=files, _secrets_dir=secrets, **init)  # type: ignore[call-arg,arg-type]
    else:
        settings = Settings(_env_file=files, **init)  # type: ignore[call-arg,arg-type]
    return settings, TreeHome(home.state_dir, tree_name, home.origin)


def ignored_local_dotenv() -> Path | None:
    """Return ``./.env`` when it holds ``ADRAP_`` settings, which are not read (see the module)."""
    path = Path(".env")
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return None
    explicit = os.environ.get(ENV_FILE_VARIABLE)
    if explicit and Path(explicit).resolve() == path.resolve():
        return None
    return path if "ADRAP_" in text else None
