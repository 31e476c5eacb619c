"""ROS map_server maps: YAML metadata + image (PGM natively, PNG/BMP/GIF/TIFF/JPEG/WebP through Pillow).

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

Map files come from users, so every read is bounded and strict (issue 13):

- the YAML is a regular file of at most `MAX_MAP_YAML_BYTES`, UTF-8, parsed without aliases (an alias bomb expands
  exponentially; map_server YAML never needs one), nesting at most `safe_io.MAX_YAML_DEPTH` deep, no duplicate keys, a
  mapping at the top, every field type-checked;
- the image is a regular file (a FIFO, device or directory is refused before it is opened, and it is opened
  non-blocking and re-checked on the descriptor, so one swapped in between cannot block) of at most
  `max_image_bytes`, and its pixel count (from the PGM header / the image header Pillow reads lazily) is at most
  `max_pixels` BEFORE anything is decoded. Both caps are keywords of `load_map`, else the environment variables
  `MNEMO_MPC_MAX_MAP_IMAGE_BYTES` / `MNEMO_MPC_MAX_MAP_PIXELS`, else `MAX_MAP_IMAGE_BYTES` / `MAX_MAP_PIXELS`;
- PGM follows the Netpbm grammar strictly: magic P2/P5, header integers plain decimal digits (no sign, underscore or
  exponent; at most 10 digits, checked before conversion), `#` comments, maxval 1..65535, P5 16-bit big-endian when
  maxval > 255, exactly width x height values. The spec lets more images follow the first; a map is one image, so
  anything after the raster other than whitespace (and, in P2, comments) is refused rather than ignored;
- PNG chunk checksums are verified (Pillow does not check the image data's), so a flipped bit is an error, not a
  different map; anything after IEND is refused.
"""

from __future__ import annotations

import io
import math
import os
import re
import struct
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mnemo_mpc.atomic import atomic_write_bytes, atomic_write_text
from mnemo_mpc.errors import InputError, MapFormatError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.safe_io import first_line, load_yaml, read_regular_file, show

MODES = ("trinary", "scale", "raw")
# What map_saver writes in trinary mode, and the thresholds that read those shades back exactly.
SAVE_FREE, SAVE_OCCUPIED, SAVE_UNKNOWN = 254, 0, 205
SAVE_OCCUPIED_THRESH, SAVE_FREE_THRESH = 0.65, 0.196

# A map YAML is a few hundred bytes; 64 KiB leaves room for comments and keeps the pure-Python parse (needed to
# refuse aliases) far below a second.
MAX_MAP_YAML_BYTES = 64 * 1024
# 25 Mpx = 5000 x 5000 cells = 250 m x 250 m at 5 cm, beyond a SLAM map of a large building. Loading needs about
# 3 bytes per pixel (decoded image + int8 grid; the float conversion runs in row blocks), but the planner's ESDF
# then needs about 32 bytes per pixel (float64 distances and scipy's int32 feature transform, inside and outside),
# ~0.8 GB at this cap. Raise it for a bigger machine with MNEMO_MPC_MAX_MAP_PIXELS.
MAX_MAP_PIXELS = 25_000_000
# Holds any binary PGM/PNG at the pixel cap and an 8-bit ASCII PGM (<= 4 bytes per value) of 32 Mpx.
MAX_MAP_IMAGE_BYTES = 128 * 1024 * 1024
MAX_PIXELS_ENV = "MNEMO_MPC_MAX_MAP_PIXELS"
MAX_IMAGE_BYTES_ENV = "MNEMO_MPC_MAX_MAP_IMAGE_BYTES"
# Formats handed to Pillow (PGM is parsed here). Not EPS (Pillow would run Ghostscript) nor the long tail of
# formats nobody saves maps in.
PILLOW_FORMATS = ("PNG", "BMP", "GIF", "TIFF", "JPEG", "WEBP")

_PGM_MAX_DIGITS = 10  # header integers and raster values; bounds int() long before Python's digit limit
_BLOCK_PIXELS = 1 << 18  # pixels converted to float at a time
_P2_CHUNK_BYTES = 1 << 20  # ASCII raster parsed this many bytes at a time
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_WS = b" \t\n\r\v\f"  # Netpbm whitespace (isspace)
_WS_RE = re.compile(rb"[ \t\n\r\v\f]")
_NOT_WS_RE = re.compile(rb"[^ \t\n\r\v\f]")
_EOL_RE = re.compile(rb"[\n\r]")
_DIGITS_RE = re.compile(rb"[0-9]+")
_COMMENT_RE = re.compile(rb"#[^\n\r]*")
# P2 raster bytes: 0 whitespace, 1 digit, 2 anything else (after comments are blanked)
_P2_BYTE_KIND = np.full(256, 2, dtype=np.uint8)
_P2_BYTE_KIND[np.frombuffer(_WS, dtype=np.uint8)] = 0
_P2_BYTE_KIND[ord("0") : ord("9") + 1] = 1
_POW10 = 10 ** np.arange(_PGM_MAX_DIGITS, dtype=np.int64)


def map_limits(max_image_bytes: int | None = None, max_pixels: int | None = None) -> tuple[int, int]:
    """(max image bytes, max pixels): the arguments where given, else the environment variables, else the defaults."""
    return (
        _limit(max_image_bytes, MAX_IMAGE_BYTES_ENV, MAX_MAP_IMAGE_BYTES, "max_image_bytes"),
        _limit(max_pixels, MAX_PIXELS_ENV, MAX_MAP_PIXELS, "max_pixels"),
    )


def load_map(
    yaml_path: str | os.PathLike[str],
    *,
    max_image_bytes: int | None = None,
    max_pixels: int | None = None,
) -> OccupancyGrid:
    """Load a map_server map (YAML + image) as an `OccupancyGrid`. The caps are described in the module docstring."""
    yaml_path = Path(yaml_path)
    max_bytes, max_px = map_limits(max_image_bytes, max_pixels)
    meta = read_map_yaml(yaml_path)
    image_path = Path(meta["image"])
    if not image_path.is_absolute():
        image_path = yaml_path.parent / image_path
    image = _decode_image(image_path, max_bytes, max_px)
    h, w = image.shape
    res, origin = meta["resolution"], meta["origin"]
    if not math.isfinite(abs(origin[0]) + abs(origin[1]) + res * (h + w)):
        raise MapFormatError(f"{yaml_path}: fields 'resolution'/'origin': a {w}x{h} map at {res} m per pixel overflows")
    data = np.empty((h, w), dtype=np.int8)
    rows = max(1, _BLOCK_PIXELS // w)
    for r0 in range(0, h, rows):
        pixels, alpha = image.block(r0, r0 + rows)
        data[r0 : r0 + rows] = pixels_to_occupancy(
            pixels, alpha, meta["mode"], meta["negate"], meta["occupied_thresh"], meta["free_thresh"]
        )
    if meta["mode"] == "scale":
        occ_t, free_t = 100, 0
    elif meta["mode"] == "raw":
        occ_t = min(max(int(round(100 * meta["occupied_thresh"])), 1), 100)
        free_t = min(max(int(round(100 * meta["free_thresh"])), 0), occ_t - 1)
    else:
        occ_t, free_t = 65, 25  # trinary data is only 0 / 100 / -1; any valid thresholds classify it the same
    return OccupancyGrid(np.flipud(data), res, tuple(origin), occ_t, free_t)


def read_map_yaml(yaml_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse and validate the YAML metadata; defaults as in map_server (mode trinary, thresholds 0.65 / 0.196)."""
    yaml_path = Path(yaml_path)
    doc = load_yaml(yaml_path, MAX_MAP_YAML_BYTES, "map YAML", MapFormatError)
    if not isinstance(doc, dict):
        raise MapFormatError(f"{yaml_path}: expected a mapping with keys image, resolution, origin, ...")
    for key in ("image", "resolution", "origin"):
        if key not in doc:
            raise MapFormatError(f"{yaml_path}: missing required field '{key}'")
    image = doc["image"]
    if not isinstance(image, str) or not image or "\x00" in image:
        raise MapFormatError(f"{yaml_path}: field 'image' must be a file name, got {show(image)}")
    res = _number(doc["resolution"], yaml_path, "resolution")
    if not res > 0:
        raise MapFormatError(f"{yaml_path}: field 'resolution' must be > 0 metres per pixel, got {res}")
    origin = doc["origin"]
    if not isinstance(origin, list) or len(origin) != 3:
        raise MapFormatError(f"{yaml_path}: field 'origin' must be [x, y, yaw], got {show(origin)}")
    origin = [_number(v, yaml_path, f"origin[{i}]") for i, v in enumerate(origin)]
    negate = doc.get("negate", 0)
    if not isinstance(negate, int) or negate not in (0, 1):
        raise MapFormatError(f"{yaml_path}: field 'negate' must be 0 or 1, got {show(negate)}")
    occ = _number(doc.get("occupied_thresh", SAVE_OCCUPIED_THRESH), yaml_path, "occupied_thresh")
    free = _number(doc.get("free_thresh", SAVE_FREE_THRESH), yaml_path, "free_thresh")
    if not 0.0 <= free < occ <= 1.0:
        raise MapFormatError(
            f"{yaml_path}: expected 0 <= free_thresh < occupied_thresh <= 1, got free_thresh={free}, "
            f"occupied_thresh={occ}"
        )
    mode = doc.get("mode", "trinary")
    if not isinstance(mode, str) or mode.lower() not in MODES:
        raise MapFormatError(f"{yaml_path}: field 'mode' must be one of {MODES}, got {show(mode)}")
    return {
        "image": image,
        "resolution": res,
        "origin": origin,
        "negate": int(negate),
        "occupied_thresh": occ,
        "free_thresh": free,
        "mode": mode.lower(),
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


@dataclass(frozen=True)
class _Image:
    """A decoded image in its stored form (integers for every format but Pillow's I/F): values are `array * scale`
    (0..255 for map_server), colour channels averaged, the last channel alpha when `has_alpha`."""

    array: np.ndarray  # (H, W) or (H, W, C)
    scale: float = 1.0
    has_alpha: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return self.array.shape[:2]

    def block(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows r0:r1 as (values 0..255 float, alpha or None): float only a block at a time, to bound memory."""
        arr = self.array[r0:r1].astype(float)
        alpha = None
        if arr.ndim == 3:
            if self.has_alpha:
                alpha, arr = arr[..., -1], arr[..., :-1]
            arr = arr.mean(axis=2)
        if self.scale != 1.0:
            arr = arr * self.scale
        return arr, alpha


def _decode_image(path: Path, max_bytes: int, max_pixels: int) -> _Image:
    raw = read_regular_file(path, max_bytes, "map image", MapFormatError, f" ({MAX_IMAGE_BYTES_ENV} raises it)")
    if raw[:2] in (b"P2", b"P5"):
        values, maxval = _decode_pgm(raw, path, max_pixels)
        return _Image(values, 255.0 / maxval)
    if raw[:1] == b"P" and raw[1:2].isdigit():
        raise MapFormatError(
            f"{path}: PNM type {raw[:2].decode('ascii')} is not a greyscale map; expected P2 or P5 PGM"
        )
    if raw[:8] == _PNG_SIGNATURE:
        _check_png_chunks(raw, path, max_pixels)
    return _decode_pillow(raw, path, max_pixels)


def _decode_pillow(raw: bytes, path: Path, max_pixels: int) -> _Image:
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's format notes are not the user's business...
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # ...but a bomb is an error
            with Image.open(io.BytesIO(raw), formats=PILLOW_FORMATS) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise _over_pixel_cap(path, "image", w, h, max_pixels)
                im.load()
                mode = im.mode
                if mode in ("P", "PA"):  # palette indices are not grey levels: take the colours
                    keep_alpha = mode == "PA" or "transparency" in im.info
                    im, mode = im.convert("RGBA" if keep_alpha else "RGB"), "RGBA" if keep_alpha else "RGB"
                elif mode not in ("1", "L", "LA", "RGB", "RGBA", "I", "F") and not mode.startswith("I;16"):
                    im, mode = im.convert("RGBA" if "A" in mode else "RGB"), "RGBA" if "A" in mode else "RGB"
                arr = np.asarray(im)
    except MapFormatError:
        raise
    except Image.UnidentifiedImageError as exc:
        raise MapFormatError(f"{path}: unreadable map image (not a PGM, {', '.join(PILLOW_FORMATS)} image)") from exc
    except Exception as exc:  # Pillow raises many types for a corrupt file; all mean the same to the user
        raise MapFormatError(f"{path}: unreadable map image ({first_line(exc)})") from exc
    if (arr.ndim != 2 and not (arr.ndim == 3 and arr.shape[2] in (2, 3, 4))) or 0 in arr.shape:
        raise MapFormatError(f"{path}: image data: unexpected decoded shape {arr.shape} (mode {mode})")
    if mode == "1":
        return _Image(arr, 255.0)
    if mode in ("I", "F") or mode.startswith("I;16"):
        top = float(arr.max())
        return _Image(arr, 255.0 / max(top, 1.0) if top > 255 else 1.0)
    return _Image(arr, 1.0, has_alpha=arr.ndim == 3 and arr.shape[2] in (2, 4))


def _check_png_chunks(raw: bytes, path: Path, max_pixels: int) -> None:
    """Walk the PNG chunks and verify each CRC-32 (Pillow checks the header chunks' but not the image data's, so a
    flipped bit in IDAT would decode as a different map); check the IHDR size against the pixel cap."""
    pos, view = len(_PNG_SIGNATURE), memoryview(raw)
    while True:
        if pos + 12 > len(raw):
            raise MapFormatError(f"{path}: PNG truncated at byte {pos} (no IEND chunk)")
        length, ctype = struct.unpack_from(">I4s", raw, pos)
        name = ctype.decode("latin-1")
        if length > 0x7FFFFFFF or pos + 12 + length > len(raw):
            raise MapFormatError(f"{path}: PNG chunk {name!r} at byte {pos}: length {length} runs past the file end")
        (crc,) = struct.unpack_from(">I", raw, pos + 8 + length)
        if zlib.crc32(view[pos + 4 : pos + 8 + length]) != crc:
            raise MapFormatError(f"{path}: PNG chunk {name!r} at byte {pos}: CRC mismatch (corrupted file)")
        if pos == len(_PNG_SIGNATURE):
            if ctype != b"IHDR" or length != 13:
                raise MapFormatError(f"{path}: PNG header: expected a 13-byte IHDR chunk first, got {name!r}")
            width, height = struct.unpack_from(">II", raw, pos + 8)
            if width * height > max_pixels:
                raise _over_pixel_cap(path, "PNG", width, height, max_pixels)
        pos += 12 + length
        if ctype == b"IEND":
            break
    if pos != len(raw):
        raise MapFormatError(f"{path}: PNG has {len(raw) - pos} bytes after the IEND chunk")


def read_pgm_bytes(
    raw: bytes, path: str | os.PathLike[str] = "<bytes>", *, max_pixels: int | None = None
) -> np.ndarray:
    """Parse a P2 (ASCII) or P5 (binary) PGM; returns values scaled to 0..255 (float), top row first."""
    values, maxval = _decode_pgm(raw, path, map_limits(None, max_pixels)[1])
    return values * (255.0 / maxval)


def _decode_pgm(raw: bytes, path: str | os.PathLike[str], max_pixels: int) -> tuple[np.ndarray, int]:
    """(values (H, W) uint8 or uint16, maxval), strictly per the Netpbm PGM spec (see the module docstring)."""
    magic = raw[:2]
    if magic not in (b"P2", b"P5"):
        raise MapFormatError(f"{path}: PGM magic: expected P2 or P5, got {show(magic)}")
    pos, header = 2, []
    if pos >= len(raw) or (raw[pos] not in _WS and raw[pos : pos + 1] != b"#"):
        raise MapFormatError(f"{path}: PGM magic: expected whitespace after {magic.decode()}")
    for name in ("width", "height", "maxval"):
        pos = _skip_header_space(raw, pos, path, name)
        m = _DIGITS_RE.match(raw, pos)
        if m is None:
            raise MapFormatError(
                f"{path}: PGM {name}: expected a plain decimal integer, got {show(raw[pos : pos + 12])}"
            )
        if m.end() - pos > _PGM_MAX_DIGITS:
            raise MapFormatError(f"{path}: PGM {name}: {m.end() - pos} digits, more than {_PGM_MAX_DIGITS}")
        end = m.end()
        follows = raw[end : end + 1]
        # a token ends at whitespace or a comment; the raster needs at least one whitespace byte after maxval
        ends_ok = follows == b"#" or (follows != b"" and follows[0] in _WS)
        if not ends_ok and (follows != b"" or name == "maxval"):
            raise MapFormatError(
                f"{path}: PGM {name}: expected a plain decimal integer, got {show(raw[pos : end + 1])}"
            )
        header.append(int(raw[pos:end]))
        pos = end
    width, height, maxval = header
    if width < 1 or height < 1:
        raise MapFormatError(f"{path}: PGM size must be positive, got {width}x{height}")
    if not 1 <= maxval <= 65535:
        raise MapFormatError(f"{path}: PGM maxval must be in 1..65535, got {maxval}")
    count = width * height
    if count > max_pixels:
        raise _over_pixel_cap(path, "PGM", width, height, max_pixels)
    dtype = np.dtype(">u2") if maxval > 255 else np.dtype("u1")
    if magic == b"P5":
        if raw[pos] not in _WS:
            raise MapFormatError(f"{path}: PGM maxval: expected one whitespace byte before the binary raster")
        start = pos + 1  # exactly one whitespace byte separates maxval from the raster
        need = count * dtype.itemsize
        have = len(raw) - start
        if have < need:
            raise MapFormatError(f"{path}: PGM raster too short: {have} of {need} bytes for {width}x{height}")
        extra = _NOT_WS_RE.search(raw, start + need)
        if extra is not None:
            raise MapFormatError(
                f"{path}: PGM raster: {len(raw) - start - need} bytes after the {width}x{height} raster "
                "(a second image, or a wrong size in the header)"
            )
        values = np.frombuffer(raw, dtype=dtype, count=count, offset=start)
    else:
        values = _parse_plain_raster(raw, pos, count, maxval, path, f"{width}x{height}")
    if values.size and int(values.max()) > maxval:
        raise MapFormatError(f"{path}: PGM value {int(values.max())} exceeds maxval {maxval}")
    return values.reshape(height, width), maxval


def _skip_header_space(raw: bytes, pos: int, path: str | os.PathLike[str], name: str) -> int:
    """Index of the next header token at or after `pos`, skipping whitespace and `#` comments."""
    while pos < len(raw):
        if raw[pos] in _WS:
            pos += 1
        elif raw[pos : pos + 1] == b"#":
            eol = _EOL_RE.search(raw, pos)
            if eol is None:
                break
            pos = eol.end()
        else:
            return pos
    raise MapFormatError(f"{path}: truncated PGM header (expected {name}; the header holds width, height, maxval)")


def _parse_plain_raster(
    raw: bytes, pos: int, count: int, maxval: int, path: str | os.PathLike[str], size: str
) -> np.ndarray:
    """The P2 values after the header: whitespace-separated plain decimal integers, `#` comments allowed. Parsed a
    chunk at a time (cut at whitespace outside a comment), digits converted with numpy, so memory stays a small
    multiple of the file and a 25 Mpx ASCII map takes seconds, not a list of 25 M Python objects."""
    out = np.empty(count, dtype=np.uint16 if maxval > 255 else np.uint8)
    n = 0
    while pos < len(raw):
        cut = _plain_cut(raw, pos, pos + _P2_CHUNK_BYTES)
        chunk = raw[pos:cut]
        offset, pos = pos, cut
        if b"#" in chunk:  # blank comments out byte for byte, so offsets in messages stay true
            chunk = _COMMENT_RE.sub(lambda m: b" " * len(m.group()), chunk)
        a = np.frombuffer(chunk, dtype=np.uint8)
        kind = _P2_BYTE_KIND[a]
        if kind.max(initial=0) == 2:
            i = int(np.argmax(kind == 2))
            raise MapFormatError(
                f"{path}: PGM raster value: expected plain decimal integers, found {show(chunk[i : i + 1])} "
                f"at byte {offset + i}"
            )
        digits = np.flatnonzero(kind == 1)
        if digits.size == 0:
            continue
        new = np.empty(digits.size, dtype=bool)
        new[0] = True
        np.not_equal(np.diff(digits), 1, out=new[1:])
        starts = np.flatnonzero(new)  # first digit of each value, as an index into `digits`
        lengths = np.diff(starts, append=digits.size)
        if int(lengths.max()) > _PGM_MAX_DIGITS:
            at = int(digits[starts[np.argmax(lengths > _PGM_MAX_DIGITS)]])
            raise MapFormatError(f"{path}: PGM raster value: more than {_PGM_MAX_DIGITS} digits at byte {offset + at}")
        if n + starts.size > count:
            raise MapFormatError(
                f"{path}: PGM raster has more than {count} values for {size} (a second image, or a wrong size)"
            )
        last = (starts + lengths - 1)[np.cumsum(new) - 1]  # each digit's value's last digit
        power = _POW10[last - np.arange(digits.size)]
        values = np.add.reduceat((a[digits] - 48).astype(np.int64) * power, starts)
        top = int(values.max())
        if top > maxval:
            raise MapFormatError(f"{path}: PGM value {top} exceeds maxval {maxval}")
        out[n : n + starts.size] = values
        n += starts.size
    if n < count:
        raise MapFormatError(f"{path}: PGM raster has {n} of {count} values for {size}")
    return out


def _plain_cut(raw: bytes, pos: int, target: int) -> int:
    """A chunk end at or after `target`: a whitespace byte outside any comment, or just past a comment's end."""
    if target >= len(raw):
        return len(raw)
    ws = _WS_RE.search(raw, target)
    cut = ws.start() if ws is not None else len(raw)
    line_start = max(raw.rfind(b"\n", pos, cut), raw.rfind(b"\r", pos, cut), pos)
    hash_at = raw.find(b"#", line_start, cut)
    if hash_at < 0:
        return cut
    eol = _EOL_RE.search(raw, hash_at)
    return eol.end() if eol is not None else len(raw)


def _over_pixel_cap(path: str | os.PathLike[str], what: str, width: int, height: int, cap: int) -> MapFormatError:
    return MapFormatError(
        f"{path}: {what} size: {width}x{height} pixels is over the {cap}-pixel cap ({MAX_PIXELS_ENV} raises it)"
    )


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
        raise MapFormatError(f"{path}: field '{name}' must be a number, got {show(value)}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise MapFormatError(f"{path}: field '{name}' must be finite, got {show(value)}")
    return value


def _limit(value: int | None, env: str, default: int, name: str) -> int:
    if value is None:
        text = os.environ.get(env, "").strip()
        if not text:
            return default
        if not text.isdigit() or len(text) > 18 or int(text) < 1:
            raise InputError(f"{env}: expected a positive integer, got {show(text)}")
        return int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"load_map.{name}: expected a positive integer, got {show(value)}")
    return value
