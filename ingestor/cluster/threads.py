"""One thread for the small matrix work of clustering and tree updates.

The matrices of a BIC search (n x 10) and of an adRAP update (a few points through a UMAP
transform and an online GMM, groups of hundreds) are far too small to share between threads.
With OpenBLAS's default of one thread per core, every call woke a worker that then spun waiting
for the next one: on the 2-core machines, a one-document add at 265k leaves spent 0.30 s of CPU
for 0.16 s of work on its own thread, the rest burnt by the spinning worker while the main thread
went on (qdrant-edge's flush, SQLite). Limiting BLAS to one thread costs no wall time there.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Any, Literal

from threadpoolctl import ThreadpoolController


def one_thread(user_api: Literal["blas", "openmp"] | None = None) -> AbstractContextManager[Any]:
    """A block in which ``user_api``'s thread pools (every pool if None) run one thread.

    Only BLAS for code that may also run the embedding model: torch's OpenMP pool is worth its
    threads.
    """
    limit: AbstractContextManager[Any] = _controller().limit(limits=1, user_api=user_api)
    return limit


@functools.cache
def _controller() -> ThreadpoolController:
    # Building a controller scans the loaded libraries (3 ms); threadpool_limits() does it per call.
    return ThreadpoolController()
