"""Benchmarks behind `mnemo-mpc bench <name>`: each module exposes a Config dataclass and `run(config) -> dict`."""
