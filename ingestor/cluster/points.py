"""The name trees stored by earlier versions give two classes of the online GMM in their pickles
(a layer's cluster id counter; a model's point buffer, in models pickled whole): importable here
so that those trees still open. Both are :mod:`ingestor.cluster.online_gmm`'s."""

from ingestor.cluster.online_gmm import IdCounter, PointBuffer

__all__ = ["IdCounter", "PointBuffer"]
