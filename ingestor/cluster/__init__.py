"""embeddings → clusters: GMM + BIC search, UMAP, two-step clustering, the online GMM, the adaptive layer."""
