"""The trusted proxy's header names one account, by name: a number was taken as a uid (a proxy
user called "0" read as root, the tree's owner), root itself was the owner, and a header sent
twice or holding a list was read as whichever came first or last. Each of those is anonymous now;
the one account the proxy vouched for is its user."""

from __future__ import annotations

import pwd
from typing import Any

import pytest

from ingestor.read.access_classes import ANONYMOUS
from ingestor.service.identity import Callers

HEADER = "X-Forwarded-User"
PROXY = "127.0.0.1"


def _caller(values: list[str], client: str = PROXY, owner: int | None = None) -> Any:
    callers = Callers(proxy_header=HEADER, proxy_addresses=[PROXY], owner_uid=owner)
    raw = [(HEADER.lower().encode(), v.encode()) for v in values]
    scope = {"type": "http", "client": (client, 40000), "headers": raw}
    headers = {k.decode(): v.decode() for k, v in raw}
    return callers.identify(scope, headers)


def test_the_proxy_names_one_account_by_name() -> None:
    nobody = pwd.getpwnam("nobody")
    who = _caller(["nobody"])
    assert who.uid == nobody.pw_uid
    assert not who.unrestricted
    assert _caller(["nobody"], client="10.1.2.3") == ANONYMOUS, "not the pinned proxy"
    assert _caller(["nobody"], owner=nobody.pw_uid) == ANONYMOUS, "the daemon's own account"


@pytest.mark.parametrize(
    "values",
    [
        ["0"],
        [str(pwd.getpwnam("nobody").pw_uid)],
        ["root"],
        ["nobody", "root"],
        ["root", "nobody"],
        ["nobody, root"],
        ["no-such-account-here"],
        [""],
    ],
    ids=["uid-0", "a-uid", "root", "twice", "twice-reversed", "a-list", "unknown", "empty"],
)
def test_what_the_proxy_cannot_have_vouched_for_is_anonymous(values: list[str]) -> None:
    assert _caller(values) == ANONYMOUS
