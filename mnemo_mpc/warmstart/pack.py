"""A training pack: a store's model inputs for its training and validation worlds in one small file, so the model can
be trained where the store is not (a GPU machine that takes only a small upload, or one without the store's readers).

`mnemo-mpc data pack DIR --out FILE` writes it; `mnemo-mpc train --data FILE` trains on it exactly as on the store,
with the same world split (recorded in the pack; a `--seed` or split that differs is an error, not another split).
The distance-field crops are quantised to 8 bits per channel over their fixed ranges (`inputs.grid_input` clips
them): 4.9 mm steps of the clipped distance and 0.8 mm of the clearance margin, far below the 0.1 m crop cells; stored
as differences along the crop's rows (exact modulo 256: a smooth field's differences are small and compress). The
vectors and targets are float16 (relative error 5e-4: 1 mm on a 2 m/s control, an order below the best model's error).
Members are LZMA-compressed: the Jackal store of 43,065 examples packs into 37 MB where its input cache takes 285 MB.
The shipped Jackal model, trained on its pack on a GPU, has the same validation error on the store's own unquantised
inputs as on the pack's (to four digits; `models/README.md`).

Reading checks the format, every member's declared shape and dtype against the metadata and its size before
decompressing it, so a damaged or hostile file fails with an error naming the file and member, in bounded memory.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.atomic import atomic_write_bytes
from mnemo_mpc.errors import DatasetError
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart import data as wdata
from mnemo_mpc.warmstart.inputs import InputSpec

FORMAT = "mnemo_mpc.training_pack"
VERSION = 1
SUFFIX = ".mnpack"
_META = "meta.json"
_MAX_META_BYTES = 1 << 20
_PARTS = ("train", "val")
_ARRAYS = ("grid", "vector", "controls", "world")
_DTYPES = {"grid": np.uint8, "vector": np.float16, "controls": np.float16, "world": np.int64}


def grid_ranges(spec: InputSpec) -> np.ndarray:
    """(2, 2) [low, high] of the crop's two channels, as `inputs.grid_input` clips them."""
    return np.array([[-0.25 / spec.clip_m, 1.0], [-1.0, 1.0]])


def quantise(grid: np.ndarray, spec: InputSpec) -> np.ndarray:
    """(M, 2, S, S) crops -> uint8 levels over `grid_ranges`, as differences along each row (module docstring)."""
    lo, hi = grid_ranges(spec)[:, 0, None, None], grid_ranges(spec)[:, 1, None, None]
    scaled = (np.asarray(grid, dtype=np.float32) - lo) / (hi - lo)
    levels = np.rint(np.clip(scaled, 0.0, 1.0) * 255.0).astype(np.uint8)
    return np.diff(levels, axis=-1, prepend=np.uint8(0))  # uint8 arithmetic wraps: exact modulo 256


def dequantise(q: np.ndarray, spec: InputSpec) -> np.ndarray:
    lo, hi = grid_ranges(spec)[:, 0, None, None], grid_ranges(spec)[:, 1, None, None]
    levels = np.cumsum(q, axis=-1, dtype=np.uint8)
    return (levels.astype(np.float32) / 255.0 * (hi - lo) + lo).astype(np.float16)


@dataclasses.dataclass
class Pack:
    meta: dict[str, Any]
    train: wdata.Arrays
    val: wdata.Arrays

    @property
    def robot(self) -> RobotModel:
        return RobotModel(**self.meta["robot"])

    @property
    def spec(self) -> InputSpec:
        return InputSpec(**self.meta["spec"])


def write_pack(
    root: str | os.PathLike[str],
    spec: InputSpec,
    path: str | os.PathLike[str],
    val_fraction: float = 0.1,
    seed: int = 0,
    max_train_worlds: int | None = None,
    every: int = 1,
    workers: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Pack the store at `root` (its inputs for `spec`, built into the store's cache first); returns the metadata.
    `every` > 1 keeps every that many training examples of each world (a fast controller's consecutive steps are
    near duplicates: the Jackal's come 44 ms apart); validation keeps them all."""
    if every < 1:
        raise DatasetError(f"write_pack.every: expected an integer >= 1, got {every!r}")
    store = wdata.DatasetStore.open(root)
    robot, n, dt = wdata.store_robot(store)
    spec = dataclasses.replace(spec, N=n, dt=dt)
    train_ids, val_ids = wdata.world_split(root, val_fraction, seed, max_train_worlds)
    cache = wdata.build_cache(root, spec, workers, train_ids + val_ids, progress=progress)
    parts = {"train": _every(wdata.load(cache, train_ids), every), "val": wdata.load(cache, val_ids)}
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "source": str(Path(root).resolve()),
        "robot": asdict(robot),
        "spec": asdict(spec),
        "split": {"val_fraction": val_fraction, "seed": seed, "max_train_worlds": max_train_worlds},
        "every": every,
        "train_worlds": train_ids,
        "val_worlds": val_ids,
        "grid_quantisation": {"bits": 8, "ranges": grid_ranges(spec).tolist()},
        "shapes": {},
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_LZMA) as zf:
        for part, arrays in parts.items():
            for name in _ARRAYS:
                a = getattr(arrays, name)
                a = quantise(a, spec) if name == "grid" else a.astype(_DTYPES[name])
                meta["shapes"][f"{part}/{name}"] = list(a.shape)
                with zf.open(f"{part}/{name}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, np.ascontiguousarray(a), allow_pickle=False)
        zf.writestr(_META, json.dumps(meta, indent=1))
    atomic_write_bytes(path, buf.getvalue())
    return meta


def _every(arrays: wdata.Arrays, every: int) -> wdata.Arrays:
    """Every `every`-th example of each world, from its first."""
    if every == 1:
        return arrays
    first = np.r_[0, np.flatnonzero(np.diff(arrays.world)) + 1]  # `data.load` concatenates whole worlds
    index_in_world = np.arange(len(arrays)) - np.repeat(first, np.diff(np.r_[first, len(arrays)]))
    keep = index_in_world % every == 0
    return wdata.Arrays(arrays.grid[keep], arrays.vector[keep], arrays.controls[keep], arrays.world[keep])


def read_pack(path: str | os.PathLike[str]) -> Pack:
    """The pack at `path`, grids dequantised to float16 (as `data.load` gives them)."""
    path = Path(path)

    def bad(why: str) -> DatasetError:
        return DatasetError(f"{path}: not a readable training pack ({why}); write one with `mnemo-mpc data pack`")

    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise bad(str(exc)) from exc
    with zf:
        try:
            info = zf.getinfo(_META)
            if info.file_size > _MAX_META_BYTES:
                raise bad(f"{_META} declares {info.file_size} bytes, more than {_MAX_META_BYTES}")
            meta = json.loads(zf.read(_META))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
                raise bad(f"{_META}: expected format {FORMAT!r} version {VERSION}")
            spec = InputSpec(**meta["spec"])
            RobotModel(**meta["robot"])
            arrays = {part: {name: _read_member(zf, meta, part, name, bad) for name in _ARRAYS} for part in _PARTS}
        except DatasetError:
            raise
        except (KeyError, TypeError, ValueError, OSError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
            raise bad(f"{type(exc).__name__}: {exc}") from exc
    out = {}
    for part, a in arrays.items():
        m = a["controls"].shape[0]
        if any(a[k].shape[0] != m for k in _ARRAYS):
            raise bad(f"{part}: arrays of different lengths")
        vector, controls = a["vector"].astype(np.float32), a["controls"].astype(np.float32)
        out[part] = wdata.Arrays(dequantise(a["grid"], spec), vector, controls, a["world"])
    return Pack(meta, out["train"], out["val"])


def _read_member(zf: zipfile.ZipFile, meta: dict, part: str, name: str, bad: Any) -> np.ndarray:
    key = f"{part}/{name}"
    shape = tuple(int(s) for s in meta["shapes"][key])
    dtype = np.dtype(_DTYPES[name])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    info = zf.getinfo(f"{key}.npy")
    # The .npy header is at most a few hundred bytes: a member declaring more than that beyond its data is refused
    # before anything is decompressed (a small file must not expand into gigabytes).
    if not expected <= info.file_size <= expected + 4096:
        raise bad(f"{key}: declares {info.file_size} bytes, expected {expected} for {shape} {dtype}")
    with zf.open(info) as fh:
        a = np.lib.format.read_array(fh, allow_pickle=False)
    if a.shape != shape or a.dtype != dtype:
        raise bad(f"{key}: holds {a.shape} {a.dtype}, the metadata says {shape} {dtype}")
    return a
