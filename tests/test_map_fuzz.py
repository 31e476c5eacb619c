"""Map-file fuzz (issue 13, item 5): `tests/fuzz_maps.py` against `load_map` — 0 hangs over 5 s, 0 cases over 1 GB,
0 exceptions but `MapFormatError` (each naming a file), 0 silent accepts of invalid files, every valid file loads to
the expected grid. A quick subset by default, 20,000 cases in the slow tier; the harness itself is shown to catch
each kind of defect on deliberately broken loaders."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fuzz_maps  # noqa: E402


def _assert_clean(summary: dict, cases: int) -> None:
    assert summary["cases"] == cases
    assert summary["bugs"] == 0, summary["bug_examples"]
    assert set(summary["per_family"]) == set(fuzz_maps.FAMILIES)  # every family ran
    assert summary["valid_loaded"] == summary["valid_cases"] > 0.1 * cases
    assert summary["totals"]["ok_rejected"] > 0.5 * cases
    assert summary["max_case_wall_s"] < fuzz_maps.CASE_TIMEOUT_S
    assert 0 < summary["max_rss_bytes"] < fuzz_maps.RSS_LIMIT_BYTES


def test_map_fuzz_quick():
    cases = fuzz_maps.generate_cases(500, seed=3)
    summary, _ = fuzz_maps.run_fuzz(cases, workers=2)
    _assert_clean(summary, len(cases))


@pytest.mark.slow
def test_map_fuzz_full():
    cases = fuzz_maps.generate_cases(20000, seed=4)
    summary, _ = fuzz_maps.run_fuzz(cases, workers=2)
    _assert_clean(summary, len(cases))


def test_generated_valid_files_agree_with_reference():
    """The oracle's two halves agree: every generated valid map of plain files is valid to the reference decoder and
    decodes to the grid its generator computed."""
    checked = 0
    for case in fuzz_maps.generate_cases(400, seed=5):
        if case.expect != "valid" or not all(isinstance(v, bytes) for v in case.files.values()):
            continue
        name = fuzz_maps.ref_meta(case.files[case.yaml_name])["image"]
        if not name.endswith((".pgm", ".png")):
            continue
        assert fuzz_maps.reference_load(case.files, case.yaml_name) == case.expected, (case.family, case.sub)
        checked += 1
    assert checked > 50


BROKEN_LOADERS = {
    "accept_all": "return OccupancyGrid(np.zeros((1, 1), np.int8), 1.0)",
    "value_error": "raise ValueError('boom')",
    "anonymous_error": "raise MapFormatError('bad map')",
    "sleeps": "time.sleep(60)",
    "hog": "x = np.ones(160_000_000); raise MapFormatError(f'{yaml_path}: {x.size}')",
}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("accept_all", {"silent_accept", "wrong_grid"}),
        ("value_error", {"other_exception"}),
        ("anonymous_error", {"message_without_file"}),
        ("sleeps", {"hang"}),
        ("hog", {"over_memory"}),
    ],
)
def test_harness_catches_broken_loaders(tmp_path, name, expected):
    module = tmp_path / f"{name}.py"
    module.write_text(
        textwrap.dedent(
            f"""
            import time
            import numpy as np
            from mnemo_mpc.errors import MapFormatError
            from mnemo_mpc.planning.grid import OccupancyGrid

            def load_map(yaml_path, **kwargs):
                {BROKEN_LOADERS[name]}
            """
        )
    )
    cases = fuzz_maps.generate_cases(60, seed=6)[: {"sleeps": 2, "hog": 1}.get(name, 60)]
    timeout_s = 1.0 if name == "sleeps" else fuzz_maps.CASE_TIMEOUT_S
    summary, results = fuzz_maps.run_fuzz(cases, workers=1, loader=str(module), timeout_s=timeout_s)
    classes = {cls for _, _, cls in results}
    assert expected <= classes, summary["totals"]
    assert summary["bugs"] >= len(cases) // 3
