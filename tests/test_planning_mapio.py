"""map_server maps: real-format files (P5 binary / P2 ASCII PGM, 8 and 16 bit), every YAML field and mode, and the
hostile files of issue 13 (each family once here; tests/test_map_fuzz.py fuzzes them by the thousand)."""

import io
import os
import re
import struct
import threading
import time
import zlib

import numpy as np
import pytest

from mnemo_mpc.errors import InputError, MapFormatError
from mnemo_mpc.planning import mapio
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mapio import load_map, read_pgm_bytes, save_map, write_pgm_bytes

META = "resolution: 0.05\norigin: [0, 0, 0]\n"


def write_map(tmp_path, pixels, name="map", binary=True, **fields):
    (tmp_path / f"{name}.pgm").write_bytes(write_pgm_bytes(np.asarray(pixels, dtype=np.uint8), binary))
    meta = {"image": f"{name}.pgm", "resolution": 0.05, "origin": [-1.0, 2.0, 0.0], **fields}
    lines = "".join(f"{k}: {v}\n" for k, v in meta.items())
    (tmp_path / f"{name}.yaml").write_text(lines)
    return tmp_path / f"{name}.yaml"


def sample_grid():
    data = np.zeros((6, 9), np.int8)
    data[0, :] = 100  # bottom row occupied
    data[3, 4] = -1
    data[5, 8] = 100
    return OccupancyGrid(data, 0.1, (0.5, -0.25, 0.1))


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("mode", ["trinary", "raw"])
def test_save_load_round_trip(tmp_path, binary, mode):
    grid = sample_grid()
    path = save_map(grid, tmp_path / "m.yaml", mode=mode, binary=binary)
    magic = (tmp_path / "m.pgm").read_bytes()[:2]
    assert magic == (b"P5" if binary else b"P2")
    back = load_map(path)
    np.testing.assert_array_equal(back.data, grid.data)
    assert back.resolution == grid.resolution and back.origin == grid.origin


def test_image_top_row_is_map_top(tmp_path):
    px = np.full((3, 4), 254)
    px[0, 0] = 0  # top-left pixel black = occupied
    grid = load_map(write_map(tmp_path, px))
    assert grid.data[2, 0] == 100 and grid.data[0, 0] == 0
    assert grid.origin == (-1.0, 2.0, 0.0)


def test_trinary_thresholds_and_negate(tmp_path):
    px = np.array([[0, 100, 200, 255]])  # p = 1.0, 0.61, 0.22, 0.0 without negate
    g = load_map(write_map(tmp_path, px, occupied_thresh=0.65, free_thresh=0.25))
    assert g.data.tolist() == [[100, -1, 0, 0]]
    g = load_map(write_map(tmp_path, px, name="neg", negate=1, occupied_thresh=0.65, free_thresh=0.25))
    assert g.data.tolist() == [[0, -1, 100, 100]]  # p = 0, 0.39, 0.78, 1.0


def test_scale_mode(tmp_path):
    px = np.array([[0, 128, 200, 255]])  # p = 1.0, 0.498, 0.216, 0.0
    g = load_map(write_map(tmp_path, px, mode="scale", occupied_thresh=0.65, free_thresh=0.196))
    expected_mid = round(100 * ((255 - 128) / 255 - 0.196) / (0.65 - 0.196))
    expected_low = round(100 * ((255 - 200) / 255 - 0.196) / (0.65 - 0.196))
    assert g.data.tolist() == [[100, expected_mid, expected_low, 0]]
    # scale values between the thresholds are neither free nor occupied: the grid reports them unknown
    assert g.unknown_mask().tolist() == [[False, True, True, False]]


def test_raw_mode_ignores_negate(tmp_path):
    px = np.array([[0, 37, 100, 101, 255]])
    g = load_map(write_map(tmp_path, px, mode="raw", negate=1))
    assert g.data.tolist() == [[0, 37, 100, -1, -1]]


def test_pgm_16bit_and_comments():
    raw = b"P5\n# a comment\n2 1\n# another\n65535\n" + np.array([0, 65535], ">u2").tobytes()
    np.testing.assert_allclose(read_pgm_bytes(raw), [[0.0, 255.0]])
    raw = b"P2\n2 2 # trailing comment\n15\n0 15\n# mid-raster comment\n5 10\n"
    np.testing.assert_allclose(read_pgm_bytes(raw), [[0, 255], [85, 170]])


def test_image_path_absolute(tmp_path):
    sub = tmp_path / "img"
    sub.mkdir()
    (sub / "a.pgm").write_bytes(write_pgm_bytes(np.full((2, 2), 254, np.uint8)))
    y = tmp_path / "a.yaml"
    y.write_text(f"image: {sub / 'a.pgm'}\nresolution: 0.1\norigin: [0, 0, 0]\n")
    assert load_map(y).shape == (2, 2)


@pytest.mark.parametrize(
    "yaml_text, match",
    [
        ("image: m.pgm\nresolution: 0\norigin: [0, 0, 0]\n", "resolution"),
        ("image: m.pgm\nresolution: -0.05\norigin: [0, 0, 0]\n", "resolution"),
        ("image: m.pgm\nresolution: .nan\norigin: [0, 0, 0]\n", "resolution"),
        ("image: m.pgm\nresolution: abc\norigin: [0, 0, 0]\n", "resolution"),
        ("image: m.pgm\norigin: [0, 0, 0]\n", "resolution"),
        ("resolution: 0.05\norigin: [0, 0, 0]\n", "image"),
        ("image: m.pgm\nresolution: 0.05\norigin: [0, 0]\n", "origin"),
        ("image: m.pgm\nresolution: 0.05\norigin: [0, 0, 0]\nmode: fancy\n", "mode"),
        ("image: m.pgm\nresolution: 0.05\norigin: [0, 0, 0]\nnegate: 2\n", "negate"),
        ("image: m.pgm\nresolution: 0.05\norigin: [0, 0, 0]\nfree_thresh: 0.7\noccupied_thresh: 0.6\n", "thresh"),
        ("image: m.pgm\nresolution: [0.05\n", "YAML"),
        ("- just\n- a list\n", "mapping"),
        ("image: missing.pgm\nresolution: 0.05\norigin: [0, 0, 0]\n", "missing.pgm"),
    ],
)
def test_malformed_yaml(tmp_path, yaml_text, match):
    (tmp_path / "m.pgm").write_bytes(write_pgm_bytes(np.full((2, 2), 254, np.uint8)))
    (tmp_path / "m.yaml").write_text(yaml_text)
    with pytest.raises(MapFormatError, match=match):
        load_map(tmp_path / "m.yaml")


@pytest.mark.parametrize(
    "pgm, match",
    [
        (b"P5\n4 4\n255\n" + bytes(10), "too short"),
        (b"P2\n2 2\n255\n1 2 3\n", "3 of 4"),
        (b"P2\n2 2\n255\n1 2 x 4\n", "plain decimal"),
        (b"P2\n2 2\n10\n1 2 3 40\n", "exceeds maxval"),
        (b"P5\n2", "truncated"),
        (b"P5\n0 2\n255\n", "positive"),
        (b"P5\n2 2\n70000\n" + bytes(8), "maxval"),
        (b"P6\n1 1\n255\n" + bytes(3), "P6"),
        (b"not an image at all", "unreadable"),
    ],
)
def test_malformed_pgm(tmp_path, pgm, match):
    (tmp_path / "m.pgm").write_bytes(pgm)
    (tmp_path / "m.yaml").write_text("image: m.pgm\nresolution: 0.05\norigin: [0, 0, 0]\n")
    with pytest.raises(MapFormatError, match=match):
        load_map(tmp_path / "m.yaml")


def test_grid_rejects_bad_resolution():
    with pytest.raises(InputError, match="resolution"):
        OccupancyGrid(np.zeros((2, 2), np.int8), 0.0)
    with pytest.raises(InputError, match="resolution"):
        OccupancyGrid(np.zeros((2, 2), np.int8), -1.0)


# --- hostile files (issue 13) -------------------------------------------------------------------------------------


def _map(tmp_path, image_name="m.pgm", image=None, yaml_extra="", yaml_text=None):
    if image is not None:
        (tmp_path / image_name).write_bytes(image)
    text = yaml_text if yaml_text is not None else f"image: {image_name}\n{META}{yaml_extra}"
    (tmp_path / "m.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    return tmp_path / "m.yaml"


def _load_within(path, seconds=5.0, **kwargs):
    """load_map in a daemon thread: a loader that blocks fails the test instead of hanging the suite."""
    box = {}

    def run():
        try:
            box["grid"] = load_map(path, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t0 = time.perf_counter()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"load_map({path}) still running after {seconds} s"
    box["wall_s"] = time.perf_counter() - t0
    return box


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("bcdefgh", "cdefghi", strict=True)
)


@pytest.mark.parametrize("field", ["mode", "origin", "negate", "image", "resolution", "free_thresh"])
def test_alias_bomb_refused_fast(tmp_path, field):
    pgm = write_pgm_bytes(np.full((2, 2), 254, np.uint8))
    lines = {"image": "m.pgm", "resolution": "0.05", "origin": "[0, 0, 0]"}
    lines[field] = "*i"
    text = BOMB + "".join(f"{k}: {v}\n" for k, v in lines.items())
    out = _load_within(_map(tmp_path, image=pgm, yaml_text=text), seconds=2.0)
    assert isinstance(out.get("exc"), MapFormatError) and "alias" in str(out["exc"]), out
    assert out["wall_s"] < 1.0


@pytest.mark.parametrize(
    "image, match",
    [
        ("/dev/zero", "a device"),
        ("/dev/null", "a device"),
        (".", "a directory"),
        ("/proc/self/status", "m.yaml|status"),
    ],
)
def test_image_must_be_a_regular_file(tmp_path, image, match):
    out = _load_within(_map(tmp_path, image_name=image))
    assert isinstance(out.get("exc"), MapFormatError), out
    assert re.search(match, str(out["exc"])), str(out["exc"])


def test_fifo_and_symlinks_as_image_never_block(tmp_path):
    os.mkfifo(tmp_path / "fifo.pgm")
    (tmp_path / "to_fifo.pgm").symlink_to("fifo.pgm")
    (tmp_path / "to_zero.pgm").symlink_to("/dev/zero")
    (tmp_path / "dangling.pgm").symlink_to("nowhere.pgm")
    for name, match in [
        ("fifo.pgm", "FIFO"),
        ("to_fifo.pgm", "FIFO"),
        ("to_zero.pgm", "device"),
        ("dangling.pgm", "cannot read"),
    ]:
        out = _load_within(_map(tmp_path, image_name=name))
        assert isinstance(out.get("exc"), MapFormatError) and match in str(out["exc"]), (name, out)
        assert name in str(out["exc"])
    # a symlink to a real image is fine
    (tmp_path / "real.pgm").write_bytes(write_pgm_bytes(np.full((2, 3), 254, np.uint8)))
    (tmp_path / "to_real.pgm").symlink_to("real.pgm")
    assert load_map(_map(tmp_path, image_name="to_real.pgm")).shape == (2, 3)


def test_yaml_must_be_a_small_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")
    out = _load_within(tmp_path / "fifo.yaml")
    assert isinstance(out.get("exc"), MapFormatError) and "FIFO" in str(out["exc"])
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB claimed, nothing written
    with pytest.raises(MapFormatError, match="over the 65536-byte cap"):
        load_map(big)


def test_image_size_cap_keyword_and_env(tmp_path, monkeypatch):
    pgm = write_pgm_bytes(np.full((10, 10), 254, np.uint8))  # 100 pixels, 113 bytes
    path = _map(tmp_path, image=pgm)
    assert load_map(path, max_pixels=100, max_image_bytes=113).shape == (10, 10)
    with pytest.raises(MapFormatError, match="10x10 pixels is over the 99-pixel cap"):
        load_map(path, max_pixels=99)
    with pytest.raises(MapFormatError, match="113 bytes, over the 112-byte cap"):
        load_map(path, max_image_bytes=112)
    monkeypatch.setenv(mapio.MAX_PIXELS_ENV, "99")
    with pytest.raises(MapFormatError, match="99-pixel cap"):
        load_map(path)
    assert load_map(path, max_pixels=100).shape == (10, 10)  # the keyword wins over the environment
    monkeypatch.setenv(mapio.MAX_PIXELS_ENV, "lots")
    with pytest.raises(InputError, match=mapio.MAX_PIXELS_ENV):
        load_map(path)
    monkeypatch.delenv(mapio.MAX_PIXELS_ENV)
    monkeypatch.setenv(mapio.MAX_IMAGE_BYTES_ENV, "100")
    with pytest.raises(MapFormatError, match="100-byte cap"):
        load_map(path)
    with pytest.raises(InputError, match="max_pixels"):
        load_map(path, max_pixels=0)


def _png(width, height, color=0, idat=None):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    body = idat if idat is not None else zlib.compress(bytes(64))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")


def test_huge_png_header_refused_before_decoding(tmp_path):
    out = _load_within(_map(tmp_path, "m.png", _png(12000, 12000)), seconds=2.0)
    assert isinstance(out.get("exc"), MapFormatError) and "12000x12000 pixels is over" in str(out["exc"])
    assert out["wall_s"] < 0.5


def test_png_corruption_is_an_error(tmp_path):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), 254, np.uint8)).save(buf, format="PNG")
    good = buf.getvalue()
    assert load_map(_map(tmp_path, "m.png", good)).shape == (8, 8)
    idat = good.index(b"IDAT")
    for i, match in [(idat + 6, "IDAT.*CRC mismatch"), (20, "IHDR.*CRC mismatch")]:
        bad = bytearray(good)
        bad[i] ^= 0x04
        with pytest.raises(MapFormatError, match=match):
            load_map(_map(tmp_path, "m.png", bytes(bad)))
    with pytest.raises(MapFormatError, match="after the IEND"):
        load_map(_map(tmp_path, "m.png", good + b"junk"))
    with pytest.raises(MapFormatError, match="truncated|past the file end"):
        load_map(_map(tmp_path, "m.png", good[:-7]))


def test_palette_png_reads_colours_not_indices(tmp_path):
    from PIL import Image

    grey = np.array([[0, 254, 205, 254]], np.uint8)
    im = Image.fromarray(grey).quantize(colors=3)  # palette order differs from the grey levels
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    grid = load_map(_map(tmp_path, "m.png", buf.getvalue()))
    assert grid.data.tolist() == [[100, 0, -1, 0]]


@pytest.mark.parametrize(
    "yaml_bytes, match",
    [
        (b"image: m.pgm\n" + META.encode() + b"# \xff\xfe\n", "not UTF-8"),
        (f"image: m.pgm\n{META}".encode("utf-16"), "not UTF-8"),
        (b"image: m.pgm\nresolution: " + b"9" * 5000 + b"\norigin: [0, 0, 0]\n", "YAML"),
        (b"image: m.pgm\nresolution: 0x" + b"f" * 20000 + b"\norigin: [0, 0, 0]\n", "resolution.*finite"),
        (b"image: m.pgm\nresolution: 0.05\norigin: [0, 0, 0]\nnegate: 0x" + b"f" * 20000 + b"\n", "negate.*integer"),
        (b"image: m.pgm\nresolution: 1.0e+308\norigin: [0, 0, 0]\n", "overflows"),
        (b"image: m.pgm\n" + META.encode() + b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper"),
        (b"image: m.pgm\n" + META.encode() + b"resolution: 0.1\n", "duplicate key 'resolution'"),
        (b'image: "m\\0.pgm"\n' + META.encode(), "image"),
        (b"image: !!python/object/apply:os.getpid []\n" + META.encode(), "YAML"),
        (b"image: !!binary bS5wZ20=\n" + META.encode(), "image"),
        (b"image: m.pgm\nresolution: 0.05\norigin: !!set {a, b, c}\n", "origin"),
        (b"image: m.pgm\n" + META.encode() + b"mode: 12345678901234567890123\n", "mode"),
        (b"image: m.pgm\n" + META.encode() + b"negate: 1.0\n", "negate"),
        (b"image: m.pgm\n" + META.encode() + b"---\nimage: m.pgm\n", "YAML"),
    ],
)
def test_hostile_yaml(tmp_path, yaml_bytes, match):
    path = _map(tmp_path, image=write_pgm_bytes(np.full((2, 2), 254, np.uint8)), yaml_text=yaml_bytes)
    with pytest.raises(MapFormatError, match=match) as info:
        load_map(path)
    assert "m.yaml" in str(info.value) and len(str(info.value)) < 400


@pytest.mark.parametrize(
    "pgm, match",
    [
        (b"P5\n" + b"9" * 4001 + b" 2\n255\n" + bytes(8), "width: 4001 digits"),
        (b"P5\n2 " + b"9" * 11 + b"\n255\n" + bytes(8), "height: 11 digits"),
        (b"P2\n2 1\n255\n0 -255\n", "found b'-'"),
        (b"P2\n2 1\n255\n0 +3\n", r"found b'\+'"),
        (b"P2\n2 1\n255\n0 1_0\n", "found b'_'"),
        (b"P2\n2 1\n255\n0 " + b"0" * 11 + b"\n", "more than 10 digits"),
        (b"P2\n-2 1\n255\n0 1\n", "width: expected a plain decimal"),
        (b"P2\n+2 1\n255\n0 1\n", "width: expected a plain decimal"),
        (b"P2\n2 1_0\n255\n0 1\n", "height: expected a plain decimal"),
        (b"P2\n2 1\n2e2\n0 1\n", "maxval: expected a plain decimal"),
        (b"P52 1\n255\n\x00\x01", "whitespace after P5"),
        (b"P5\n2 1\n255#c\n\x00\x01", "one whitespace byte"),
        (b"P5\n2 1 # no end of line", "truncated PGM header"),
        (b"P5\n2 1\n255\n\x00\x01x", "after the 2x1 raster"),
        (b"P5\n2 1\n255\n\x00\x01P5\n1 1\n255\n\x00", "after the 2x1 raster"),
        (b"P2\n2 1\n255\n0 1 2\n", "more than 2 values"),
        (b"P5\n100000 100000\n255\n" + bytes(16), "over the 25000000-pixel cap"),
        (b"P5\n2 1\n65536\n" + bytes(4), "maxval"),
    ],
)
def test_strict_pgm_grammar(tmp_path, pgm, match):
    with pytest.raises(MapFormatError, match=match) as info:
        load_map(_map(tmp_path, image=pgm))
    assert "m.pgm" in str(info.value)


def test_pgm_legal_variants_load(tmp_path):
    # comments right after a value, leading zeros, CRLF, trailing whitespace after the P5 raster: all legal Netpbm
    assert read_pgm_bytes(b"P2\r\n2#w\r\n1 # h\r\n0255\r\n0 255#end\r\n").tolist() == [[0.0, 255.0]]
    assert read_pgm_bytes(b"P5 2 1 255\n\x00\xff\n\n").tolist() == [[0.0, 255.0]]
    assert read_pgm_bytes(b"P5\n1 1\n255\n\x20").tolist() == [[32.0]]  # a raster byte that looks like space


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_plain_pgm_chunked_parse_matches_whole_file(monkeypatch, chunk):
    """The P2 raster is parsed a chunk at a time; cuts must never split a value or a comment."""
    rng = np.random.default_rng(chunk)
    values = rng.integers(0, 1000, size=(7, 9))
    parts = [b"P2\n9 7\n999\n"]
    for v in values.ravel():
        parts.append(str(int(v)).encode())
        parts.append(rng.choice([b" ", b"\n", b"\t", b"  ", b"#c 12 x#\n", b" #\r", b"\r\n"]))
    raw = b"".join(parts)
    monkeypatch.setattr(mapio, "_P2_CHUNK_BYTES", chunk)
    np.testing.assert_allclose(read_pgm_bytes(raw), values * (255.0 / 999))
    with pytest.raises(MapFormatError, match="found b'x'"):
        read_pgm_bytes(raw.replace(b"#c 12 x#", b"   12 x ", 1))


def test_load_large_map_bounded(tmp_path):
    """A 2000 x 2000 map loads in row blocks: peak extra memory stays near the grid itself (4 MB), far below the
    float64 image (32 MB) the loader used to build."""
    import tracemalloc

    px = np.random.default_rng(0).choice(np.array([0, 205, 254], np.uint8), size=(2000, 2000))
    path = _map(tmp_path, image=write_pgm_bytes(px))
    tracemalloc.start()
    grid = load_map(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert grid.shape == (2000, 2000)
    assert peak < 24e6, peak  # file bytes (4 MB) + grid (4 MB) + one float block with its masks
