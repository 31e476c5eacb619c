"""ROS map_server maps: YAML metadata + image (PGM natively, other formats through Pillow).

Implements the documented map_server / nav2_map_server fields:

- `image`: image path, relative to the YAML file's directory unless absolute;
- `resolution`: metres per pixel (finite, > 0);
- `origin`: [x, y, yaw] of the lower-left pixel's corner in the map frame;
- `negate`: 0/1; when 0 a pixel's occupancy probability is p = (255 - value) / 255, when 1 p = value / 255;
- `occupied_thresh` / `free_thresh`: probabilities; `mode` (default trinary):
    * trinary: p > occupied_thresh -> 100, p < free_thresh -> 0, otherwise -1 (unknown);
    * scale:   as trinary at the extremes, in between round(100 (p - free) / (occupied - free)); a pixel with
               alpha < 1 is unknown. In-between values are "neither free nor occupied", so the grid gets
               free_thresh 0 / occupied_thresh 100 and classifies them as unknown (its `unknown_policy` decides);
    * raw:     the pixel value itself is the occupancy (0..100); any other value is unknown; `negate` is ignored.

Colour images are averaged over their colour channels, as map_server does. The first image row is the top of the
map; the grid's row 0 is its bottom (nav_msgs), so the image is flipped on load and on save. Errors name the file and
the field: `MapFormatError`.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mnemo_mpc.atomic import atomic_write_bytes, atomic_write_text
from mnemo_mpc.errors import InputError, MapFormatError
from mnemo_mpc.planning.grid import OccupancyGrid

MODES = ("trinary", "scale", "raw")
# What map_saver writes in trinary mode, and the thresholds that read those shades back exactly.
SAVE_FREE, SAVE_OCCUPIED, SAVE_UNKNOWN = 254, 0, 205
SAVE_OCCUPIED_THRESH, SAVE_FREE_THRESH = 0.65, 0.196


def load_map(yaml_path: str | os.PathLike[str]) -> OccupancyGrid:
    """Load a map_server map (YAML + image) as an `OccupancyGrid`."""
    yaml_path = Path(yaml_path)
    meta = read_map_yaml(yaml_path)
    image_path = Path(meta["image"])
    if not image_path.is_absolute():
        image_path = yaml_path.parent / image_path
    pixels, alpha = read_image(image_path)
    data = pixels_to_occupancy(
        pixels, alpha, meta["mode"], meta["negate"], meta["occupied_thresh"], meta["free_thresh"]
    )
    if meta["mode"] == "scale":
        occ_t, free_t = 100, 0
    elif meta["mode"] == "raw":
        occ_t = min(max(int(round(100 * meta["occupied_thresh"])), 1), 100)
        free_t = min(max(int(round(100 * meta["free_thresh"])), 0), occ_t - 1)
    else:
        occ_t, free_t = 65, 25  # trinary data is only 0 / 100 / -1; any valid thresholds classify it the same
    return OccupancyGrid(np.flipud(data), meta["resolution"], tuple(meta["origin"]), occ_t, free_t)


def read_map_yaml(yaml_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse and validate the YAML metadata; defaults as in map_server (mode trinary, thresholds 0.65 / 0.196)."""
    yaml_path = Path(yaml_path)
    try:
        text = yaml_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MapFormatError(f"{yaml_path}: cannot read map YAML ({exc.strerror})") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MapFormatError(f"{yaml_path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(doc, dict):
        raise MapFormatError(f"{yaml_path}: expected a mapping with keys image, resolution, origin, ...")
    for key in ("image", "resolution", "origin"):
        if key not in doc:
            raise MapFormatError(f"{yaml_path}: missing required field '{key}'")
    if not isinstance(doc["image"], str) or not doc["image"]:
        raise MapFormatError(f"{yaml_path}: field 'image' must be a file name, got {doc['image']!r}")
    res = _number(doc["resolution"], yaml_path, "resolution")
    if not res > 0:
        raise MapFormatError(f"{yaml_path}: field 'resolution' must be > 0 metres per pixel, got {res}")
    origin = doc["origin"]
    if not isinstance(origin, (list, tuple)) or len(origin) != 3:
        raise MapFormatError(f"{yaml_path}: field 'origin' must be [x, y, yaw], got {origin!r}")
    origin = [_number(v, yaml_path, f"origin[{i}]") for i, v in enumerate(origin)]
    negate = doc.get("negate", 0)
    if negate not in (0, 1, True, False):
        raise MapFormatError(f"{yaml_path}: field 'negate' must be 0 or 1, got {negate!r}")
    occ = _number(doc.get("occupied_thresh", SAVE_OCCUPIED_THRESH), yaml_path, "occupied_thresh")
    free = _number(doc.get("free_thresh", SAVE_FREE_THRESH), yaml_path, "free_thresh")
    if not 0.0 <= free < occ <= 1.0:
        raise MapFormatError(
            f"{yaml_path}: expected 0 <= free_thresh < occupied_thresh <= 1, got free_thresh={free}, "
            f"occupied_thresh={occ}"
        )
    mode = str(doc.get("mode", "trinary")).lower()
    if mode not in MODES:
        raise MapFormatError(f"{yaml_path}: field 'mode' must be one of {MODES}, got {doc.get('mode')!r}")
    return {
        "image": doc["image"],
        "resolution": res,
        "origin": origin,
        "negate": int(bool(negate)),
        "occupied_thresh": occ,
        "free_thresh": free,
        "mode": mode,
    }


def pixels_to_occupancy(
    pixels: np.ndarray,
    alpha: np.ndarray | None,
    mode: str,
    negate: int,
    occupied_thresh: float,
    free_thresh: float,
) -> np.ndarray:
    """Image values (0..255 floats, top row first) -> occupancy int8 (top row first), per map_server's rules."""
    if mode == "raw":
        raw = np.rint(pixels)
        return np.where((raw >= 0) & (raw <= 100), raw, -1).astype(np.int8)
    p = pixels / 255.0 if negate else (255.0 - pixels) / 255.0
    out = np.full(pixels.shape, -1, dtype=np.int8)
    out[p > occupied_thresh] = 100
    out[p < free_thresh] = 0
    if mode == "scale":
        out[p >= occupied_thresh] = 100
        mid = (p >= free_thresh) & (p < occupied_thresh)
        out[mid] = np.rint(100.0 * (p[mid] - free_thresh) / (occupied_thresh - free_thresh)).astype(np.int8)
        if alpha is not None:
            out[alpha < 255] = -1
    return out


def read_image(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """(values 0..255 as float (H, W), alpha 0..255 or None). PGM (P2/P5, 8 or 16 bit) is parsed here; other
    formats go through Pillow."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MapFormatError(f"{path}: cannot read map image ({exc.strerror})") from exc
    if raw[:2] in (b"P2", b"P5"):
        return read_pgm_bytes(raw, path), None
    if raw[:1] == b"P" and raw[1:2].isdigit():
        raise MapFormatError(f"{path}: PNM type {raw[:2].decode()} is not a greyscale map; expected P2 or P5 PGM")
    try:
        from PIL import Image

        with Image.open(path) as im:
            im.load()
            arr = np.asarray(im)
            mode = im.mode
    except Exception as exc:  # Pillow raises many types for a corrupt file; all mean the same to the user
        raise MapFormatError(f"{path}: unreadable map image ({exc})") from exc
    arr = arr.astype(float)
    if mode in ("I", "I;16", "I;16B", "F"):
        arr = arr * (255.0 / max(float(arr.max()), 1.0)) if arr.max() > 255 else arr
    alpha = None
    if arr.ndim == 3:
        if arr.shape[2] in (2, 4):
            alpha, arr = arr[..., -1], arr[..., :-1]
        arr = arr.mean(axis=2)
    if mode == "1":
        arr = arr * 255.0
    return arr, alpha


_PGM_TOKEN = re.compile(rb"(#[^\n\r]*[\n\r])|(\S+)")


def read_pgm_bytes(raw: bytes, path: str | os.PathLike[str] = "<bytes>") -> np.ndarray:
    """Parse a P2 (ASCII) or P5 (binary) PGM; returns values scaled to 0..255 (float), top row first."""
    magic = raw[:2]
    pos, header = 2, []
    while len(header) < 3:
        m = _PGM_TOKEN.search(raw, pos)
        if m is None:
            raise MapFormatError(f"{path}: truncated PGM header (expected width, height and maxval)")
        pos = m.end()
        if m.group(2) is not None:
            try:
                header.append(int(m.group(2)))
            except ValueError as exc:
                raise MapFormatError(f"{path}: PGM header field is not an integer: {m.group(2)!r}") from exc
    width, height, maxval = header
    if width < 1 or height < 1:
        raise MapFormatError(f"{path}: PGM size must be positive, got {width}x{height}")
    if not 1 <= maxval <= 65535:
        raise MapFormatError(f"{path}: PGM maxval must be in 1..65535, got {maxval}")
    count = width * height
    if magic == b"P5":
        # Exactly one whitespace byte separates maxval from the binary raster.
        start = pos + 1
        dtype = np.dtype(">u2") if maxval > 255 else np.dtype("u1")
        need = count * dtype.itemsize
        body = raw[start : start + need]
        if len(body) < need:
            raise MapFormatError(f"{path}: PGM raster too short: {len(body)} of {need} bytes for {width}x{height}")
        values = np.frombuffer(body, dtype=dtype).astype(float)
    else:
        tokens = re.sub(rb"#[^\n\r]*", b" ", raw[pos:]).split()
        if len(tokens) < count:
            raise MapFormatError(f"{path}: PGM raster has {len(tokens)} of {count} values for {width}x{height}")
        try:
            values = np.array([int(t) for t in tokens[:count]], dtype=float)
        except ValueError as exc:
            raise MapFormatError(f"{path}: PGM raster holds a non-integer value") from exc
    if values.size and values.max() > maxval:
        raise MapFormatError(f"{path}: PGM value {int(values.max())} exceeds maxval {maxval}")
    return (values * (255.0 / maxval)).reshape(height, width)


def write_pgm_bytes(pixels: np.ndarray, binary: bool = True) -> bytes:
    """An 8-bit PGM (P5 binary or P2 ASCII) of `pixels` (H, W) uint8, top row first."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 2 or pixels.dtype != np.uint8:
        raise InputError(f"write_pgm_bytes.pixels: expected a 2-D uint8 array, got {pixels.dtype} {pixels.shape}")
    h, w = pixels.shape
    if binary:
        return f"P5\n{w} {h}\n255\n".encode() + pixels.tobytes()
    rows = "\n".join(" ".join(str(int(v)) for v in row) for row in pixels)
    return f"P2\n{w} {h}\n255\n{rows}\n".encode()


def save_map(
    grid: OccupancyGrid,
    yaml_path: str | os.PathLike[str],
    mode: str = "trinary",
    binary: bool = True,
) -> Path:
    """Write `grid` as map_saver does: `<name>.pgm` next to `yaml_path`, and the YAML. Atomic writes.

    trinary: free -> 254, occupied -> 0, unknown -> 205 (thresholds 0.65 / 0.196 read them back exactly);
    raw: the occupancy value itself, unknown -> 255.
    """
    if mode not in ("trinary", "raw"):
        raise InputError(f"save_map.mode: expected 'trinary' or 'raw' (scale is lossy), got {mode!r}")
    yaml_path = Path(yaml_path)
    image_path = yaml_path.with_suffix(".pgm")
    data = np.flipud(grid.data)
    if mode == "trinary":
        pixels = np.full(data.shape, SAVE_UNKNOWN, dtype=np.uint8)
        pixels[grid.free_mask()[::-1]] = SAVE_FREE
        pixels[grid.occupied_mask()[::-1]] = SAVE_OCCUPIED
    else:
        pixels = np.where(data < 0, 255, data).astype(np.uint8)
    atomic_write_bytes(image_path, write_pgm_bytes(pixels, binary))
    meta = {
        "image": image_path.name,
        "mode": mode,
        "resolution": float(grid.resolution),
        "origin": [float(v) for v in grid.origin],
        "negate": 0,
        "occupied_thresh": SAVE_OCCUPIED_THRESH if mode == "trinary" else grid.occupied_thresh / 100.0,
        "free_thresh": SAVE_FREE_THRESH if mode == "trinary" else grid.free_thresh / 100.0,
    }
    atomic_write_text(yaml_path, yaml.safe_dump(meta, sort_keys=False))
    return yaml_path


def _number(value: Any, path: Path, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MapFormatError(f"{path}: field '{name}' must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise MapFormatError(f"{path}: field '{name}' must be finite, got {value}")
    return value
