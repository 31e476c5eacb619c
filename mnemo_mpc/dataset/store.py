"""On-disk store of SQP solutions gathered in closed loop (seed 002 §5.2: one example per MPC step).

Layout (zarr v3, one group per world)::

    DIR/
      zarr.json                 root group (so zarr tooling can browse the store)
      manifest.json             schema version, config, package version, counts, one entry per committed world
      worlds/w000123/           one zarr group per world: per-step arrays (leading axis = step) + episode attrs
      .tmp/                     worlds being written; never read
      .quarantine/              worlds `mnemo-mpc data verify --repair` found damaged and moved aside; never read

Crash safety: a worker writes a whole world under `.tmp/` and then renames the directory into `worlds/` (an atomic
rename on POSIX), so a world is either absent or complete. The manifest is rewritten atomically *after* the rename;
the committed directories are the truth and the manifest is their summary, so a crash between the two is repaired by
`refresh_manifest` on the next `collect`. A killed worker therefore loses at most the world it was writing.

The grid array is sharded (one shard per world, one inner chunk per step): a world is a handful of files, yet a
single step is read without decompressing the others.

Integrity (schema version 2). Nothing read from a store may be silently wrong, so every byte a reader depends on is
covered by a check, and every failed check raises `StoreCorruptionError` (a `DatasetError`) naming the world, the
array and the chunk - never a fill value, never a raw zarr/numcodecs exception:

- *Chunk contents*: every chunk ends in a CRC32C (zarr v3 `crc32c` codec after zstd); in the sharded grid each inner
  chunk carries its own CRC and the shard index carries one too (zarr's default index codecs). zarr checks them on
  every decode, so a flipped bit or a truncated chunk fails the read of exactly the steps it touches.
- *Chunk presence*: zarr returns the fill value for an absent chunk. Arrays are written with `write_empty_chunks`, so
  every chunk exists; reads go through `_StrictStore`, which raises on any absent chunk key instead of letting zarr
  fill it, and opening a world checks that every chunk recorded at commit exists with its recorded byte size.
- *Array metadata* (`<array>/zarr.json`: shape, dtype, codecs, fill value): the SHA-256 of each file is recorded
  at commit in the world's attributes and checked when the world is opened.
- *World metadata* (`wNNNNNN/zarr.json`, which holds those records and the episode attributes): sealed with the
  SHA-256 of its canonical JSON (`integrity.world_sha256`), which the manifest entry repeats, so a flipped
  attribute, a swapped world directory or a stale manifest entry are all caught.
- *Decoded values*: the SHA-256 of each array's decoded values is recorded too and checked on every whole-array
  read (the small per-step vectors, `data verify`); a per-step grid read relies on the inner chunk's CRC.
- *Manifest*: every entry's fields and types are validated on open (naming the entry), the counts are recomputed,
  and the whole file is sealed by `manifest_sha256`.

`verify_store` (`mnemo-mpc data verify DIR [--repair]`) decodes everything and lists the damaged worlds; `--repair`
moves them to `.quarantine/` and drops them from the manifest, so the next `collect` re-collects them. Version 1
stores (no checksums) are refused: re-collect them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc import __version__
from mnemo_mpc.atomic import atomic_write_json
from mnemo_mpc.errors import DatasetError
from mnemo_mpc.safe_io import load_json, read_regular_file

log = logging.getLogger(__name__)

FORMAT = "mnemo_mpc.sqp_dataset"
SCHEMA_VERSION = 2
MANIFEST = "manifest.json"
WORLDS_DIR = "worlds"
TMP_DIR = ".tmp"
QUARANTINE_DIR = ".quarantine"
META = "zarr.json"
# Caps on the JSON documents a reader opens (issue 26: a FIFO, /dev/zero or a huge file in their place must be an
# error, not a hang or an out-of-memory kill). A world's group document holds ~20 array records (~10 KB); an array's
# ~1 KB. The manifest holds ~1.5 KB per world: 256 MiB is ~170,000 worlds, and parses in ~2 GB at most.
MAX_META_BYTES = 16 << 20
MAX_MANIFEST_BYTES = 256 << 20

# Episode outcomes; "error" means the episode raised (the message is kept), it is recorded, never dropped.
WORLD_STATUSES = ("success", "collision", "timeout", "error")

# name -> (dtype, trailing shape as a tuple of symbols resolved per world: "H", "W", "N1" = N+1, "N" = N, or ints).
STEP_FIELDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "step": ("int32", ()),
    "grid": ("int8", ("H", "W")),  # local occupancy grid, nav_msgs values (-1 unknown, 0..100)
    "grid_origin": ("float64", (3,)),  # map-frame pose of the local grid's cell (0, 0) corner
    "grid_resolution": ("float32", ()),
    "pose": ("float64", (3,)),  # robot x, y, yaw in the map frame
    "velocity": ("float64", (2,)),  # v, w
    "goal": ("float64", (3,)),
    "subgoal": ("float64", (3,)),  # the sub-goal the local MPC was given from the global path
    "expert_states": ("float32", ("N1", 3)),  # converged SQP solution (solved to tolerance, not to the 10-cap)
    "expert_controls": ("float32", ("N", 2)),
    "expert_iterations": ("int32", ()),
    "expert_time_s": ("float64", ()),
    "expert_status": ("int16", ()),  # index into the world's attrs["status_names"]
    "expert_success": ("bool", ()),
    "mpc_iterations": ("int32", ()),  # the closed-loop solve that drove the robot (warm, capped)
    "mpc_time_s": ("float64", ()),
    "mpc_status": ("int16", ()),
    "mpc_success": ("bool", ()),
    "command": ("float64", (2,)),  # the checked (v, w) actually sent
}
# Fields a world may lack (added after the first stores were collected); present in every world a current
# collector writes. `reference` (the MPC's tracking points, knots 0..N) makes each step's problem exactly re-solvable.
OPTIONAL_STEP_FIELDS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "reference": ("float32", ("N1", 2)),
}
ALL_STEP_FIELDS = {**STEP_FIELDS, **OPTIONAL_STEP_FIELDS}

# Keys of a manifest entry (also stored in the world's attributes) and their checks.
_ENTRY_KEYS = ("world_id", "seed", "kind", "status", "steps", "expert_converged")
_TIMING_KEYS = ("wall_time_s", "cpu_time_s")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What zarr writes for the root group and `worlds/`: fixed documents, checked by `verify_store`.
_GROUP_DOC = {"attributes": {}, "zarr_format": 3, "node_type": "group"}


@dataclass
class WorldRecord:
    """Everything recorded in one world: per-step arrays keyed as in `STEP_FIELDS` plus episode attributes.

    `expert_status` / `mpc_status` may be given as lists of solver status strings; they are encoded per world.
    """

    world_id: int
    seed: int
    kind: str
    status: str
    steps: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


class StoreCorruptionError(DatasetError):
    """Part of a store failed an integrity check: names the world, the array ("zarr.json" files count as metadata of
    their array or group) and the chunk, so `data verify` can report it and `--repair` can quarantine the world."""

    def __init__(self, root: Path | str, world_id: int | None, array: str | None, chunk: str | None, reason: str):
        self.root, self.world_id, self.array, self.chunk, self.reason = Path(root), world_id, array, chunk, reason
        where = [f"world {world_name(world_id)}" if world_id is not None else "store"]
        if array is not None:
            where.append(f"array {array!r}")
        if chunk is not None:
            where.append(f"metadata {chunk}" if chunk == META else f"chunk {chunk}")
        super().__init__(f"{root}: {', '.join(where)}: {reason}")

    def as_dict(self) -> dict[str, Any]:
        return {"world_id": self.world_id, "array": self.array, "chunk": self.chunk, "reason": self.reason}


def world_name(world_id: int) -> str:
    return f"w{int(world_id):06d}"


def _encode_status(values: Any, names: list[str]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int16)
    codes = []
    for v in arr.reshape(-1):
        s = str(v)
        if s not in names:
            names.append(s)
        codes.append(names.index(s))
    return np.asarray(codes, dtype=np.int16)


def _check_record(record: WorldRecord) -> dict[str, np.ndarray]:
    if record.status not in WORLD_STATUSES:
        raise DatasetError(f"world {record.world_id}: status must be one of {WORLD_STATUSES}, got {record.status!r}")
    missing = sorted(set(STEP_FIELDS) - set(record.steps))
    extra = sorted(set(record.steps) - set(ALL_STEP_FIELDS))
    if missing or extra:
        raise DatasetError(f"world {record.world_id}: step fields missing {missing}, unexpected {extra}")
    names: list[str] = list(record.info.get("status_names", []))
    arrays: dict[str, np.ndarray] = {}
    fields = {n: spec for n, spec in ALL_STEP_FIELDS.items() if n in record.steps}
    for name, (dtype, _) in fields.items():
        value = record.steps[name]
        if name in ("expert_status", "mpc_status"):
            arrays[name] = _encode_status(value, names)
        else:
            arrays[name] = np.asarray(value, dtype=dtype)
    record.info["status_names"] = names
    lengths = {n: a.shape[0] if a.ndim else -1 for n, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise DatasetError(f"world {record.world_id}: per-step arrays disagree on the number of steps: {lengths}")
    n_steps = next(iter(lengths.values()))
    if n_steps < 0:
        raise DatasetError(f"world {record.world_id}: per-step arrays need a leading step axis")
    if n_steps:
        sym = {
            "H": arrays["grid"].shape[1] if arrays["grid"].ndim == 3 else None,
            "W": arrays["grid"].shape[2] if arrays["grid"].ndim == 3 else None,
            "N1": arrays["expert_states"].shape[1] if arrays["expert_states"].ndim == 3 else None,
            "N": arrays["expert_controls"].shape[1] if arrays["expert_controls"].ndim == 3 else None,
        }
        for name, (_, trailing) in fields.items():
            want = tuple(sym.get(t, t) if isinstance(t, str) else t for t in trailing)
            if arrays[name].shape[1:] != want:
                raise DatasetError(
                    f"world {record.world_id}: field {name!r} has per-step shape {arrays[name].shape[1:]}, "
                    f"expected {want}"
                )
        if sym["N1"] != sym["N"] + 1:
            raise DatasetError(f"world {record.world_id}: expert_states has {sym['N1']} knots for {sym['N']} controls")
        for name, a in arrays.items():
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise DatasetError(f"world {record.world_id}: field {name!r} contains NaN/inf")
    return arrays


def _jsonable(obj: Any) -> Any:
    """Plain-JSON view of attrs (numpy scalars -> Python, NaN -> None) so zarr.json stays standard JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _canonical_sha256(doc: Any) -> str:
    """SHA-256 of a JSON document's canonical form (sorted keys, no whitespace): insensitive to formatting only."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def array_digest(a: np.ndarray) -> str:
    """SHA-256 of an array's decoded values, dtype and shape (what a reader gets, independent of the encoding)."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}|{a.shape}|".encode())
    h.update(memoryview(a).cast("B") if a.size else b"")
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _chunk_files(array_dir: Path) -> dict[str, int]:
    """Chunk keys (`c/0/0`, relative to the array) -> byte size, as written."""
    base = array_dir / "c"
    out = {}
    if base.is_dir():
        for dirpath, _, files in os.walk(base):
            for f in files:
                p = Path(dirpath) / f
                out[p.relative_to(array_dir).as_posix()] = p.stat().st_size
    return dict(sorted(out.items()))


def _compressors() -> tuple[Any, ...]:
    from zarr.codecs import Crc32cCodec, ZstdCodec

    # zstd for size; the CRC32C over the compressed bytes is the integrity check zarr verifies on every decode.
    return (ZstdCodec(level=0, checksum=False), Crc32cCodec())


def write_world(
    root: str | os.PathLike[str], record: WorldRecord, before_commit: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Write one world and commit it atomically (tmp directory + rename); returns its manifest entry.

    `before_commit` runs just before the rename: a collection worker checks there that its coordinator is alive, so
    the window in which an orphaned worker could still commit is the rename itself.

    Safe to call from any worker process: it only touches `.tmp/<unique>` and then `worlds/<name>`. If the world is
    already committed (a re-run raced us) the existing copy is kept and ours discarded, so examples never duplicate.
    The world's integrity records (module docstring) are computed from the files as written, before the rename.
    """
    import zarr

    root = Path(root)
    arrays = _check_record(record)
    final = root / WORLDS_DIR / world_name(record.world_id)
    tmp = root / TMP_DIR / f"{world_name(record.world_id)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    n_steps = int(arrays["step"].shape[0])
    entry: dict[str, Any] = {
        "world_id": int(record.world_id),
        "seed": int(record.seed),
        "kind": str(record.kind),
        "status": record.status,
        "steps": n_steps,
        "expert_converged": int(np.count_nonzero(arrays["expert_success"])),
    }
    for key in _TIMING_KEYS:
        if key in record.info:
            entry[key] = round(float(record.info[key]), 4)
    try:
        group = zarr.open_group(tmp, mode="w-", zarr_format=3)
        records: dict[str, Any] = {}
        for name, a in arrays.items():
            kwargs: dict[str, Any] = {
                "data": a,
                "compressors": _compressors(),
                # Every chunk on disk, even one equal to the fill value: an absent chunk is then always damage.
                "config": {"write_empty_chunks": True},
            }
            if name == "grid" and n_steps:
                kwargs.update(chunks=(1, *a.shape[1:]), shards=a.shape)
            else:
                kwargs.update(chunks=tuple(max(s, 1) for s in a.shape))
            group.create_array(name, **kwargs)
            chunks = _chunk_files(tmp / name)
            want = 1 if a.size else 0
            if len(chunks) != want:  # one chunk (or shard) per array by construction
                raise DatasetError(
                    f"world {record.world_id}: array {name!r} wrote {len(chunks)} chunks, expected {want}"
                )
            records[name] = {
                "metadata_sha256": hashlib.sha256((tmp / name / META).read_bytes()).hexdigest(),
                "chunks": chunks,
                "sha256": array_digest(a),
            }
        attrs = {
            "schema_version": SCHEMA_VERSION,
            **entry,
            "info": _jsonable(record.info),
            "integrity": {"arrays": records},
        }
        group.attrs.update(attrs)
        doc = json.loads((tmp / META).read_text())
        seal = _canonical_sha256(doc)
        group.attrs["integrity"] = {"arrays": records, "world_sha256": seal}
        entry["world_sha256"] = seal
        if read_world_entry(tmp) != entry:  # the seal as a reader will check it
            raise DatasetError(f"world {record.world_id}: integrity seal does not read back as written")
        if final.exists():
            log.warning("world %d already committed at %s; discarding the duplicate", record.world_id, final)
            shutil.rmtree(tmp, ignore_errors=True)
            return read_world_entry(final)
        if before_commit is not None:
            before_commit()
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


def _read_world_doc(path: Path, world_id: int | None = None) -> dict[str, Any]:
    """A world's group `zarr.json`, seal checked; returns its attributes."""
    root = path.parent.parent
    wid = world_id if world_id is not None else _world_id_of(path)

    def bad(reason: str) -> StoreCorruptionError:
        return StoreCorruptionError(root, wid, None, META, reason)

    try:
        doc = load_json(path / META, MAX_META_BYTES, "group metadata", DatasetError)
    except DatasetError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise bad("group metadata is missing") from exc
        raise bad(f"group metadata is unreadable ({exc})") from exc
    if not isinstance(doc, dict):
        raise bad(f"group metadata is a JSON {type(doc).__name__}, expected an object")
    try:
        attrs = doc["attributes"]
        integrity = attrs["integrity"]
        seal = integrity.pop("world_sha256")
    except (KeyError, TypeError, AttributeError) as exc:
        raise bad(f"group metadata lacks its integrity record ({type(exc).__name__}: {exc})") from exc
    if attrs.get("schema_version") != SCHEMA_VERSION:
        raise bad(f"schema_version {attrs.get('schema_version')!r}, expected {SCHEMA_VERSION}; re-collect this store")
    if _canonical_sha256(doc) != seal:
        raise bad("group metadata fails its SHA-256 seal (corrupted)")
    integrity["world_sha256"] = seal
    if doc.get("node_type") != "group" or doc.get("zarr_format") != 3:
        raise bad("not a zarr v3 group")
    return attrs


def _world_id_of(path: Path) -> int | None:
    name = path.name.split("-")[0]
    return int(name[1:]) if name.startswith("w") and name[1:].isdigit() else None


def read_world_entry(path: Path) -> dict[str, Any]:
    """The manifest entry of a committed world, from its sealed group attributes (cheap: one small JSON file)."""
    attrs = _read_world_doc(Path(path))
    entry = {k: attrs.get(k) for k in _ENTRY_KEYS}
    for key in _TIMING_KEYS:
        if key in attrs:
            entry[key] = attrs[key]
    entry["world_sha256"] = attrs["integrity"]["world_sha256"]
    return entry


def _with_defaults(stored: Any, requested: Any, defaults: Any) -> Any:
    """`stored` with the keys it lacks filled from `requested` where that equals `defaults` (recursively)."""
    if not (isinstance(stored, dict) and isinstance(requested, dict) and isinstance(defaults, dict)):
        return stored
    out = dict(stored)
    for key, value in requested.items():
        if key not in stored:
            if key in defaults and defaults[key] == value:
                out[key] = value
        else:
            out[key] = _with_defaults(stored[key], value, defaults.get(key))
    return out


def _counts(worlds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    by_status = {s: 0 for s in WORLD_STATUSES}
    for w in worlds.values():
        by_status[w["status"]] = by_status.get(w["status"], 0) + 1
    return {
        "worlds": len(worlds),
        "worlds_by_status": by_status,
        "examples": int(sum(w["steps"] for w in worlds.values())),
        "examples_expert_converged": int(sum(w["expert_converged"] for w in worlds.values())),
    }


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_entry(where: str, key: str, entry: Any) -> None:
    """Validate one manifest entry (fields, types, ranges); raises `DatasetError` naming the entry and field."""
    label = f"{where}: manifest entry worlds[{key!r}]"
    if not re.fullmatch(r"[0-9]{1,9}", key):
        raise DatasetError(f"{label}: world id must be a non-negative integer written in digits")
    if not isinstance(entry, dict):
        raise DatasetError(f"{label}: expected an object, got {type(entry).__name__}")
    expect = {
        "world_id": ("an integer equal to the entry's key", lambda v: _is_int(v) and v == int(key)),
        "seed": ("a non-negative integer", lambda v: _is_int(v) and v >= 0),
        "kind": ("a string", lambda v: isinstance(v, str)),
        "status": (f"one of {WORLD_STATUSES}", lambda v: v in WORLD_STATUSES),
        "steps": ("a non-negative integer", lambda v: _is_int(v) and v >= 0),
        "expert_converged": (
            "an integer in [0, steps]",
            lambda v: _is_int(v) and 0 <= v <= (entry["steps"] if _is_int(entry.get("steps")) else -1),
        ),
        "world_sha256": ("a SHA-256 hex digest", lambda v: isinstance(v, str) and bool(_SHA256.match(v))),
    }
    for name, (what, ok) in expect.items():
        if name not in entry:
            raise DatasetError(f"{label}: field {name!r} missing (expected {what})")
        if not ok(entry[name]):
            raise DatasetError(f"{label}: field {name!r} is {entry[name]!r}, expected {what}")
    for name in _TIMING_KEYS:
        v = entry.get(name)
        if name in entry and not (
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        ):
            raise DatasetError(f"{label}: field {name!r} is {v!r}, expected a non-negative number of seconds")
    extra = sorted(set(entry) - set(expect) - set(_TIMING_KEYS))
    if extra:
        raise DatasetError(f"{label}: unexpected field(s) {extra}")


def _seal_manifest(manifest: dict[str, Any]) -> str:
    return _canonical_sha256({k: v for k, v in manifest.items() if k != "manifest_sha256"})


class DatasetStore:
    """A dataset directory: manifest + committed worlds. Use `create_or_resume` to write, `open` to read.

    `verify=False` skips this module's read-side checks (seals, presence, decoded digests; zarr still checks chunk
    CRCs): it exists only to measure what verification costs, never read training data that way.
    """

    def __init__(self, root: Path, manifest: dict[str, Any], verify: bool = True) -> None:
        self.root = root
        self.manifest = manifest
        self.verify_reads = bool(verify)

    # --- opening ------------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike[str], verify: bool = True) -> DatasetStore:
        """Open for reading; raises `DatasetError` if the store is missing, unreadable, of another schema version,
        if the manifest is malformed or fails its seal, or if it lists a world that is not committed on disk."""
        root = Path(root)
        manifest = cls._read_manifest(root)
        store = cls(root, manifest, verify=verify)
        missing = [wid for wid in manifest["worlds"] if not (root / WORLDS_DIR / world_name(int(wid))).is_dir()]
        if missing:
            raise StoreCorruptionError(
                root,
                int(missing[0]),
                None,
                None,
                f"inconsistent store: manifest lists {len(missing)} world(s) not on disk (first: "
                f"{world_name(int(missing[0]))}); run `mnemo-mpc data verify {root} --repair`",
            )
        return store

    @classmethod
    def create_or_resume(
        cls, root: str | os.PathLike[str], config: dict[str, Any], defaults: dict[str, Any] | None = None
    ) -> DatasetStore:
        """Writer side (one coordinator): create the store, or resume one collected with the same `config`.

        A setting the stored config lacks (the store predates it) is accepted when the requested value equals its
        value in `defaults` (the behaviour before the setting existed); the manifest then records the full config.
        Removes leftovers of killed workers under `.tmp/` and re-syncs the manifest with the committed worlds; call
        it before any worker starts.
        """
        import zarr

        root = Path(root)
        config = json.loads(json.dumps(_jsonable(config)))
        if (root / MANIFEST).exists():
            manifest = cls._read_manifest(root)
            if defaults is not None:
                manifest["config"] = _with_defaults(
                    manifest["config"], config, json.loads(json.dumps(_jsonable(defaults)))
                )
            if manifest["config"] != config:
                diff = sorted(
                    k for k in set(manifest["config"]) | set(config) if manifest["config"].get(k) != config.get(k)
                )
                raise DatasetError(
                    f"{root}: store was collected with a different config (differs in {diff}); "
                    f"use a new output directory"
                )
            store = cls(root, manifest)
        else:
            if root.exists() and any(root.iterdir()):
                raise DatasetError(f"{root}: directory exists, is not empty and has no {MANIFEST}; refusing to write")
            root.mkdir(parents=True, exist_ok=True)
            zarr.open_group(root, mode="a", zarr_format=3)
            zarr.open_group(root / WORLDS_DIR, mode="a", zarr_format=3)
            manifest = {
                "format": FORMAT,
                "schema_version": SCHEMA_VERSION,
                "package_version": __version__,
                "created_unix": time.time(),
                "config": config,
                "counts": _counts({}),
                "worlds": {},
            }
            store = cls(root, manifest)
        shutil.rmtree(root / TMP_DIR, ignore_errors=True)
        store.refresh_manifest()
        return store

    @staticmethod
    def _read_manifest(root: Path) -> dict[str, Any]:
        path = root / MANIFEST
        if not os.path.lexists(path):
            raise DatasetError(f"{root}: not a dataset store (no {MANIFEST})")
        try:
            manifest = load_json(path, MAX_MANIFEST_BYTES, "manifest", DatasetError)
        except DatasetError as exc:
            raise DatasetError(f"unreadable manifest: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
            raise DatasetError(f"{path}: not a {FORMAT} manifest (format={got!r})")
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise DatasetError(
                f"{path}: schema_version {manifest.get('schema_version')!r} is not supported "
                f"(this mnemo_mpc reads version {SCHEMA_VERSION}, with checksummed chunks); re-collect the store "
                f"with `mnemo-mpc collect`"
            )
        for key in ("config", "counts", "worlds"):
            if not isinstance(manifest.get(key), dict):
                raise DatasetError(f"{path}: manifest field {key!r} missing or not an object")
        for key, entry in manifest["worlds"].items():
            check_entry(str(path), key, entry)
        if manifest["counts"] != _counts(manifest["worlds"]):
            raise DatasetError(f"{path}: manifest field 'counts' disagrees with its world entries")
        if manifest.get("manifest_sha256") != _seal_manifest(manifest):
            raise DatasetError(
                f"{path}: manifest fails its SHA-256 seal (corrupted or edited by hand; "
                f"`mnemo-mpc data verify` lists the state of every world)"
            )
        return manifest

    # --- writer side --------------------------------------------------------------------------------------------
    def committed_world_ids(self) -> set[int]:
        """World ids whose directory is committed (scans the disk, not the manifest)."""
        wdir = self.root / WORLDS_DIR
        if not wdir.is_dir():
            return set()
        ids = set()
        for p in wdir.iterdir():
            if p.is_dir() and p.name.startswith("w") and p.name[1:].isdigit():
                ids.add(int(p.name[1:]))
        return ids

    def refresh_manifest(self) -> None:
        """Make the manifest list exactly the committed worlds (repairs a crash between rename and manifest write)."""
        worlds = dict(self.manifest["worlds"])
        on_disk = self.committed_world_ids()
        for wid in on_disk:
            if str(wid) not in worlds:
                worlds[str(wid)] = read_world_entry(self.root / WORLDS_DIR / world_name(wid))
        for wid in list(worlds):
            if int(wid) not in on_disk:
                log.warning("manifest listed world %s which is not on disk; dropping the entry", wid)
                del worlds[wid]
        self.manifest["worlds"] = dict(sorted(worlds.items(), key=lambda kv: int(kv[0])))
        self._write_manifest()

    def record_world(self, entry: dict[str, Any], write: bool = True) -> None:
        """Add a committed world's entry (as returned by `write_world`) and rewrite the manifest."""
        self.manifest["worlds"][str(int(entry["world_id"]))] = entry
        if write:
            self._write_manifest()

    def _write_manifest(self) -> None:
        self.manifest["counts"] = _counts(self.manifest["worlds"])
        self.manifest["updated_unix"] = time.time()
        self.manifest["manifest_sha256"] = _seal_manifest(self.manifest)
        atomic_write_json(self.root / MANIFEST, self.manifest)

    # --- reader side --------------------------------------------------------------------------------------------
    @property
    def world_ids(self) -> list[int]:
        return sorted(int(w) for w in self.manifest["worlds"])

    def world_entry(self, world_id: int) -> dict[str, Any]:
        try:
            return self.manifest["worlds"][str(int(world_id))]
        except KeyError:
            raise DatasetError(f"{self.root}: world {world_id} is not in the manifest") from None

    def open_world(self, world_id: int) -> WorldReader:
        """Verified read access to one committed world (metadata seals and chunk presence checked here; chunk
        CRCs and decoded digests on each read). Indexing it by array name gives `ArrayReader`s."""
        return WorldReader(self.root, int(world_id), self.world_entry(world_id), verify=self.verify_reads)

    def verify(self) -> None:
        """Decode every array of every listed world; raises `StoreCorruptionError` on the first problem."""
        for wid in self.world_ids:
            self.open_world(wid).check_all()


class _MissingChunk(Exception):
    """Raised by `_StrictStore` where zarr would silently substitute the fill value."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _strict_store(path: Path) -> Any:
    """A read-only zarr store on `path` in which an absent chunk is an error, not the fill value."""
    from zarr.storage import LocalStore, WrapperStore

    class _StrictStore(WrapperStore):
        async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
            buf = await self._store.get(key, prototype, byte_range)
            if buf is None and not key.endswith(META):
                raise _MissingChunk(key)
            return buf

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
            key_ranges = list(key_ranges)
            bufs = await self._store.get_partial_values(prototype, key_ranges)
            for (key, _), buf in zip(key_ranges, bufs, strict=True):
                if buf is None and not key.endswith(META):
                    raise _MissingChunk(key)
            return bufs

    return _StrictStore(LocalStore(path, read_only=True))


class WorldReader:
    """One committed world, opened with its integrity checked (see the module docstring).

    Behaves like a read-only zarr group for the store's own readers: `world[name]` is an `ArrayReader`,
    `array_keys()` the recorded arrays, `attrs` the episode attributes.
    """

    def __init__(self, root: Path, world_id: int, entry: dict[str, Any] | None, verify: bool = True) -> None:
        import zarr

        self.root, self.world_id, self.entry, self.verify = Path(root), int(world_id), entry, verify
        self.path = self.root / WORLDS_DIR / world_name(world_id)
        self._arrays: dict[str, ArrayReader] = {}
        if not verify:
            try:
                # zarr would open a FIFO in its place and block: the one check unverified reads keep
                read_regular_file(self.path / META, MAX_META_BYTES, "group metadata", DatasetError)
                self._group = zarr.open_group(self.path, mode="r", zarr_format=3)
                self.attrs = dict(self._group.attrs)
                self.records = dict(self.attrs["integrity"]["arrays"])
            except Exception as exc:  # unverified mode: still never a raw zarr error
                raise self.error(None, META, f"unreadable world group ({type(exc).__name__}: {exc})") from exc
            return
        self.attrs = _read_world_doc(self.path, self.world_id)
        self.records = self._check_records(self.attrs)
        if self.attrs.get("world_id") != self.world_id:
            raise self.error(None, META, f"group says world {self.attrs.get('world_id')!r}")
        if entry is not None:
            mine = {k: self.attrs.get(k) for k in (*_ENTRY_KEYS, *_TIMING_KEYS) if k in entry or k in self.attrs}
            mine["world_sha256"] = self.attrs["integrity"]["world_sha256"]
            if mine != entry:
                diff = sorted(k for k in set(mine) | set(entry) if mine.get(k) != entry.get(k))
                raise self.error(None, META, f"inconsistent world: manifest entry and group disagree on {diff}")
        for name, rec in self.records.items():
            meta = self.path / name / META
            try:
                digest = hashlib.sha256(read_regular_file(meta, MAX_META_BYTES, "array metadata", DatasetError))
            except DatasetError as exc:
                raise self.error(name, META, f"array metadata unreadable ({exc})") from exc
            if digest.hexdigest() != rec["metadata_sha256"]:
                raise self.error(name, META, "array metadata fails its SHA-256 (corrupted)")
            for key, size in rec["chunks"].items():
                try:
                    st = os.stat(self.path / name / key)
                except OSError:
                    raise self.error(name, key, "chunk is missing") from None
                actual = st.st_size
                if not stat.S_ISREG(st.st_mode):  # zarr would open it and block on a FIFO
                    raise self.error(name, key, "chunk is not a regular file")
                if actual != size:
                    raise self.error(name, key, f"chunk is {actual} bytes, {size} were written (truncated or replaced)")
        try:
            self._group = zarr.open_group(store=_strict_store(self.path), mode="r", zarr_format=3)
        except Exception as exc:
            raise self.error(None, META, f"unreadable world group ({type(exc).__name__}: {exc})") from exc

    def _check_records(self, attrs: dict[str, Any]) -> dict[str, dict[str, Any]]:
        try:
            records = attrs["integrity"]["arrays"]
            ok = isinstance(records, dict) and all(
                isinstance(r["metadata_sha256"], str)
                and isinstance(r["sha256"], str)
                and all(isinstance(k, str) and _is_int(v) for k, v in r["chunks"].items())
                for r in records.values()
            )
        except (KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise self.error(None, META, "malformed integrity record")
        missing = sorted(set(STEP_FIELDS) - set(records))
        if missing:
            raise self.error(None, META, f"integrity record lacks required arrays {missing}")
        for name in records:
            if name not in ALL_STEP_FIELDS or not re.fullmatch(r"[a-z_]+", name):
                raise self.error(None, META, f"integrity record names an unknown array {name!r}")
        return dict(records)

    def error(self, array: str | None, chunk: str | None, reason: str) -> StoreCorruptionError:
        return StoreCorruptionError(self.root, self.world_id, array, chunk, reason)

    def array_keys(self) -> list[str]:
        return sorted(self.records)

    def __contains__(self, name: object) -> bool:
        return name in self.records

    def __getitem__(self, name: str) -> ArrayReader:
        reader = self._arrays.get(name)
        if reader is None:
            if name not in self.records:
                raise DatasetError(f"{self.path}: world {self.world_id} has no array {name!r}")
            try:
                array = self._group[name]
            except Exception as exc:
                raise self.error(name, META, f"unreadable array ({type(exc).__name__}: {exc})") from exc
            steps = self.attrs.get("steps")
            if self.verify and (not array.shape or array.shape[0] != steps):
                raise self.error(name, META, f"array has shape {array.shape}, world has {steps} steps")
            reader = self._arrays[name] = ArrayReader(self, name, array)
        return reader

    def check_all(self) -> list[StoreCorruptionError]:
        """Decode every array (each chunk's CRC, each array's digest) and check the entry's counts; returns the
        problems found (empty: the world is intact). Opening problems raise from the constructor instead."""
        problems: list[StoreCorruptionError] = []
        for name in self.array_keys():
            try:
                values = self[name][:]
            except StoreCorruptionError as exc:
                problems.append(exc)
                continue
            if name == "expert_success" and int(np.count_nonzero(values)) != self.attrs.get("expert_converged"):
                problems.append(self.error(name, None, "converged-step count disagrees with the world's entry"))
        return problems


def _is_whole(selection: Any) -> bool:
    return selection is Ellipsis or (isinstance(selection, slice) and selection == slice(None))


class ArrayReader:
    """Reads of one array of a `WorldReader`: zarr errors become `StoreCorruptionError`s naming the chunk, and
    whole-array reads are checked against the decoded digest recorded at commit."""

    def __init__(self, world: WorldReader, name: str, array: Any) -> None:
        self.world, self.name, self._array = world, name, array
        self.shape: tuple[int, ...] = tuple(array.shape)
        self.dtype = array.dtype
        self.ndim = len(self.shape)
        self._chunks = list(world.records[name]["chunks"])

    def __len__(self) -> int:
        return self.shape[0]

    def _chunk_of(self, selection: Any) -> str:
        """The chunk a failed read touched: the array's only chunk, or for the sharded grid the inner chunk."""
        key = self._chunks[0] if self._chunks else "c/?"
        if self.name == "grid" and isinstance(selection, int | np.integer) and self.ndim == 3:
            return f"{key} (inner chunk of step row {int(selection) % max(self.shape[0], 1)})"
        return key

    def _fail(self, selection: Any, exc: BaseException) -> StoreCorruptionError:
        if isinstance(exc, _MissingChunk):
            return self.world.error(self.name, exc.key.removeprefix(f"{self.name}/"), "chunk is missing")
        if isinstance(exc, StoreCorruptionError):
            return exc
        text = str(exc)
        reason = (
            "checksum mismatch (corrupted)"
            if "checksum" in text.lower()
            else f"undecodable ({type(exc).__name__}: {text})"
        )
        chunk = self._chunk_of(selection)
        if self.name == "grid" and _is_whole(selection) and self.ndim == 3:
            bad = self._bad_rows()
            if bad:
                chunk = f"{chunk} (inner chunks of step rows {bad[:10]}{' ...' if len(bad) > 10 else ''})"
        return self.world.error(self.name, chunk, reason)

    def _bad_rows(self) -> list[int]:
        bad = []
        for r in range(self.shape[0]):
            try:
                self._array[r]
            except Exception:
                bad.append(r)
        return bad

    def _check(self, selection: Any, values: np.ndarray) -> np.ndarray:
        if self.world.verify and _is_whole(selection):
            if array_digest(values) != self.world.records[self.name]["sha256"]:
                raise self.world.error(self.name, self._chunk_of(selection), "decoded values fail their SHA-256")
        return values

    def __getitem__(self, selection: Any) -> np.ndarray:
        try:
            values = np.asarray(self._array[selection])
        except Exception as exc:  # a zarr/numcodecs error, the CRC codec's ValueError, or _MissingChunk
            raise self._fail(selection, exc) from exc
        return self._check(selection, values)

    async def aget(self, selection: Any) -> np.ndarray:
        """The async read (for `asyncio.gather` over many arrays in one zarr round trip), same checks."""
        try:
            values = np.asarray(await self._array.async_array.getitem(selection))
        except Exception as exc:
            raise self._fail(selection, exc) from exc
        return self._check(selection, values)


# --- verification of a whole store ------------------------------------------------------------------------------
@dataclass
class VerifyReport:
    """What `verify_store` found: damaged worlds (each problem: world, array, chunk, reason) and store-level
    problems (manifest, root metadata); `repaired` lists the worlds moved to `quarantine`."""

    root: str
    worlds_checked: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    bad_worlds: list[int] = field(default_factory=list)
    repaired: list[int] = field(default_factory=list)
    quarantine: str | None = None
    manifest_ok: bool = True

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _on_disk_world_ids(root: Path) -> set[int]:
    wdir = root / WORLDS_DIR
    if not wdir.is_dir():
        return set()
    return {int(p.name[1:]) for p in wdir.iterdir() if p.is_dir() and p.name.startswith("w") and p.name[1:].isdigit()}


def verify_store(root: str | os.PathLike[str], repair: bool = False, progress: bool = False) -> VerifyReport:
    """Re-read everything (full decode of every array of every world, manifest, group metadata) and report.

    With `repair`, damaged worlds are moved to `DIR/.quarantine/` and dropped from the manifest, and the root group
    documents are rewritten, so `collect` re-collects those worlds. A damaged manifest cannot be rebuilt (it holds the
    collection config): it is reported and left alone. Raises `DatasetError` if `root` is not a store at all.
    """
    from tqdm import tqdm

    root = Path(root)
    if not root.is_dir() or not (root / MANIFEST).exists():
        raise DatasetError(f"{root}: not a dataset store (no {MANIFEST})")
    report = VerifyReport(root=str(root.resolve()))
    manifest: dict[str, Any] | None
    try:
        manifest = DatasetStore._read_manifest(root)
    except DatasetError as exc:
        manifest = None
        report.manifest_ok = False
        report.problems.append({"world_id": None, "array": MANIFEST, "chunk": None, "reason": str(exc)})
    for doc_dir in (root, root / WORLDS_DIR):
        try:
            doc = load_json(doc_dir / META, MAX_META_BYTES, "group metadata", DatasetError)
            good = doc == _GROUP_DOC or doc == {**_GROUP_DOC, "consolidated_metadata": None}
        except DatasetError:
            good = False
        if not good:
            rel = (doc_dir / META).relative_to(root).as_posix()
            report.problems.append({"world_id": None, "array": rel, "chunk": None, "reason": "not the expected group"})
            if repair:
                atomic_write_json(doc_dir / META, _GROUP_DOC)
    listed = {int(w) for w in manifest["worlds"]} if manifest else set()
    on_disk = _on_disk_world_ids(root)
    bad: dict[int, list[dict[str, Any]]] = {}
    for wid in tqdm(sorted(on_disk | listed), unit="world", desc="verify", disable=not progress):
        report.worlds_checked += 1
        if wid not in on_disk:
            bad[wid] = [
                {"world_id": wid, "array": None, "chunk": None, "reason": "listed in the manifest, not on disk"}
            ]
            continue
        entry = manifest["worlds"].get(str(wid)) if manifest else None
        try:
            found = [p.as_dict() for p in WorldReader(root, wid, entry).check_all()]
        except StoreCorruptionError as exc:
            found = [exc.as_dict()]
        except DatasetError as exc:
            found = [{"world_id": wid, "array": None, "chunk": None, "reason": str(exc)}]
        if found:
            bad[wid] = found
    for wid in sorted(bad):
        report.problems.extend(bad[wid])
    report.bad_worlds = sorted(bad)
    if repair and bad:
        if manifest is None:
            log.warning("%s: the manifest is damaged; worlds are not quarantined until it is restored", root)
        else:
            quarantine = root / QUARANTINE_DIR
            quarantine.mkdir(exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            for wid in sorted(bad):
                src = root / WORLDS_DIR / world_name(wid)
                if src.exists():
                    os.rename(src, quarantine / f"{world_name(wid)}-{stamp}-{uuid.uuid4().hex[:6]}")
            _fsync_dir(root / WORLDS_DIR)
            for wid in bad:
                manifest["worlds"].pop(str(wid), None)
            DatasetStore(root, manifest).refresh_manifest()  # also adds committed worlds the manifest missed
            report.repaired = sorted(bad)
            report.quarantine = str(quarantine)
    return report


def iter_problems(report: VerifyReport) -> Iterator[str]:
    """One line per problem, for the CLI."""
    for p in report.problems:
        where = [world_name(p["world_id"]) if p["world_id"] is not None else "store"]
        if p["array"] is not None:
            where.append(f"array {p['array']}")
        if p["chunk"] is not None:
            where.append(f"metadata {p['chunk']}" if p["chunk"] == META else f"chunk {p['chunk']}")
        yield f"{' '.join(where)}: {p['reason']}"
