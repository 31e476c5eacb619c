"""Map-file fuzz harness (issue 13): hostile map_server maps against `mnemo_mpc.planning.mapio.load_map`.

Seeded generators build cases in families: valid maps (PGM P2/P5 at every maxval, PNG/BMP/TIFF in every Pillow
mode, odd but legal paths), YAML alias bombs in every field, hostile YAML (non-UTF-8, binary, deep, huge numbers,
tags, duplicate keys, wrong types), special files as the image (/dev/zero, FIFOs, directories, symlinks, sparse
files over the size cap), huge declared dimensions (PGM headers, PNG IHDR / BMP / GIF headers claiming 12000x12000
and more, written without the pixels), bad PGM tokens, random byte mutations and truncations of valid YAML, PGM and
PNG files.

Each case runs in a worker subprocess (a small pool; each worker serves many cases): the parent kills a worker whose
case takes more than `CASE_TIMEOUT_S` (a hang); the worker measures its peak RSS per case (VmHWM, reset through
/proc/self/clear_refs) and runs under an address-space limit as a backstop. A case is classified against an oracle:
generated valid files carry their expected grid (computed here from the generator's pixels with map_server's rules);
generated invalid files must raise `MapFormatError`; a mutated or truncated file is judged by a reference decoder in
this module (yaml.safe_load + the map_server field rules, a regex PGM parser straight from the Netpbm spec, a PNG
chunk-CRC walk + Pillow), written independently of the loader. Bugs: any exception but `MapFormatError`, a
`MapFormatError` whose message names no file, a hang, a crash, a case over `RSS_LIMIT_BYTES`, an invalid file that
loads (silent accept), a valid file that is refused or loads to a different grid.

    python tests/fuzz_maps.py --cases 2000 --out results/fuzz_maps.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import random
import re
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

CASE_TIMEOUT_S = 5.0
RSS_LIMIT_BYTES = 1 << 30
MODES = ("trinary", "scale", "raw")
# family -> share of the cases (sums to 1)
FAMILIES = {
    "valid_pgm": 0.10,
    "valid_pillow": 0.05,
    "valid_paths": 0.01,
    "alias_bomb": 0.04,
    "yaml_hostile": 0.12,
    "image_special": 0.05,
    "huge_dims": 0.06,
    "bad_tokens": 0.15,
    "mutate_yaml": 0.12,
    "mutate_pgm_p5": 0.10,
    "mutate_pgm_p2": 0.08,
    "mutate_png": 0.08,
    "truncate": 0.04,
}
BUG_CLASSES = (
    "other_exception",
    "message_without_file",
    "hang",
    "crash",
    "over_memory",
    "silent_accept",
    "wrong_grid",
    "rejected_valid",
)


@dataclass
class Case:
    """Files to create (name -> bytes, or a special: ("fifo",), ("dir",), ("symlink", target), ("sparse", size),
    ("socket",)), the YAML to load, and what must happen: expect "valid" (with the expected grid) or "invalid"."""

    id: int
    family: str
    sub: str
    files: dict[str, Any]
    expect: str
    expected: dict[str, Any] | None = None
    yaml_name: str = "map.yaml"
    kwargs: dict[str, Any] = field(default_factory=dict)
    judged_by_reference: bool = False


# ------------------------------------------------------------------------------------------------------------------
# Reference: map_server's rules and the file formats, written from the specs, independent of mapio
# ------------------------------------------------------------------------------------------------------------------


class RefInvalid(Exception):
    """The reference decoder refuses the file."""


def ref_occupancy(values: np.ndarray, alpha: np.ndarray | None, meta: dict[str, Any]) -> np.ndarray:
    """map_server (nav2_map_server map_io.cpp) per pixel, values 0..255 float, top row first -> int8."""
    occ, free = meta["occupied_thresh"], meta["free_thresh"]
    if meta["mode"] == "raw":
        v = np.rint(values)
        return np.where((v >= 0) & (v <= 100), v, -1).astype(np.int8)
    p = values / 255.0 if meta["negate"] else (255.0 - values) / 255.0
    out = np.full(values.shape, -1, np.int8)
    if meta["mode"] == "trinary":
        out[p > occ] = 100
        out[p < free] = 0
        return out
    out[p >= occ] = 100
    out[p < free] = 0
    mid = (p >= free) & (p < occ)
    out[mid] = np.rint(100.0 * (p[mid] - free) / (occ - free)).astype(np.int8)
    if alpha is not None:
        out[alpha < 255] = -1
    return out


def ref_thresholds(meta: dict[str, Any]) -> tuple[int, int]:
    if meta["mode"] == "scale":
        return 100, 0
    if meta["mode"] == "raw":
        occ = min(max(int(round(100 * meta["occupied_thresh"])), 1), 100)
        return occ, min(max(int(round(100 * meta["free_thresh"])), 0), occ - 1)
    return 65, 25


def expected_grid(values: np.ndarray, alpha: np.ndarray | None, meta: dict[str, Any]) -> dict[str, Any]:
    data = np.flipud(ref_occupancy(values, alpha, meta))
    occ_t, free_t = ref_thresholds(meta)
    return {
        "shape": data.shape,
        "data": data.tobytes(),
        "resolution": float(meta["resolution"]),
        "origin": tuple(float(v) for v in meta["origin"]),
        "thresholds": (occ_t, free_t),
    }


def _ref_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RefInvalid("not a number")
    try:
        f = float(v)
    except OverflowError as exc:
        raise RefInvalid("overflow") from exc
    if not np.isfinite(f):
        raise RefInvalid("not finite")
    return f


def ref_meta(text_bytes: bytes) -> dict[str, Any]:
    """The map YAML per map_server's documented fields; aliases and duplicate keys refused (mapio's documented
    policy), UTF-8 only."""
    try:
        text = text_bytes.decode("utf-8")
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
        if any(isinstance(e, yaml.AliasEvent) for e in events):
            raise RefInvalid("alias")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, yaml.MappingNode):
                keys = [(k.tag, k.value) for k, _ in n.value if isinstance(k, yaml.ScalarNode)]
                if len(keys) != len(set(keys)):
                    raise RefInvalid("duplicate key")
                stack.extend(v for pair in n.value for v in pair)
            elif isinstance(n, yaml.SequenceNode):
                stack.extend(n.value)
        doc = yaml.safe_load(text)
    except (UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError) as exc:
        raise RefInvalid(f"yaml: {type(exc).__name__}") from exc
    if not isinstance(doc, dict) or not all(k in doc for k in ("image", "resolution", "origin")):
        raise RefInvalid("fields")
    image = doc["image"]
    if not isinstance(image, str) or not image or "\x00" in image:
        raise RefInvalid("image")
    res = _ref_number(doc["resolution"])
    if res <= 0:
        raise RefInvalid("resolution")
    origin = doc["origin"]
    if not isinstance(origin, list) or len(origin) != 3:
        raise RefInvalid("origin")
    origin = [_ref_number(v) for v in origin]
    negate = doc.get("negate", 0)
    if not isinstance(negate, int) or negate not in (0, 1):
        raise RefInvalid("negate")
    occ = _ref_number(doc.get("occupied_thresh", 0.65))
    free = _ref_number(doc.get("free_thresh", 0.196))
    if not 0 <= free < occ <= 1:
        raise RefInvalid("thresholds")
    mode = doc.get("mode", "trinary")
    if not isinstance(mode, str) or mode.lower() not in MODES:
        raise RefInvalid("mode")
    return {
        "image": image,
        "resolution": res,
        "origin": origin,
        "negate": int(negate),
        "occupied_thresh": occ,
        "free_thresh": free,
        "mode": mode.lower(),
    }


_SEP = rb"(?:[ \t\n\r\v\f]|#[^\n\r]*[\n\r])+"
_REF_PGM_HEADER = re.compile(rb"(P[25])" + _SEP + rb"([0-9]+)" + _SEP + rb"([0-9]+)" + _SEP + rb"([0-9]+)")


def ref_pgm(raw: bytes, max_pixels: int = 25_000_000) -> tuple[np.ndarray, None]:
    """Netpbm PGM by regular expressions (small files only): values scaled to 0..255."""
    m = _REF_PGM_HEADER.match(raw)
    if m is None:
        raise RefInvalid("pgm header")
    if any(len(g) > 10 for g in m.groups()[1:]):
        raise RefInvalid("pgm digits")
    w, h, maxval = (int(g) for g in m.groups()[1:])
    if w < 1 or h < 1 or not 1 <= maxval <= 65535 or w * h > max_pixels:
        raise RefInvalid("pgm size")
    rest = raw[m.end() :]
    if m.group(1) == b"P5":
        if not rest or rest[:1] not in b" \t\n\r\v\f":
            raise RefInvalid("pgm separator")
        bps = 2 if maxval > 255 else 1
        body, tail = rest[1 : 1 + w * h * bps], rest[1 + w * h * bps :]
        if len(body) < w * h * bps or tail.strip(b" \t\n\r\v\f"):
            raise RefInvalid("pgm raster length")
        values = np.frombuffer(body, ">u2" if bps == 2 else "u1").astype(float)
    else:
        if rest and rest[:1] not in b" \t\n\r\v\f#":
            raise RefInvalid("pgm separator")
        tokens = re.sub(rb"#[^\n\r]*", b" ", rest).split()
        if len(tokens) != w * h or not all(re.fullmatch(rb"[0-9]{1,10}", t) for t in tokens):
            raise RefInvalid("pgm raster tokens")
        values = np.array([int(t) for t in tokens], dtype=float)
    if values.max() > maxval:
        raise RefInvalid("pgm value over maxval")
    return (values * (255.0 / maxval)).reshape(h, w), None


def ref_png(raw: bytes) -> tuple[np.ndarray, np.ndarray | None]:
    """PNG: every chunk's CRC-32 verified, nothing after IEND, then Pillow decodes the pixels."""
    pos = 8
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise RefInvalid("png signature")
    while True:
        if pos + 12 > len(raw):
            raise RefInvalid("png truncated")
        (n,) = struct.unpack(">I", raw[pos : pos + 4])
        ctype = raw[pos + 4 : pos + 8]
        if pos + 12 + n > len(raw):
            raise RefInvalid("png chunk length")
        if zlib.crc32(raw[pos + 4 : pos + 8 + n]) != struct.unpack(">I", raw[pos + 8 + n : pos + 12 + n])[0]:
            raise RefInvalid("png crc")
        pos += 12 + n
        if ctype == b"IEND":
            break
    if pos != len(raw):
        raise RefInvalid("png trailing")
    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw), formats=["PNG"]) as im:
            im.load()
            return pillow_values(im)
    except Exception as exc:
        raise RefInvalid(f"png decode: {type(exc).__name__}") from exc


def pillow_values(im: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """map_server's reading of a decoded image: colour averaged, alpha separate, 1-bit as 0/255, 16-bit scaled."""
    if im.mode in ("P", "PA"):
        im = im.convert("RGBA" if im.mode == "PA" or "transparency" in im.info else "RGB")
    arr = np.asarray(im).astype(float)
    alpha = None
    if im.mode == "1":
        return arr * 255.0, None
    if im.mode in ("I", "F") or im.mode.startswith("I;16"):
        top = arr.max()
        return (arr * (255.0 / max(top, 1.0)) if top > 255 else arr), None
    if arr.ndim == 3:
        if im.mode in ("LA", "RGBA"):
            alpha, arr = arr[..., -1], arr[..., :-1]
        arr = arr.mean(axis=2)
    return arr, alpha


def reference_load(files: dict[str, Any], yaml_name: str) -> dict[str, Any]:
    """Expected grid of a map made only of plain files, or RefInvalid."""
    meta = ref_meta(files[yaml_name])
    image = files.get(meta["image"])
    if not isinstance(image, bytes):
        raise RefInvalid("image missing")
    if image[:2] in (b"P2", b"P5"):
        values, alpha = ref_pgm(image)
    elif image[:8] == b"\x89PNG\r\n\x1a\n":
        values, alpha = ref_png(image)
    else:
        raise RefInvalid("image format")
    h, w = values.shape
    if not np.isfinite(abs(meta["origin"][0]) + abs(meta["origin"][1]) + meta["resolution"] * (h + w)):
        raise RefInvalid("extent")
    return expected_grid(values, alpha, meta)


# ------------------------------------------------------------------------------------------------------------------
# Generators
# ------------------------------------------------------------------------------------------------------------------


def _yaml_text(meta: dict[str, Any], rng: random.Random) -> bytes:
    """A map YAML in one of the layouts real tools write (block or flow origin, comments, key order)."""
    keys = list(meta)
    if rng.random() < 0.3:
        rng.shuffle(keys)
    lines = ["# map" if rng.random() < 0.3 else ""]
    for k in keys:
        v = meta[k]
        if isinstance(v, list):
            v = "[" + ", ".join(repr(float(x)) for x in v) + "]"
        elif isinstance(v, float):
            v = repr(v)
        lines.append(f"{k}: {v}")
    return ("\n".join(lines) + "\n").encode()


def random_meta(rng: random.Random, image: str, mode: str | None = None) -> dict[str, Any]:
    free = round(rng.uniform(0.0, 0.5), 3)
    occ = round(rng.uniform(free + 0.01, 1.0), 3)
    meta = {
        "image": image,
        "resolution": rng.choice([0.05, 0.1, 0.025, round(rng.uniform(0.01, 1.0), 4)]),
        "origin": [round(rng.uniform(-50, 50), 3), round(rng.uniform(-50, 50), 3), round(rng.uniform(-3, 3), 3)],
        "negate": rng.choice([0, 1]),
        "occupied_thresh": occ,
        "free_thresh": free,
        "mode": mode or rng.choice(MODES),
    }
    for keys in (("negate",), ("occupied_thresh", "free_thresh"), ("mode",)):
        if rng.random() < 0.15:
            for k in keys:  # the defaults (both thresholds at once: a default next to a random one may cross it)
                del meta[k]
    return meta


def _full_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {"negate": 0, "occupied_thresh": 0.65, "free_thresh": 0.196, "mode": "trinary", **meta}


def pgm_bytes(values: np.ndarray, maxval: int, binary: bool, rng: random.Random) -> bytes:
    """A PGM with randomly legal header layout: whitespace variants, comments anywhere the spec allows."""
    h, w = values.shape

    def sep() -> bytes:
        parts = [rng.choice([b" ", b"\n", b"\t", b"\r\n", b"  ", b"\n\n"])]
        if rng.random() < 0.2:
            parts.append(b"# comment " + bytes(rng.choice(b"abc 123#") for _ in range(rng.randint(0, 12))) + b"\n")
        return b"".join(parts)

    head = b"P5" if binary else b"P2"
    head += sep() + str(w).encode() + sep() + str(h).encode() + sep() + str(maxval).encode()
    if binary:
        body = values.astype(">u2" if maxval > 255 else "u1").tobytes()
        return head + rng.choice([b"\n", b" ", b"\t"]) + body + (b"\n" if rng.random() < 0.1 else b"")
    rows = []
    for row in values:
        rows.append(b" ".join(str(int(v)).encode() for v in row))
        if rng.random() < 0.05:
            rows.append(b"# raster comment")
    return head + b"\n" + b"\n".join(rows) + b"\n"


def random_pgm(rng: random.Random, binary: bool | None = None, max_side: int = 40) -> tuple[bytes, np.ndarray]:
    binary = rng.random() < 0.6 if binary is None else binary
    maxval = rng.choice([1, 15, 100, 254, 255, 255, 255, 256, 1000, 65535])
    h, w = rng.randint(1, max_side), rng.randint(1, max_side)
    nprng = np.random.default_rng(rng.randrange(2**32))
    if rng.random() < 0.5 and maxval >= 254:  # map_saver shades
        values = nprng.choice(np.array([0, 205, 254]), size=(h, w))
    else:
        values = nprng.integers(0, maxval + 1, size=(h, w))
    return pgm_bytes(values, maxval, binary, rng), values * (255.0 / maxval)


def valid_pgm_case(rng: random.Random, cid: int, family: str = "valid_pgm", binary: bool | None = None) -> Case:
    image, values = random_pgm(rng, binary)
    meta = random_meta(rng, "map.pgm")
    files = {"map.yaml": _yaml_text(meta, rng), "map.pgm": image}
    exp = expected_grid(values, None, _full_meta(meta))
    return Case(cid, family, "pgm", files, "valid", exp)


def _pillow_image(rng: random.Random) -> tuple[Any, np.ndarray, np.ndarray | None, str]:
    from PIL import Image

    h, w = rng.randint(1, 40), rng.randint(1, 40)
    nprng = np.random.default_rng(rng.randrange(2**32))
    kind = rng.choice(["L", "LA", "RGB", "RGBA", "1", "P", "I;16"])
    if kind == "I;16":
        arr = nprng.integers(0, rng.choice([200, 65536]), size=(h, w)).astype(np.uint16)
        im = Image.fromarray(arr)
    elif kind == "1":
        arr = nprng.integers(0, 2, size=(h, w)).astype(bool)
        im = Image.fromarray(arr)
    elif kind == "P":
        rgb = nprng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
        im = Image.fromarray(rgb).quantize(colors=rng.randint(2, 16))
    else:
        bands = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[kind]
        arr = nprng.integers(0, 256, size=(h, w, bands)).astype(np.uint8)
        if kind.endswith("A") and rng.random() < 0.5:
            arr[..., -1] = 255
        im = Image.fromarray(arr[..., 0] if bands == 1 else arr, mode=None)
    values, alpha = pillow_values(im)
    return im, values, alpha, kind


def valid_pillow_case(rng: random.Random, cid: int) -> Case:
    im, values, alpha, kind = _pillow_image(rng)
    fmt = rng.choice(["PNG", "PNG", "PNG", "BMP", "TIFF"])
    if fmt == "BMP" and kind not in ("L", "RGB", "1", "P"):
        fmt = "PNG"
    if fmt == "TIFF" and kind == "P":
        fmt = "PNG"
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    name = f"map.{fmt.lower()}"
    meta = random_meta(rng, name)
    files = {"map.yaml": _yaml_text(meta, rng), name: buf.getvalue()}
    return Case(cid, "valid_pillow", f"{fmt}_{kind}", files, "valid", expected_grid(values, alpha, _full_meta(meta)))


def valid_paths_case(rng: random.Random, cid: int) -> Case:
    image, values = random_pgm(rng)
    meta = random_meta(rng, "map.pgm")
    sub = rng.choice(["symlink", "subdir", "bom", "comments", "negate_bool", "mode_case", "leading_zeros"])
    files: dict[str, Any] = {"map.pgm": image}
    if sub == "symlink":
        meta["image"] = "link.pgm"
        files["link.pgm"] = ("symlink", "map.pgm")
    elif sub == "subdir":
        meta["image"] = "img/m.pgm"
        files = {"img": ("dir",), "img/m.pgm": image}
    elif sub == "negate_bool":
        meta["negate"] = bool(meta.get("negate", 0))
    elif sub == "mode_case":
        meta["mode"] = meta.get("mode", "trinary").upper()
    elif sub == "leading_zeros":
        raw = image
        m = re.match(rb"(P[25]" + _SEP + rb")([0-9]+)", raw)
        files["map.pgm"] = m.group(1) + b"000" + raw[m.end(1) :]
    text = _yaml_text(meta, rng)
    if sub == "bom":
        text = "\ufeff".encode() + text
    if sub == "comments":
        text = b"# saved by map_saver\n" + text.replace(b"\n", b"  # note\n", 2)
    files["map.yaml"] = text
    full = _full_meta(meta)
    full["negate"] = int(full["negate"])
    full["mode"] = full["mode"].lower()
    return Case(cid, "valid_paths", sub, files, "valid", expected_grid(values, None, full))


def _base_files(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    image, _ = random_pgm(rng, max_side=8)
    meta = random_meta(rng, "map.pgm")
    return {"map.pgm": image}, meta


def alias_bomb_case(rng: random.Random, cid: int) -> Case:
    files, meta = _base_files(rng)
    target = rng.choice(["mode", "origin", "negate", "image", "resolution", "occupied_thresh", "free_thresh", "extra"])
    depth, width = rng.randint(3, 12), rng.randint(3, 12)
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for d in range(1, depth):
        lines.append(f"l{d}: &l{d} [{', '.join([f'*l{d - 1}'] * width)}]")
    body = "\n".join(lines) + "\n"
    meta = {k: v for k, v in meta.items() if k != target}
    text = body + _yaml_text(meta, rng).decode()
    style = rng.choice(["alias", "merge"])
    if style == "merge":
        text += f"{target}: {{<<: *l{depth - 1}}}\n" if target != "extra" else f"<<: {{a: *l{depth - 1}}}\n"
    else:
        text += f"{target}: *l{depth - 1}\n"
    return Case(cid, "alias_bomb", f"{target}_{style}", {**files, "map.yaml": text.encode()}, "invalid")


def yaml_hostile_case(rng: random.Random, cid: int) -> Case:
    files, meta = _base_files(rng)
    good = _yaml_text(meta, rng)
    subs = [
        "non_utf8",
        "binary",
        "utf16",
        "over_cap",
        "deep",
        "huge_int",
        "huge_hex",
        "inf",
        "nan",
        "nul_image",
        "surrogate_image",
        "python_tag",
        "binary_tag",
        "set_tag",
        "top_list",
        "top_scalar",
        "empty",
        "multi_doc",
        "duplicate",
        "missing",
        "wrong_type",
        "negate_bad",
        "mode_bad",
        "thresh_bad",
        "origin_bad",
        "resolution_bad",
        "extent_overflow",
        "image_missing_file",
        "image_long_name",
    ]
    sub = rng.choice(subs)
    text: bytes
    if sub == "non_utf8":
        i = rng.randint(0, len(good))
        text = good[:i] + bytes([rng.choice([0x80, 0xC3, 0xFF, 0xFE, 0xED])]) + good[i:]
    elif sub == "binary":
        text = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
    elif sub == "utf16":
        text = good.decode().encode(rng.choice(["utf-16", "utf-16-le", "utf-32"]))
    elif sub == "over_cap":
        text = good + b"#" + b"x" * (64 * 1024 + rng.randint(0, 100000)) + b"\n"
    elif sub == "deep":
        n = rng.randint(17, 20000)
        text = good + f"extra: {'[' * n}{']' * n}\n".encode()
    elif sub in ("huge_int", "huge_hex"):
        key = rng.choice(["resolution", "negate", "occupied_thresh", "free_thresh", "mode", "image", "origin"])
        digits = rng.choice([400, 4001, 4301, 20000])
        num = ("0x" + "f" * digits) if sub == "huge_hex" else "9" * digits
        value = f"[{num}, 0, 0]" if key == "origin" else num
        text = _replace_key(good, key, value)
    elif sub in ("inf", "nan"):
        key = rng.choice(["resolution", "occupied_thresh", "free_thresh", "origin"])
        v = rng.choice([".inf", "-.inf", "1e400"]) if sub == "inf" else ".nan"
        text = _replace_key(good, key, f"[{v}, 0, 0]" if key == "origin" else v)
    elif sub == "nul_image":
        text = _replace_key(good, "image", '"map.pgm\\0"')
    elif sub == "surrogate_image":
        text = _replace_key(good, "image", '"map\\ud800.pgm"')
    elif sub == "python_tag":
        text = _replace_key(good, "image", "!!python/object/apply:os.getpid []")
    elif sub == "binary_tag":
        text = _replace_key(good, "image", "!!binary bWFwLnBnbQ==")
    elif sub == "set_tag":
        text = _replace_key(good, "origin", "!!set {a, b, c}")
    elif sub == "top_list":
        text = b"- " + good.replace(b"\n", b"\n  ")
    elif sub == "top_scalar":
        text = rng.choice([b"map.pgm\n", b"42\n", b"null\n", b"~\n", b"'image: map.pgm'\n"])
    elif sub == "empty":
        text = rng.choice([b"", b"\n", b"# only a comment\n", b"---\n"])
    elif sub == "multi_doc":
        text = good + b"---\n" + good
    elif sub == "duplicate":
        key = rng.choice(["image", "resolution", "origin"])
        text = good + _yaml_text({key: meta[key]}, rng)
    elif sub == "missing":
        key = rng.choice(["image", "resolution", "origin"])
        text = _yaml_text({k: v for k, v in meta.items() if k != key}, rng)
    elif sub == "wrong_type":
        key = rng.choice(["image", "resolution", "origin", "negate", "occupied_thresh", "free_thresh", "mode"])
        value = rng.choice(["[1, 2]", "{a: 1}", "true", "null", "''", "2026-01-01", '"0.05"'])
        if key == "negate" and value == "true":
            value = "[1]"
        if key == "image" and value == '"0.05"':
            value = "123"
        text = _replace_key(good, key, value)
    elif sub == "negate_bad":
        text = _replace_key(good, "negate", rng.choice(["2", "-1", "0.5", "1.0", '"1"', "yes_please"]))
    elif sub == "mode_bad":
        text = _replace_key(good, "mode", rng.choice(["fancy", "123", "[]", "trinary2", '""']))
    elif sub == "thresh_bad":
        occ, free = rng.choice([(0.5, 0.6), (1.5, 0.1), (0.5, -0.1), (0.3, 0.3), (0.0, 0.0)])
        text = _replace_key(_replace_key(good, "occupied_thresh", str(occ)), "free_thresh", str(free))
    elif sub == "origin_bad":
        text = _replace_key(good, "origin", rng.choice(["[0, 0]", "[0, 0, 0, 0]", "[a, 0, 0]", "[[0], 0, 0]", "0"]))
    elif sub == "resolution_bad":
        text = _replace_key(good, "resolution", rng.choice(["0", "-0.05", "-1", "abc", "true", "0.0"]))
    elif sub == "extent_overflow":
        text = _replace_key(good, "resolution", rng.choice(["1.0e+308", "1.7e+308"]))
    elif sub == "image_missing_file":
        text = _replace_key(good, "image", "nope.pgm")
    else:
        text = _replace_key(good, "image", "x" * rng.choice([300, 5000]) + ".pgm")
    return Case(cid, "yaml_hostile", sub, {**files, "map.yaml": text}, "invalid")


def _replace_key(text: bytes, key: str, value: str) -> bytes:
    lines = [ln for ln in text.decode().splitlines() if not ln.startswith(f"{key}:")]
    return ("\n".join(lines) + f"\n{key}: {value}\n").encode()


def image_special_case(rng: random.Random, cid: int) -> Case:
    _, meta = _base_files(rng)
    sub = rng.choice(
        [
            "dev_zero",
            "link_dev_zero",
            "fifo",
            "link_fifo",
            "dir",
            "dangling",
            "missing",
            "dev_null",
            "proc_status",
            "sparse_over_cap",
            "empty",
            "socket",
            "yaml_fifo",
            "yaml_dev_zero",
            "yaml_dir",
            "yaml_sparse",
        ]
    )
    files: dict[str, Any] = {}
    image = "map.pgm"
    yaml_name = "map.yaml"
    if sub == "dev_zero":
        image = "/dev/zero"
    elif sub == "link_dev_zero":
        files["map.pgm"] = ("symlink", "/dev/zero")
    elif sub == "fifo":
        files["map.pgm"] = ("fifo",)
    elif sub == "link_fifo":
        files["f"] = ("fifo",)
        files["map.pgm"] = ("symlink", "f")
    elif sub == "dir":
        files["map.pgm"] = ("dir",)
    elif sub == "dangling":
        files["map.pgm"] = ("symlink", "does-not-exist.pgm")
    elif sub == "dev_null":
        image = "/dev/null"
    elif sub == "proc_status":
        image = "/proc/self/status"
    elif sub == "sparse_over_cap":
        files["map.pgm"] = ("sparse", rng.choice([129 * 1024 * 1024, 4 * 1024**3]))
    elif sub == "empty":
        files["map.pgm"] = b""
    elif sub == "socket":
        files["map.pgm"] = ("socket",)
    meta["image"] = image  # "missing": no map.pgm is written
    text = _yaml_text(meta, rng)
    if sub.startswith("yaml_"):
        files["map.pgm"] = pgm_bytes(np.zeros((2, 2)), 255, True, rng)
        files["real.yaml"] = text
        special = {
            "yaml_fifo": ("fifo",),
            "yaml_dev_zero": ("symlink", "/dev/zero"),
            "yaml_dir": ("dir",),
            "yaml_sparse": ("sparse", 1 << 30),
        }[sub]
        files[yaml_name] = special
    else:
        files[yaml_name] = text
    return Case(cid, "image_special", sub, files, "invalid", yaml_name=yaml_name)


def _png_chunk(ctype: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", zlib.crc32(ctype + data))


def huge_dims_case(rng: random.Random, cid: int) -> Case:
    _, meta = _base_files(rng)
    sub = rng.choice(
        [
            "pgm_big",
            "pgm_digits",
            "pgm_product",
            "png_ihdr",
            "bmp_header",
            "gif_header",
            "tiff_header",
            "small_cap_pgm",
            "small_cap_png",
        ]
    )
    name, kwargs = "map.pgm", {}
    if sub == "pgm_big":
        w, h = rng.choice([(10**9, 10**9), (12000, 12000), (99999, 99999), (1, 4 * 10**9)])
        data = f"P{rng.choice([2, 5])}\n{w} {h}\n255\n".encode() + bytes(rng.randint(0, 64))
    elif sub == "pgm_digits":
        n = rng.choice([11, 20, 4001, 5000, 50000])
        which = rng.randrange(3)
        fields = ["4", "4", "255"]
        fields[which] = "9" * n
        data = f"P{rng.choice([2, 5])}\n{fields[0]} {fields[1]}\n{fields[2]}\n".encode() + bytes(16)
    elif sub == "pgm_product":
        w = rng.randint(5001, 99999)
        data = f"P5\n{w} {w}\n255\n".encode() + bytes(rng.randint(0, 1000))
    elif sub in ("png_ihdr", "small_cap_png"):
        name = "map.png"
        w, h = (12000, 12000) if sub == "png_ihdr" else (rng.randint(11, 30), rng.randint(11, 30))
        if sub == "png_ihdr":
            w, h = rng.choice([(12000, 12000), (100000, 100000), (70000, 1000), (2**31 - 1, 2**31 - 1)])
        color = rng.choice([0, 2, 6])
        raw_rows = bytes(64)
        data = (
            b"\x89PNG\r\n\x1a\n"
            + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw_rows))
            + _png_chunk(b"IEND", b"")
        )
        if sub == "small_cap_png":
            from PIL import Image

            buf = io.BytesIO()
            Image.fromarray(np.zeros((h, w), np.uint8)).save(buf, format="PNG")
            data = buf.getvalue()
            kwargs = {"max_pixels": 100}
    elif sub == "bmp_header":
        name = "map.bmp"
        w, h = rng.choice([(12000, 12000), (100000, 100000), (50000, -50000)])
        header = struct.pack("<2sIHHI", b"BM", 54 + 64, 0, 0, 54)
        info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 8, 0, 0, 2835, 2835, 0, 0)
        data = header + info + bytes(64)
    elif sub == "gif_header":
        name = "map.gif"
        data = (
            b"GIF89a"
            + struct.pack("<HH", 65535, 65535)
            + b"\x00\x00\x00"
            + b",\x00\x00\x00\x00"
            + struct.pack("<HH", 65535, 65535)
            + b"\x00\x08\x02\x4c\x01\x00;"
        )
    elif sub == "tiff_header":
        name = "map.tiff"
        entries = [
            (256, 4, 1, 12000),
            (257, 4, 1, 12000),
            (258, 3, 1, 8),
            (262, 3, 1, 1),
            (273, 4, 1, 8),
            (277, 3, 1, 1),
            (278, 4, 1, 12000),
            (279, 4, 1, 16),
        ]
        ifd = (
            struct.pack("<H", len(entries))
            + b"".join(
                struct.pack("<HHI", t, typ, n) + (struct.pack("<HH", v, 0) if typ == 3 else struct.pack("<I", v))
                for t, typ, n, v in entries
            )
            + struct.pack("<I", 0)
        )
        data = b"II*\x00" + struct.pack("<I", 8 + 16) + bytes(16) + ifd
    else:  # small_cap_pgm: a valid map over a configured cap
        data = pgm_bytes(np.zeros((20, 20)), 255, rng.random() < 0.5, rng)
        kwargs = {"max_pixels": rng.choice([1, 100, 399])}
    meta["image"] = name
    files = {"map.yaml": _yaml_text(meta, rng), name: data}
    return Case(cid, "huge_dims", sub, files, "invalid", kwargs=kwargs)


_BAD_TOKENS = [
    b"-255",
    b"+3",
    b"1_0",
    b"0x1f",
    b"1e2",
    b"3.0",
    "\u0663".encode(),
    "\u00bd".encode(),
    b"\x00",
    b"inf",
    b"nan",
    b"0b1",
    b"1,2",
    b"'3'",
    b"3a",
    b"\xff",
    b"0o7",
    b"\xef\xbc\x93",
]


def bad_tokens_case(rng: random.Random, cid: int) -> Case:
    _, meta = _base_files(rng)
    h, w, maxval = rng.randint(1, 6), rng.randint(1, 6), rng.choice([15, 255, 1000])
    values = np.random.default_rng(rng.randrange(2**32)).integers(0, maxval + 1, size=(h, w))
    sub = rng.choice(
        [
            "header_token",
            "raster_token",
            "over_maxval",
            "maxval_range",
            "zero_size",
            "no_ws_magic",
            "no_ws_raster",
            "comment_eol",
            "comment_before_raster",
            "other_magic",
            "extra_values",
            "fewer_values",
            "p5_trailing",
            "p5_short",
            "raster_digits",
        ]
    )
    header = [str(w).encode(), str(h).encode(), str(maxval).encode()]
    binary = rng.random() < 0.5
    tokens = [str(int(v)).encode() for v in values.ravel()]
    magic = b"P5" if binary else b"P2"
    body_sep = b"\n"
    trailing = b""
    if sub == "header_token":
        header[rng.randrange(3)] = rng.choice(_BAD_TOKENS)
    elif sub == "raster_token":
        binary, magic = False, b"P2"
        tokens[rng.randrange(len(tokens))] = rng.choice(_BAD_TOKENS)
    elif sub == "over_maxval":
        binary, magic = False, b"P2"
        tokens[rng.randrange(len(tokens))] = str(maxval + rng.randint(1, 70000)).encode()
    elif sub == "maxval_range":
        header[2] = rng.choice([b"0", b"65536", b"99999", b"4294967296"])
    elif sub == "zero_size":
        header[rng.randrange(2)] = b"0"
    elif sub == "no_ws_raster":
        binary, magic, body_sep = True, b"P5", b""
        if maxval > 255:
            values = values % 256
        values[0, 0] = rng.choice([ord("1"), ord("a"), 200])  # a non-whitespace byte right after maxval
    elif sub == "comment_before_raster":
        binary, magic, body_sep = True, b"P5", b"#c\n"
    elif sub == "other_magic":
        magic = rng.choice([b"P1", b"P3", b"P4", b"P6", b"P7", b"P8", b"P0", b"p5", b"P 5"])
    elif sub == "extra_values":
        binary, magic = False, b"P2"
        tokens += [b"0"] * rng.randint(1, 5)
    elif sub == "fewer_values":
        binary, magic = False, b"P2"
        tokens = tokens[: rng.randrange(len(tokens))]
    elif sub == "p5_trailing":
        binary, magic = True, b"P5"
        trailing = rng.choice([b"x", b"\x00", b"P5\n1 1\n255\n\x00", bytes([rng.randrange(33, 256)])])
    elif sub == "p5_short":
        binary, magic = True, b"P5"
        trailing = b"CUT"
    elif sub == "raster_digits":
        binary, magic = False, b"P2"
        tokens[rng.randrange(len(tokens))] = b"0" * rng.choice([11, 40, 5000])
    sep0 = b"" if sub == "no_ws_magic" else b"\n"
    head = magic + sep0 + header[0] + b" " + header[1] + b"\n" + header[2]
    if sub == "comment_eol":  # the header ends inside a comment
        data = magic + b"\n" + b" ".join(header[: rng.randint(0, 2)]) + b" # no end of line"
    elif binary:
        body = values.astype(">u2" if maxval > 255 else "u1").tobytes()
        if sub == "p5_short":
            body, trailing = body[: rng.randrange(len(body))], b""
        data = head + (body_sep if sub in ("no_ws_raster", "comment_before_raster") else b"\n") + body + trailing
    else:
        data = head + b"\n" + b" ".join(tokens) + b"\n" + trailing
    meta["image"] = "map.pgm"
    files = {"map.yaml": _yaml_text(meta, rng), "map.pgm": data}
    # Built to break the grammar; the reference confirms it (or, should a generator slip, judges the file as is).
    return _judged(cid, "bad_tokens", sub, files)


def _mutate(data: bytes, rng: random.Random, interesting: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["flip", "byte", "interesting", "insert", "delete", "dup"])
        if not b:
            b += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(len(b))
        if op == "flip":
            b[i] ^= 1 << rng.randrange(8)
        elif op == "byte":
            b[i] = rng.randrange(256)
        elif op == "interesting":
            b[i] = rng.choice(interesting)
        elif op == "insert":
            b[i:i] = bytes([rng.choice(interesting + bytes([rng.randrange(256)]))])
        elif op == "delete":
            del b[i : i + rng.randint(1, 4)]
        else:
            j = min(len(b), i + rng.randint(1, 8))
            b[i:i] = b[i:j]
    return bytes(b)


def _judged(cid: int, family: str, sub: str, files: dict[str, Any]) -> Case:
    try:
        return Case(cid, family, sub, files, "valid", reference_load(files, "map.yaml"), judged_by_reference=True)
    except RefInvalid as exc:
        return Case(cid, family, f"{sub}:{exc}", files, "invalid", judged_by_reference=True)


def mutate_case(rng: random.Random, cid: int, family: str) -> Case:
    if family == "mutate_png":
        im, _, _, kind = _pillow_image(rng)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        image, name = buf.getvalue(), "map.png"
    else:
        image, _ = random_pgm(rng, binary=family == "mutate_pgm_p5", max_side=12)
        name = "map.pgm"
    meta = random_meta(rng, name)
    files = {"map.yaml": _yaml_text(meta, rng), name: image}
    if family == "mutate_yaml":
        files["map.yaml"] = _mutate(files["map.yaml"], rng, b"&*!#:[]{},-'\"\\\n 0.e-x|>%@`\t~?")
    else:
        files[name] = _mutate(image, rng, b" \n\t#0123456789-+_Px\x00\xff")
    return _judged(cid, family, "mutated", files)


def truncate_case(rng: random.Random, cid: int) -> Case:
    which = rng.choice(["yaml", "pgm", "png"])
    if which == "png":
        im, _, _, _ = _pillow_image(rng)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        image, name = buf.getvalue(), "map.png"
    else:
        image, _ = random_pgm(rng, max_side=12)
        name = "map.pgm"
    meta = random_meta(rng, name)
    files = {"map.yaml": _yaml_text(meta, rng), name: image}
    key = "map.yaml" if which == "yaml" else name
    files[key] = files[key][: rng.randrange(len(files[key]))]
    return _judged(cid, "truncate", which, files)


def generate_cases(n: int, seed: int = 0) -> list[Case]:
    """`n` cases (at least one per family), seeded; each family's share as in FAMILIES."""
    cases: list[Case] = []
    for fi, (family, share) in enumerate(FAMILIES.items()):
        rng = random.Random(seed * 1000 + fi)
        for _ in range(max(1, round(n * share))):
            cid = len(cases)
            if family == "valid_pgm":
                case = valid_pgm_case(rng, cid)
            elif family == "valid_pillow":
                case = valid_pillow_case(rng, cid)
            elif family == "valid_paths":
                case = valid_paths_case(rng, cid)
            elif family == "alias_bomb":
                case = alias_bomb_case(rng, cid)
            elif family == "yaml_hostile":
                case = yaml_hostile_case(rng, cid)
            elif family == "image_special":
                case = image_special_case(rng, cid)
            elif family == "huge_dims":
                case = huge_dims_case(rng, cid)
            elif family == "bad_tokens":
                case = bad_tokens_case(rng, cid)
            elif family.startswith("mutate_"):
                case = mutate_case(rng, cid, family)
            else:
                case = truncate_case(rng, cid)
            cases.append(case)
    return cases


# ------------------------------------------------------------------------------------------------------------------
# Worker
# ------------------------------------------------------------------------------------------------------------------


def _materialise(case: Case, root: Path) -> list[socket.socket]:
    held = []
    for name, spec in sorted(case.files.items(), key=lambda kv: kv[0].count("/")):
        path = root / name
        if isinstance(spec, bytes):
            path.write_bytes(spec)
        elif spec[0] == "fifo":
            os.mkfifo(path)
        elif spec[0] == "dir":
            path.mkdir()
        elif spec[0] == "symlink":
            path.symlink_to(spec[1])
        elif spec[0] == "sparse":
            with open(path, "wb") as fh:
                fh.truncate(spec[1])
        elif spec[0] == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(path))
            held.append(s)
    return held


def _peak_rss_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load_loader(path: str | None) -> Any:
    """`load_map` of mnemo_mpc, or of the module at `path` (another implementation, e.g. a previous version, to
    show what the harness catches)."""
    if not path:
        from mnemo_mpc.planning.mapio import load_map

        return load_map
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz_maps_loader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_map


def run_case_here(case: Case, root: Path, load_map: Any = None) -> dict[str, Any]:
    """Materialise and load one case in this process; the outcome as a plain dict."""
    from mnemo_mpc.errors import MapFormatError

    load_map = load_map or load_loader(None)
    root.mkdir(parents=True, exist_ok=True)
    held = _materialise(case, root)
    per_case_rss = _peak_rss_reset()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"id": case.id}
    try:
        grid = load_map(root / case.yaml_name, **case.kwargs)
        out.update(
            outcome="loaded",
            shape=grid.data.shape,
            data=np.ascontiguousarray(grid.data).tobytes(),
            resolution=grid.resolution,
            origin=tuple(grid.origin),
            thresholds=(grid.occupied_thresh, grid.free_thresh),
        )
    except MapFormatError as exc:
        msg = str(exc)
        names = [str(root / case.yaml_name), case.yaml_name, "/dev/", "/proc/", str(root)]
        out.update(outcome="MapFormatError", detail=msg[:300], names_file=any(n in msg for n in names))
    except Exception as exc:  # noqa: BLE001 - the point is to see every other exception
        out.update(outcome="exception", detail=f"{type(exc).__name__}: {str(exc)[:300]}")
    out["wall_s"] = time.perf_counter() - t0
    out["rss_bytes"] = _peak_rss_bytes()
    out["rss_per_case"] = per_case_rss
    for s in held:
        s.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def _send(fh: Any, obj: Any) -> None:
    data = pickle.dumps(obj)
    fh.write(struct.pack(">Q", len(data)) + data)
    fh.flush()


def _recv(fh: Any) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack(">Q", head)
    return pickle.loads(fh.read(n))


def worker_main(tmp: str, loader: str | None = None) -> None:
    # A backstop so a memory bomb fails here instead of taking the machine: address space = now + 2 GiB.
    load_map = load_loader(loader)
    from PIL import Image  # noqa: F401

    import mnemo_mpc.planning.mapio  # noqa: F401 - imported before the limit is set

    vm = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            vm = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.RLIM_INFINITY))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the result pipe
    while True:
        try:
            case = _recv(stdin)
        except EOFError:
            return
        _send(stdout, run_case_here(case, Path(tmp) / f"case_{case.id}", load_map))


# ------------------------------------------------------------------------------------------------------------------
# Parent: pool, timeouts, classification
# ------------------------------------------------------------------------------------------------------------------


class _Worker:
    def __init__(self, tmp: str, loader: str | None, timeout_s: float) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", tmp] + (["--loader", loader] if loader else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.case: Case | None = None
        self.deadline = 0.0
        self.started = 0.0

    def submit(self, case: Case) -> None:
        self.case = case
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout_s
        _send(self.proc.stdin, case)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def classify(case: Case, res: dict[str, Any]) -> str:
    """The case's class: a bug class from BUG_CLASSES, or ok_loaded / ok_rejected."""
    outcome = res["outcome"]
    if outcome in ("hang", "crash"):
        return outcome
    if res.get("rss_bytes", 0) > RSS_LIMIT_BYTES:
        return "over_memory"
    if outcome == "exception":
        return "other_exception"
    if outcome == "MapFormatError":
        if not res.get("names_file", False):
            return "message_without_file"
        return "rejected_valid" if case.expect == "valid" else "ok_rejected"
    if case.expect == "invalid":
        return "silent_accept"
    exp = case.expected
    same = (
        tuple(res["shape"]) == tuple(exp["shape"])
        and res["data"] == exp["data"]
        and res["resolution"] == exp["resolution"]
        and tuple(res["origin"]) == tuple(exp["origin"])
        and tuple(res["thresholds"]) == tuple(exp["thresholds"])
    )
    return "ok_loaded" if same else "wrong_grid"


def run_fuzz(
    cases: list[Case],
    workers: int = 2,
    progress: bool = False,
    loader: str | None = None,
    timeout_s: float = CASE_TIMEOUT_S,
) -> tuple[dict[str, Any], list[tuple[Case, dict[str, Any], str]]]:
    """Run every case in a pool of worker subprocesses; (summary, [(case, result, class)]). `loader`: a file whose
    `load_map` to fuzz instead of mnemo_mpc's."""
    tmp = tempfile.mkdtemp(prefix="fuzz_maps_")
    pool = [_Worker(tmp, loader, timeout_s) for _ in range(max(1, workers))]
    todo = list(reversed(cases))
    results: list[tuple[Case, dict[str, Any], str]] = []
    t_start = time.monotonic()
    try:
        while todo or any(w.case is not None for w in pool):
            for w in pool:
                if w.case is None and todo:
                    w.submit(todo.pop())
            busy = [w for w in pool if w.case is not None]
            timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], timeout)
            now = time.monotonic()
            for i, w in enumerate(pool):
                if w.case is None:
                    continue
                res = None
                if w.proc.stdout in ready:
                    try:
                        res = _recv(w.proc.stdout)
                    except (EOFError, pickle.UnpicklingError):
                        res = {"id": w.case.id, "outcome": "crash", "detail": f"worker exit {w.proc.poll()}"}
                elif now >= w.deadline:
                    res = {"id": w.case.id, "outcome": "hang", "detail": f"no answer in {timeout_s} s"}
                if res is None:
                    continue
                res.setdefault("wall_s", now - w.started)
                case = w.case
                w.case = None
                results.append((case, res, classify(case, res)))
                if res["outcome"] in ("hang", "crash"):
                    w.kill()
                    shutil.rmtree(Path(tmp) / f"case_{case.id}", ignore_errors=True)
                    pool[i] = _Worker(tmp, loader, timeout_s)
                if progress and len(results) % 200 == 0:
                    print(f"{len(results)}/{len(cases)} cases", file=sys.stderr)
    finally:
        for w in pool:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            w.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarise(results, time.monotonic() - t_start)
    summary["hang_timeout_s"] = timeout_s
    return summary, results


def summarise(results: list[tuple[Case, dict[str, Any], str]], wall_s: float) -> dict[str, Any]:
    per_family: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case, res, cls in results:
        per_family[case.family][cls] += 1
        if cls in BUG_CLASSES and len(examples[cls]) < 5:
            examples[cls].append({"family": case.family, "sub": case.sub, "id": case.id, "detail": res.get("detail")})
    totals = Counter(cls for _, _, cls in results)
    valid = [r for c, r, _ in results if c.expect == "valid"]
    return {
        "cases": len(results),
        "bugs": sum(totals[b] for b in BUG_CLASSES),
        "totals": dict(sorted(totals.items())),
        "per_family": {f: dict(sorted(c.items())) for f, c in sorted(per_family.items())},
        "valid_cases": len(valid),
        "valid_loaded": sum(1 for c, _, cls in results if c.expect == "valid" and cls == "ok_loaded"),
        "judged_by_reference": sum(1 for c, _, _ in results if c.judged_by_reference),
        "judged_valid_by_reference": sum(1 for c, _, _ in results if c.judged_by_reference and c.expect == "valid"),
        "max_case_wall_s": max((r.get("wall_s", 0.0) for _, r, _ in results), default=0.0),
        "max_rss_bytes": max((r.get("rss_bytes", 0) for _, r, _ in results), default=0),
        "rss_per_case": all(r.get("rss_per_case", False) for _, r, _ in results if "rss_bytes" in r),
        "hang_timeout_s": CASE_TIMEOUT_S,
        "rss_limit_bytes": RSS_LIMIT_BYTES,
        "bug_examples": dict(examples),
        "wall_s": wall_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="write the summary JSON here")
    ap.add_argument("--loader", help="fuzz the load_map of this .py file instead (e.g. a previous mapio.py)")
    ap.add_argument("--worker", metavar="TMP", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.loader)
        return 0
    if args.cases < 1 or args.workers < 1:
        ap.error("--cases and --workers must be >= 1")
    cases = generate_cases(args.cases, args.seed)
    summary, _ = run_fuzz(cases, args.workers, progress=True, loader=args.loader)
    import platform

    import PIL

    summary["config"] = {
        "cases_requested": args.cases,
        "seed": args.seed,
        "workers": args.workers,
        "command": f"python tests/fuzz_maps.py --cases {args.cases} --seed {args.seed} --workers {args.workers}"
        + (f" --loader {args.loader}" if args.loader else ""),
        "loader": args.loader or "mnemo_mpc.planning.mapio",
        "python": platform.python_version(),
        "pillow": PIL.__version__,
        "pyyaml": yaml.__version__,
        "numpy": np.__version__,
    }
    text = json.dumps(summary, indent=2)
    if args.out:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from mnemo_mpc.atomic import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "cases",
                    "bugs",
                    "totals",
                    "valid_cases",
                    "valid_loaded",
                    "max_case_wall_s",
                    "max_rss_bytes",
                    "wall_s",
                )
            },
            indent=2,
        )
    )
    return 1 if summary["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
