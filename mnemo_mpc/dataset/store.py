"""On-disk store of SQP solutions gathered in closed loop (seed 002 §5.2: one example per MPC step).

Layout (zarr v3, one group per world)::

    DIR/
      zarr.json                 root group (so zarr tooling can browse the store)
      manifest.json             schema version, config, package version, counts, one entry per committed world
      worlds/w000123/           one zarr group per world: per-step arrays (leading axis = step) + episode attrs
      .tmp/                     worlds being written; never read

Crash safety: a worker writes a whole world under `.tmp/` and then renames the directory into `worlds/` (an atomic
rename on POSIX), so a world is either absent or complete. The manifest is rewritten atomically *after* the rename;
the committed directories are the truth and the manifest is their summary, so a crash between the two is repaired by
`refresh_manifest` on the next `collect`. A killed worker therefore loses at most the world it was writing.

The grid array is sharded (one shard per world, one inner chunk per step): a world is a handful of files, yet a
single step is read without decompressing the others.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc import __version__
from mnemo_mpc.atomic import atomic_write_json
from mnemo_mpc.errors import DatasetError

log = logging.getLogger(__name__)

FORMAT = "mnemo_mpc.sqp_dataset"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
WORLDS_DIR = "worlds"
TMP_DIR = ".tmp"

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


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_world(root: str | os.PathLike[str], record: WorldRecord) -> dict[str, Any]:
    """Write one world and commit it atomically (tmp directory + rename); returns its manifest entry.

    Safe to call from any worker process: it only touches `.tmp/<unique>` and then `worlds/<name>`. If the world is
    already committed (a re-run raced us) the existing copy is kept and ours discarded, so examples never duplicate.
    """
    import zarr

    root = Path(root)
    arrays = _check_record(record)
    final = root / WORLDS_DIR / world_name(record.world_id)
    tmp = root / TMP_DIR / f"{world_name(record.world_id)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    n_steps = int(arrays["step"].shape[0])
    entry = {
        "world_id": int(record.world_id),
        "seed": int(record.seed),
        "kind": str(record.kind),
        "status": record.status,
        "steps": n_steps,
        "expert_converged": int(np.count_nonzero(arrays["expert_success"])),
    }
    for key in ("wall_time_s", "cpu_time_s"):
        if key in record.info:
            entry[key] = round(float(record.info[key]), 4)
    try:
        group = zarr.open_group(tmp, mode="w-", zarr_format=3)
        for name, a in arrays.items():
            if name == "grid" and n_steps:
                group.create_array(name, data=a, chunks=(1, *a.shape[1:]), shards=a.shape)
            else:
                group.create_array(name, data=a, chunks=tuple(max(s, 1) for s in a.shape))
        attrs = {"schema_version": SCHEMA_VERSION, **entry, "info": _jsonable(record.info)}
        group.attrs.update(attrs)
        if final.exists():
            log.warning("world %d already committed at %s; discarding the duplicate", record.world_id, final)
            shutil.rmtree(tmp, ignore_errors=True)
            return read_world_entry(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


def read_world_entry(path: Path) -> dict[str, Any]:
    """The manifest entry of a committed world, from its group attributes (cheap: one small JSON file)."""
    meta = path / "zarr.json"
    try:
        attrs = json.loads(meta.read_text())["attributes"]
        entry = {k: attrs[k] for k in ("world_id", "seed", "kind", "status", "steps", "expert_converged")}
        for key in ("wall_time_s", "cpu_time_s"):
            if key in attrs:
                entry[key] = attrs[key]
        return entry
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{meta}: unreadable world group metadata ({exc})") from exc


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


class DatasetStore:
    """A dataset directory: manifest + committed worlds. Use `create_or_resume` to write, `open` to read."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest

    # --- opening ------------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> DatasetStore:
        """Open for reading; raises `DatasetError` if the store is missing, unreadable, of another schema version,
        or if the manifest lists a world that is not committed on disk."""
        root = Path(root)
        manifest = cls._read_manifest(root)
        store = cls(root, manifest)
        missing = [wid for wid in manifest["worlds"] if not (root / WORLDS_DIR / world_name(int(wid))).is_dir()]
        if missing:
            raise DatasetError(
                f"{root}: inconsistent store: manifest lists {len(missing)} world(s) not on disk "
                f"(first: {world_name(int(missing[0]))})"
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
        if not path.is_file():
            raise DatasetError(f"{root}: not a dataset store (no {MANIFEST})")
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: unreadable manifest ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise DatasetError(f"{path}: not a {FORMAT} manifest (format={manifest.get('format')!r})")
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise DatasetError(
                f"{path}: schema_version {manifest.get('schema_version')!r} is not supported "
                f"(this mnemo_mpc reads version {SCHEMA_VERSION}); re-collect or use a matching mnemo_mpc"
            )
        for key in ("config", "counts", "worlds"):
            if not isinstance(manifest.get(key), dict):
                raise DatasetError(f"{path}: manifest field {key!r} missing or not an object")
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
        atomic_write_json(self.root / MANIFEST, self.manifest)

    # --- reader side --------------------------------------------------------------------------------------------
    @property
    def world_ids(self) -> list[int]:
        return sorted(int(w) for w in self.manifest["worlds"])

    def world_entry(self, world_id: int) -> dict[str, Any]:
        return self.manifest["worlds"][str(int(world_id))]

    def open_world(self, world_id: int) -> Any:
        """The world's zarr group (read-only), checked against its manifest entry."""
        import zarr

        path = self.root / WORLDS_DIR / world_name(world_id)
        try:
            group = zarr.open_group(path, mode="r", zarr_format=3)
            steps = int(group.attrs["steps"])
            present = set(group.array_keys())
            lengths = {name: group[name].shape[0] for name in ALL_STEP_FIELDS if name in STEP_FIELDS or name in present}
        except DatasetError:
            raise
        except Exception as exc:  # zarr raises a variety of errors for damaged groups
            raise DatasetError(f"{path}: unreadable world group ({type(exc).__name__}: {exc})") from exc
        expected = self.world_entry(world_id)["steps"]
        if steps != expected or any(n != expected for n in lengths.values()):
            raise DatasetError(
                f"{path}: inconsistent world: manifest says {expected} steps, group says {steps}, arrays {lengths}"
            )
        return group

    def verify(self) -> None:
        """Open every listed world and check it against the manifest (raises `DatasetError` on the first problem)."""
        for wid in self.world_ids:
            self.open_world(wid)
