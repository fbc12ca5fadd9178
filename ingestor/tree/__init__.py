"""clusters → tree: the tree state, Algorithm 1 (build), adRAP updates, persistence of the state."""
