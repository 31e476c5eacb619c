"""Associative-memory models for the theory studies (seed 002 §4, seed 004)."""
