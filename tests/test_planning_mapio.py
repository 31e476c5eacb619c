"""map_server maps: real-format files (P5 binary / P2 ASCII PGM, 8 and 16 bit), every YAML field and mode."""

import numpy as np
import pytest

from mnemo_mpc.errors import InputError, MapFormatError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mapio import load_map, read_pgm_bytes, save_map, write_pgm_bytes


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
        (b"P2\n2 2\n255\n1 2 x 4\n", "non-integer"),
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
