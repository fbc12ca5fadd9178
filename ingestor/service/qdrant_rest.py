"""A read-only subset of Qdrant's REST API on the daemon's HTTP port, over the embedded store.

Why: the embedded shard can be opened by one process only; while ``adrap watch`` owns it, this is
how any Qdrant client reads the tree. Served at Qdrant's own paths, so
``QdrantClient(url="http://127.0.0.1:8765")``, the JS client and ``curl .../points/query`` work
unchanged. The translation to the engine is :class:`retriever.EdgeRestReader`; requests are
parsed and replies shaped with qdrant-client's REST models.

Routes (``{c}`` = ``/collections/{name}``, the name being ``ADRAP_QDRANT__COLLECTION``):

- ``GET /``: ``{"title": "qdrant - vector search engine", "version": ...}`` (:func:`api_version`,
  so clients' version checks pass); a browser (``Accept`` preferring ``text/html``) is
  redirected (307) to ``/dashboard``.
- ``GET /collections``, ``GET {c}``, ``GET {c}/exists``, ``GET /aliases``, ``GET {c}/aliases``.
- ``POST {c}/points/query`` (and ``/query/batch``), ``POST {c}/points/search`` (and
  ``/search/batch``), ``POST {c}/points/scroll``, ``POST {c}/points`` (retrieve),
  ``GET {c}/points/{id}``, ``POST {c}/points/count``, ``POST {c}/facet``.
- Any write (``PUT``/``POST``/``PATCH``/``DELETE`` on another path under ``/collections``,
  ``/aliases``, ``/snapshots`` or ``/cluster``) gets 403 saying that adrap owns the collection and
  how to change the tree; Qdrant's other read endpoints (recommend, discover, groups, matrix)
  get 501.

Replies use Qdrant's envelope ``{"result": ..., "status": "ok", "time": seconds}``; errors are
``{"status": {"error": "..."}, "time": seconds}``: 400 invalid body, 404 unknown collection or
point, 503 while the daemon reconciles (as ``/query``), 504 after ``query_timeout``.

Auth: the daemon's bearer token, which :class:`~ingestor.service.http.GuardMiddleware` also takes
as ``api-key: <token>`` (what Qdrant clients send for ``api_key=``/``apiKey``); a named token's
api-key is its principal.

Who may read what (issue 53): every read runs as the request's caller (``caller_of``): the
reader filter of the classes it may read (``readable``) is ANDed with whatever filter the client
sent, in search, query (prefetches and a query by point id too), scroll, count, facet and
retrieve; a point it may not read is not found (404 for ``GET {c}/points/{id}``, left out of
``POST {c}/points``); the collection's counts are of what it may read. The meta point stays readable
to everyone (its model name is how a client embeds queries). Recommend and discover are not
served (501), so they need no filter.

Concurrency: like ``/query``, each request runs in a worker thread under ``query_timeout`` (past
it, the request takes no further store lock), and each engine call holds only the store's short
lock (``LockedStore``), never the writer's.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ValidationError
from qdrant_client.http import models
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ingestor.service.http import HttpLimits, caller_of, run_bounded
from ingestor.service.readable import Readable, owner_only
from retriever import EdgeRestReader, RestSearchRequest, RetrieverError

if TYPE_CHECKING:
    from retriever.facade.server import ServerRestReader

log = logging.getLogger(__name__)

#: Qdrant's title for ``GET /``; clients and dashboards look for it.
TITLE: Final = "qdrant - vector search engine"
#: The access classes a request's caller may read (None: every one).
Classes = tuple[str, ...] | None

#: Methods that change something; refused with 403.
WRITES: Final = ["PUT", "POST", "PATCH", "DELETE"]
#: Qdrant's read-only ``POST`` endpoints this facade does not serve (501, not 403).
UNSERVED_READS: Final = (
    "/points/recommend{rest:path}",
    "/points/discover{rest:path}",
    "/points/search/groups",
    "/points/search/matrix/{rest:path}",
    "/points/query/groups",
)


def api_version() -> str:
    """Return the Qdrant version reported at ``/``: one minor below the installed qdrant-client.

    Qdrant's clients (Python, JS) warn unless the server's major matches theirs and its minor is
    within one of theirs. The facade speaks the subset of the REST API that qdrant-client's models
    parse, which servers one minor older answer the same way; reporting ``minor - 1`` keeps the
    clients of the three minors around it quiet (qdrant-client 1.20 -> ``1.19.0``: JS and Python
    clients 1.18 to 1.20), where the client's own version left the JS client one minor behind it
    warning ("Client version 1.18.0 is incompatible with server version 1.20.0").
    """
    major, minor, *_ = importlib.metadata.version("qdrant-client").split(".")
    return f"{major}.{max(int(minor) - 1, 0)}.0"


def prefers_html(accept: str) -> bool:
    """Return True if an ``Accept`` header ranks ``text/html`` above JSON (a browser)."""
    html = json = 0.0
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        media = media.lower()
        if media == "text/html":
            html = max(html, q)
        elif media in ("application/json", "application/*", "*/*"):
            json = max(json, q)
    return html > json


def qdrant_routes(
    reader: EdgeRestReader | ServerRestReader,
    *,
    root: Path,
    limits: HttpLimits,
    ready: Callable[[], bool],
    readable: Readable = owner_only,
) -> list[BaseRoute]:
    """Return the facade's routes, to mount beside the daemon's (``build_app``).

    Args:
        reader: answers the requests from the embedded store (or a Qdrant server's collection).
        root: the watched folder (named in the 403 of a write).
        limits: ``query_timeout`` bounds every request.
        ready: False while the daemon reconciles (503, as ``/query``).
        readable: the access classes a caller may read (the daemon's class registry); by
            default the owner reads everything and anyone else nothing.
    """
    name = reader.collection
    version = api_version()
    owned = (
        f"adrap owns the collection {name!r} and serves it read-only here: its points are the "
        f"RAPTOR tree of {root}, written only by `adrap watch`. To change the tree, add, edit or "
        f"delete files in {root} (the daemon applies them within seconds); to write points of "
        "your own, use a collection of your own on a Qdrant server"
    )

    def missing() -> LookupError:
        return LookupError(f"Not found: Collection `{name}` doesn't exist!")

    def answer(
        fn: Callable[[Any, Classes], Any],
        body: type[BaseModel] | None = None,
        *,
        collection: bool = True,
    ) -> Callable[[Request], Any]:
        async def route(request: Request) -> Response:
            t0 = time.perf_counter()
            if not ready():
                return _error(503, "adrap is reconciling the store with the folder; retry", t0)
            asked = request.path_params.get("collection")
            if collection and asked != name:
                return _error(404, f"Not found: Collection `{asked}` doesn't exist!", t0)
            arg: Any = dict(request.path_params)
            if body is not None:
                try:
                    arg = body.model_validate_json(await request.body() or b"{}")
                except ValidationError as exc:
                    return _error(400, f"Format error in JSON body: {_first_error(exc)}", t0)
                huge = _out_of_range(arg.model_dump(mode="json"))
                if huge is not None:
                    return _error(400, f"Format error in JSON body: {huge}", t0)

            caller = caller_of(request.scope)

            def run() -> Any:
                if collection and not reader.exists():
                    raise missing()  # nothing built yet
                return fn(arg, readable(caller))  # the classes as of now (a chmod applies)

            try:
                out = await run_bounded(run, limits.query_timeout)
            except TimeoutError:  # the work stops at its next store call (deadline.py)
                return _error(504, f"the request took longer than {limits.query_timeout:.0f} s", t0)
            except LookupError as exc:
                return _error(404, str(exc.args[0]), t0)
            except ValueError as exc:
                return _error(400, f"Wrong input: {exc}", t0)
            except RetrieverError as exc:
                log.warning(
                    "Qdrant facade: %s %s failed: %s", request.method, request.url.path, exc
                )
                return _error(500, f"Service internal error: {exc}", t0)
            return JSONResponse({"result": _dump(out), "status": "ok", "time": _since(t0)})

        return route

    async def root_info(request: Request) -> Response:
        if prefers_html(request.headers.get("accept", "")):
            return RedirectResponse("/dashboard", status_code=307)
        return JSONResponse(
            models.VersionInfo(title=TITLE, version=version).model_dump(mode="json")
        )

    def collections(_: Any, __: Classes) -> models.CollectionsResponse:
        listed = [models.CollectionDescription(name=name)] if reader.exists() else []
        return models.CollectionsResponse(collections=listed)

    def exists(params: dict[str, str], _: Classes) -> models.CollectionExistence:
        return models.CollectionExistence(exists=params["collection"] == name and reader.exists())

    def point(params: dict[str, str], classes: Classes) -> models.Record:
        raw = params["id"]
        pid: int | str = int(raw) if raw.isdigit() else raw
        if isinstance(pid, int) and pid > MAX_INT:
            raise ValueError(f"Unable to parse point id {raw!r}: an id is at most {MAX_INT}")
        found = reader.retrieve(models.PointRequest(ids=[pid], with_vector=True), classes)
        if not found:  # missing, or not the caller's to read: the same answer
            raise LookupError(f"Not found: No point with id {raw} found")
        return found[0]

    def query_batch(req: models.QueryRequestBatch, classes: Classes) -> list[models.QueryResponse]:
        return [reader.query(q, classes) for q in req.searches]

    def search_batch(req: SearchBatch, classes: Classes) -> list[list[models.ScoredPoint]]:
        return [reader.search(q, classes) for q in req.searches]

    async def refuse(_: Request) -> Response:
        return _error(403, owned, time.perf_counter())

    async def unserved(request: Request) -> Response:
        return _error(
            501,
            f"{request.method} {request.url.path} is a Qdrant read that adrap's facade does not "
            "serve; use points/query (nearest, filter, limit, offset), search, scroll, "
            "retrieve or count",
            time.perf_counter(),
        )

    def no_aliases(_: Any, __: Classes) -> models.CollectionsAliasesResponse:
        return models.CollectionsAliasesResponse(aliases=[])

    c = "/collections/{collection}"
    return [
        Route("/", root_info, methods=["GET"]),
        Route("/collections", answer(collections, collection=False), methods=["GET"]),
        Route("/aliases", answer(no_aliases, collection=False), methods=["GET"]),
        Route(c, answer(lambda _, classes: reader.info(classes)), methods=["GET"]),
        Route(c + "/exists", answer(exists, collection=False), methods=["GET"]),
        Route(c + "/aliases", answer(no_aliases), methods=["GET"]),
        Route(c + "/points/query", answer(reader.query, models.QueryRequest), methods=["POST"]),
        Route(
            c + "/points/query/batch",
            answer(query_batch, models.QueryRequestBatch),
            methods=["POST"],
        ),
        Route(c + "/points/search", answer(reader.search, RestSearchRequest), methods=["POST"]),
        Route(c + "/points/search/batch", answer(search_batch, SearchBatch), methods=["POST"]),
        Route(c + "/points/scroll", answer(reader.scroll, models.ScrollRequest), methods=["POST"]),
        Route(c + "/points/count", answer(reader.count, models.CountRequest), methods=["POST"]),
        Route(c + "/facet", answer(reader.facet, models.FacetRequest), methods=["POST"]),
        Route(c + "/points", answer(reader.retrieve, models.PointRequest), methods=["POST"]),
        Route(c + "/points/{id}", answer(point), methods=["GET"]),
        *(Route(c + path, unserved, methods=["POST"]) for path in UNSERVED_READS),
        *(Route(p + "{rest:path}", refuse, methods=WRITES) for p in WRITE_PREFIXES),
    ]


#: Path prefixes whose writes are refused (Qdrant's collection, alias, snapshot, cluster APIs).
WRITE_PREFIXES: Final = ("/collections", "/aliases", "/snapshots", "/cluster")


class SearchBatch(BaseModel):
    """The body of ``POST {c}/points/search/batch``."""

    searches: list[RestSearchRequest]


#: The largest integer Qdrant takes (a point id is a u64; the engine overflows past it).
MAX_INT: Final = 2**64 - 1
#: The smallest (a payload value is an i64).
MIN_INT: Final = -(2**63)


def _out_of_range(value: Any, where: str = "body") -> str | None:
    """Return where a request body holds an integer Qdrant cannot take, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if MIN_INT <= value <= MAX_INT:
            return None
        return f"{where}: integer {value} is out of range ({MIN_INT} to {MAX_INT})"
    items: Any = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, inner in items:
        found = _out_of_range(inner, f"{where}.{key}")
        if found is not None:
            return found
    return None


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 6)


def _error(code: int, message: str, t0: float) -> JSONResponse:
    return JSONResponse({"status": {"error": message}, "time": _since(t0)}, status_code=code)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "body"
    more = exc.error_count() - 1
    return f"{where}: {err['msg']}" + (f" (and {more} more)" if more else "")


def _dump(out: Any) -> Any:
    if isinstance(out, BaseModel):
        return out.model_dump(mode="json", by_alias=True)
    if isinstance(out, list):
        return [_dump(x) for x in out]
    return out
