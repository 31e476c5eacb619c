"""Mnemosyne's compact associative memory (seed 002 §3): random features and linear attention."""
