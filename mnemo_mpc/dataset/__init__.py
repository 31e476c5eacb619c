"""Offline dataset of SQP solutions gathered in closed loop (seed 002 §5.2): store, collector, loader, stats."""
