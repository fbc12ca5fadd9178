"""The Qdrant facade's readers: Qdrant's REST read API over the tree's store, each read with the
caller's reader filter (who may read what).

- :mod:`~retriever.facade.edge`: over the embedded store (qdrant-edge), translated to engine calls,
  with :mod:`~retriever.facade.filters` (REST filters), :mod:`~retriever.facade.query` (the Query
  API's fusion, sparse and MMR queries) and :mod:`~retriever.facade.io` (requests and replies);
- :mod:`~retriever.facade.server`: over a Qdrant server's collection, sent on with the filter.

The HTTP routes that serve them are the daemon's (:mod:`ingestor.service.qdrant_rest`).
"""

from retriever.facade.edge import EdgeRestReader, RestSearchRequest
from retriever.facade.server import ServerRestReader

__all__ = ["EdgeRestReader", "RestSearchRequest", "ServerRestReader"]
