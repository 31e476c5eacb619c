"""In-context optimisers: linear transformers, Memformers (CGD-like, LFOM) and classical LFOMs (seeds 000/001)."""
