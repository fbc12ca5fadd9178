"""The dashboard: a web page of the living tree, served by the daemon and exported by ``adrap explore``.

- :mod:`~ingestor.service.dashboard.view`: paged, read-only views of a tree in the node store
  (layers, one page of a layer, a node, a node's children); the JSON both the routes and the export
  are made of.
- :mod:`~ingestor.service.dashboard.routes`: the ``/dashboard`` page and its JSON endpoints.
- :mod:`~ingestor.service.dashboard.page`: the page itself, one HTML document with its CSS and
  JavaScript inlined (``static/``: the script's ES modules put in as one script), optionally
  carrying the tree as an embedded JSON blob.
- :mod:`~ingestor.service.dashboard.export`: that blob for ``adrap explore``.
- :mod:`~ingestor.service.dashboard.picture`: the picture of the tree: every node laid out as an
  icicle (sizes, colours by folder, the last update), as compact arrays.
- :mod:`~ingestor.service.dashboard.pictures`: the 2-D (PCA) map of a layer, and the picture and
  maps cached per tree version.
"""
