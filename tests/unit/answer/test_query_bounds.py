"""The largest budget a query may ask for is the setting's (issue 54): docs/cli.md and
deploy/.env.example said `max_tokens` may go up to ADRAP_WATCH__HTTP_MAX_TOKENS (32,000), but
every request above 16,000 was refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestor.cli.factories import make_query_service
from ingestor.config import Settings
from testkit.fakes import HashEmbedder


def _service(tmp_path: Path, **watch: int):  # type: ignore[no-untyped-def]
    s = Settings(_env_file=None, state_dir=tmp_path, watch=watch)  # type: ignore[call-arg]
    return make_query_service(s, None, HashEmbedder(dim=16))  # type: ignore[arg-type]


def test_the_default_setting_lets_a_query_ask_for_up_to_32000_tokens(tmp_path: Path) -> None:
    assert _service(tmp_path).parse({"q": "x", "max_tokens": "32000"}).max_tokens == 32_000
    with pytest.raises(ValueError, match="between 1 and 32000"):
        _service(tmp_path).parse({"q": "x", "max_tokens": "32001"})


def test_the_setting_raises_and_lowers_the_bound(tmp_path: Path) -> None:
    high = _service(tmp_path, http_max_tokens=60_000, http_max_top_k=300)
    assert high.parse({"q": "x", "max_tokens": "60000", "top_k": "300"}).top_k == 300
    low = _service(tmp_path, http_max_tokens=1_000)
    with pytest.raises(ValueError, match="between 1 and 1000"):
        low.parse({"q": "x", "max_tokens": "1001"})
