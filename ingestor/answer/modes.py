"""Names of the retrieval modes and postQFRAP's base retrievers (light: the CLI imports them)."""

from typing import Final

#: ``adrap query --mode``: one collapsed search, top-k traversal, or postQFRAP (Algorithm 3).
MODES: Final = ("collapsed", "traversal", "postqfrap")
#: ``--base``: which retriever gives postQFRAP its k0 nodes.
BASES: Final = ("leaves", "collapsed", "traversal")
