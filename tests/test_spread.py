"""The suite's order under pytest-xdist (``tests/conftest.py``'s ``spread``): the integration
modules dealt over the workers' first runs, each kept whole and ahead of unit tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.conftest import first_runs, spread


@dataclass(frozen=True)
class FakeItem:
    nodeid: str
    integration: bool

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "integration" and self.integration else None


def items(heavy: list[int], light: list[int]) -> list[pytest.Item]:
    """Modules of the given sizes, integration ones first (file order), as xdist collects."""
    out = [
        FakeItem(f"tests/integration/test_h{m}.py::t{j}", True)
        for m, n in enumerate(heavy)
        for j in range(n)
    ]
    out += [
        FakeItem(f"tests/unit/test_u{m}.py::t{j}", False)
        for m, n in enumerate(light)
        for j in range(n)
    ]
    return cast(list[pytest.Item], out)


def runs(order: list[Any], workers: int) -> list[list[Any]]:
    """The contiguous runs worksteal first hands the workers."""
    out, start = [], 0
    for size in first_runs(len(order), workers):
        out.append(order[start : start + size])
        start += size
    return out


def module(item: Any) -> str:
    return str(item.nodeid.split("::")[0])


def test_every_run_starts_with_integration_modules_kept_whole() -> None:
    collected = items([6, 5, 4, 3, 2, 1], [9] * 10)
    order = spread(collected, 4)
    assert sorted(i.nodeid for i in order) == sorted(i.nodeid for i in collected)
    parts = runs(order, 4)
    for part in parts:
        heavy = [i.integration for i in part]
        assert any(heavy), "every worker starts on integration tests"
        assert heavy == sorted(heavy, reverse=True), "integration tests before unit tests"
    owners = {module(i): n for n, part in enumerate(parts) for i in part if i.integration}
    for n, part in enumerate(parts):
        assert all(owners[module(i)] == n for i in part if i.integration), "a module kept whole"


def test_the_heaviest_modules_go_to_different_workers() -> None:
    parts = runs(spread(items([8, 8, 8, 8], [50]), 4), 4)
    assert [len({module(i) for i in p if i.integration}) for p in parts] == [1, 1, 1, 1]


def test_heavy_modules_that_cannot_fit_leave_the_order_alone() -> None:
    collected = items([12], [1])
    assert spread(collected, 4) == collected
