"""Bounded, strict reads of files users hand us: map YAML and images, parameter files, bag metadata (issue 13).

- `read_regular_file`: a regular file (a FIFO, device or directory is refused before it is opened; it is opened
  non-blocking and re-checked on the descriptor, so one swapped in between cannot block) of at most `max_bytes`,
  read no further than that cap (a file that grows while read cannot exhaust memory);
- `load_yaml`: that, decoded as UTF-8, parsed by `StrictYamlLoader`: a SafeLoader without aliases (an alias bomb
  expands exponentially; none of our formats needs one), nesting at most `MAX_YAML_DEPTH` deep (no RecursionError)
  and without duplicate keys (YAML calls them an error; PyYAML would silently keep the last);
- `load_json` (issue 26: dataset-store metadata): the same read, then JSON nested at most `MAX_JSON_DEPTH` deep
  (measured on the raw bytes before parsing, so a deep document costs one linear scan, never a RecursionError) and
  numbers within Python's digit limit (a 5000-digit integer is an error, not a ValueError from deep inside).

Model files (`warmstart.runtime`) and map images (`planning.mapio`) go through `read_regular_file` too: every file
a user hands the package is read by this one function.

Every failure is the caller's error class (`InputError` or a subclass such as `MapFormatError`) naming the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mnemo_mpc.errors import InputError

MAX_YAML_DEPTH = 16
# Our JSON documents (zarr metadata, the store manifest) nest at most ~6 deep; 64 leaves room and stays far below
# the interpreter's recursion limit.
MAX_JSON_DEPTH = 64


def show(value: Any, limit: int = 60) -> str:
    """repr() for an error message, bounded: a hostile file's value may be huge, and an int past Python's digit
    limit cannot be formatted at all."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<integer of {value.bit_length()} bits>"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except ValueError:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    lines = str(exc).splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(
    st: os.stat_result, path: Path, max_bytes: int, what: str, error: type[Exception] = InputError, hint: str = ""
) -> None:
    """`st` is a regular file of at most `max_bytes`; `hint` follows the size error (e.g. how to raise the cap)."""
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: {what} must be a regular file, this is {_file_kind(st.st_mode)}")
    if st.st_size > max_bytes:
        raise error(f"{path}: {what} is {st.st_size} bytes, over the {max_bytes}-byte cap{hint}")


def read_regular_file(
    path: str | os.PathLike[str], max_bytes: int, what: str, error: type[Exception] = InputError, hint: str = ""
) -> bytes:
    """All of `path`, which must be a regular file of at most `max_bytes` (see the module docstring). `error` is
    raised with one message argument naming the file; an OSError behind it is its `__cause__` (a caller can tell
    a missing file from an unreadable one)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from exc
    except ValueError as exc:  # a NUL byte or an unencodable character in the path
        raise error(f"{path!r}: cannot read {what} ({exc})") from exc
    check_regular(st, path, max_bytes, what, error, hint)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from exc
    try:
        with os.fdopen(fd, "rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            check_regular(st, path, max_bytes, what, error, hint)
            parts, total = [], 0
            while True:
                chunk = fh.read(min(max_bytes + 1 - total, max(st.st_size + 1 - total, 1 << 16)))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise error(f"{path}: {what} is over the {max_bytes}-byte cap (it grew while read)")
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from exc
    return parts[0] if len(parts) == 1 else b"".join(parts)


class StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, nesting deeper than `MAX_YAML_DEPTH` and duplicate keys."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", mark)
        if self._depth >= MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {show(key_node.value)}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, path: str | os.PathLike[str], what: str, error: type[InputError] = InputError) -> Any:
    """`text` parsed by `StrictYamlLoader`; a parse failure is `error` naming `path`."""
    try:
        return yaml.load(text, Loader=StrictYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error(f"{path}: {what} is not valid YAML ({first_line(exc)})") from exc
    except ValueError as exc:  # int() of a scalar past Python's digit limit, and the like
        raise error(f"{path}: {what} is not valid YAML ({first_line(exc)})") from exc


def load_yaml(path: str | os.PathLike[str], max_bytes: int, what: str, error: type[InputError] = InputError) -> Any:
    """A YAML file read by `read_regular_file`, decoded as UTF-8 and parsed by `StrictYamlLoader`."""
    raw = read_regular_file(path, max_bytes, what, error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from exc
    return parse_yaml(text, path, what, error)


# A JSON string: quotes around anything but a quote or backslash, or an escape (unrolled: linear, no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def json_depth(raw: bytes, block: int = 1 << 20) -> int:
    """The deepest nesting of `raw` JSON (brackets outside strings), in memory bounded by `block` bytes at a time."""
    stripped = _JSON_STRING.sub(b'""', raw)
    depth, deepest = 0, 0
    for start in range(0, len(stripped), block):
        steps = _DEPTH_STEP[np.frombuffer(stripped, np.uint8, min(block, len(stripped) - start), start)]
        running = np.cumsum(steps, dtype=np.int64) + depth
        if running.size:
            deepest = max(deepest, int(running.max()))
            depth = int(running[-1])
    return deepest


def parse_json(
    raw: bytes,
    path: str | os.PathLike[str],
    what: str,
    error: type[Exception] = InputError,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """`raw` as UTF-8 JSON nested at most `max_depth` deep; any failure is `error` naming `path`. NaN and Infinity
    are accepted as Python's json reads them (zarr writes NaN fill values so); callers check their values."""
    depth = json_depth(raw)
    if depth > max_depth:
        raise error(f"{path}: {what} is nested {depth} levels deep, expected at most {max_depth}")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int() past the digit limit; depth is checked
        raise error(f"{path}: {what} is not valid JSON ({first_line(exc)})") from exc


def load_json(
    path: str | os.PathLike[str],
    max_bytes: int,
    what: str,
    error: type[Exception] = InputError,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """A JSON file read by `read_regular_file` and parsed by `parse_json`."""
    return parse_json(read_regular_file(path, max_bytes, what, error), path, what, error, max_depth)
