"""The build's overlapping stages (ingestor/pipeline/overlap.py): order kept, queues bounded,
errors raised in the caller, a producer stopped when its consumer stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ingestor.pipeline.overlap import Behind, ahead


def test_ahead_yields_in_order_and_runs_at_most_depth_ahead() -> None:
    made: list[int] = []

    def produce() -> Iterator[int]:
        for i in range(6):
            made.append(i)
            yield i

    items = ahead(produce(), what="test items", depth=2)
    assert next(items) == 0
    time.sleep(0.3)  # the producer fills the queue, then waits
    assert len(made) <= 4  # the item handed out, two queued, one waiting to be put
    assert list(items) == [1, 2, 3, 4, 5]


def test_ahead_raises_the_producers_error_in_the_consumer_after_its_items() -> None:
    def produce() -> Iterator[int]:
        yield 1
        raise ValueError("bad batch 2")

    got: list[int] = []

    def consume() -> None:
        for item in ahead(produce(), what="store's next points"):
            got.append(item)

    with pytest.raises(ValueError, match="bad batch 2") as caught:
        consume()
    assert got == [1]
    assert "while preparing the store's next points on its thread" in caught.value.__notes__


def test_a_consumer_that_stops_stops_the_producer() -> None:
    made: list[int] = []

    def produce() -> Iterator[int]:
        for i in range(1000):
            made.append(i)
            yield i

    before = threading.active_count()
    items = ahead(produce(), what="test items", depth=1)
    assert next(items) == 0
    items.close()  # the consumer stops early (an error, a break)
    assert threading.active_count() == before
    assert len(made) <= 3


def test_behind_runs_calls_in_order_and_wait_returns_after_the_last() -> None:
    done: list[int] = []

    def slow(i: int) -> None:
        time.sleep(0.01)
        done.append(i)

    with Behind("test writes", depth=1) as writes:
        for i in range(5):
            writes.submit(slow, i)
    assert done == [0, 1, 2, 3, 4]


def test_behind_raises_the_first_error_and_runs_nothing_after_it() -> None:
    done: list[int] = []

    def write(i: int) -> None:
        if i == 1:
            raise OSError("disk full")
        done.append(i)

    writes = Behind("checkpoint writes", depth=4)
    writes.submit(write, 0)
    writes.submit(write, 1)

    def more() -> None:
        for i in range(2, 50):
            writes.submit(write, i)
            time.sleep(0.01)
        writes.wait()

    with pytest.raises(OSError, match="disk full") as caught:
        more()
    assert done == [0]
    assert "while running the checkpoint writes on its thread" in caught.value.__notes__
    writes.wait()  # raised once; the thread is gone


def test_an_error_in_the_caller_waits_for_the_writes_and_keeps_the_callers_error() -> None:
    done: list[int] = []

    def build() -> None:
        with Behind("test writes") as writes:
            writes.submit(done.append, 1)
            raise KeyError("the build's own error")

    with pytest.raises(KeyError):
        build()
    assert done == [1]
