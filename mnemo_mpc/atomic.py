"""Atomic writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to a temporary file in the same directory, fsync it, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; results are meant to be shared like any file the user writes.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, indent: int = 2) -> Path:
    """JSON with NaN/inf rejected (`allow_nan=False`): a result file must be valid JSON for any reader."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False, default=_jsonable) + "\n")


def _jsonable(obj: Any) -> Any:
    # numpy scalars/arrays and Paths show up in results; convert instead of failing mid-write.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
