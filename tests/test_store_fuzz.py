"""Store corruption fuzz (issue 13) on a store from the real collector: delete / truncate / bit-flip store files and
read everything back (`tests/fuzz_store.py`). Default tier: a seeded subset; `slow`: every file of the store.
Also the repair loop end to end: collect, corrupt, `data verify --repair`, collect again, verify clean."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from fuzz_store import (
    SPECIALS,
    Corruption,
    build_store,
    corruptions,
    pristine_values,
    run,
    run_special,
    special_cases,
    store_files,
)

from mnemo_mpc.dataset.store import DatasetStore
from mnemo_mpc.warmstart.data import build_cache
from mnemo_mpc.warmstart.inputs import InputSpec

pytest.importorskip("pybullet")
pytest.importorskip("torch")

# 2 s episodes at 10 Hz: ~20 steps per world keeps each case well under a second.
TIME_LIMIT_S = 2.0
# Cases of the default tier's subset (each ~0.5 s: a fresh copy read by every reader); `test_fuzz_every_file` (slow)
# runs them all.
SUBSET = 16


@pytest.fixture(scope="session")
def collected(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("fuzz") / "store", worlds=2, time_limit_s=TIME_LIMIT_S)


def assert_clean(summary):
    assert summary["silent_wrong_items"] == 0, summary
    assert summary["non_dataset_error_exceptions"] == 0, summary
    assert summary["not_flagged_by_verify"] == [], summary
    # No reader opens the root or worlds/ group documents; every other file must matter to some reader.
    assert set(summary["benign_files"]) <= {"zarr.json", "worlds/zarr.json"}, summary


def test_fuzz_seeded_subset(collected, tmp_path):
    cases = corruptions(collected, flips=3, seed=0)
    files = store_files(collected)
    assert len(files) == 2 * (2 * 20 + 1) + 3  # 20 arrays (chunk + zarr.json) and a group per world; root docs
    rng = random.Random(13)
    # Always the manifest, a world group document and the grid shard; the rest drawn at random.
    must = [c for c in cases if c.path in ("manifest.json", "worlds/w000000/zarr.json", "worlds/w000001/grid/c/0/0/0")]
    rest = [c for c in cases if c not in must]
    subset = must[::2] + rng.sample(rest, SUBSET - len(must[::2]))
    assert {c.kind for c in subset} == {"delete", "truncate", "flip"}
    report = run(collected, subset, tmp_path)
    assert report["summary"]["cases"] == SUBSET
    assert_clean(report["summary"])


def test_fuzz_harness_counts_silent_wrong_data(collected, tmp_path):
    """Control: with the store's checks off, a deleted chunk reads as zeros and the harness counts it."""
    report = run(collected, [Corruption("worlds/w000000/pose/c/0/0", "delete")], tmp_path, verify=False)
    result = report["results"][0]
    steps0 = DatasetStore.open(collected).world_entry(0)["steps"]
    assert result["items"]["wrong"] == steps0 and result["warmstart_worlds"]["wrong"] == 1
    assert report["summary"]["silent_wrong_items"] > 0


def test_special_files_and_pathological_json(collected, tmp_path):
    """Issue 26: a FIFO, /dev/zero, a directory, a sparse file or a symlink loop in place of store files, and
    pathological JSON documents and values: every case an error or the pristine data, flagged by verify, no hang."""
    cases = special_cases(collected, 12, seed=3)
    assert {"json", "json_value"} <= {c.kind for c in cases} and set(SPECIALS) & {c.kind for c in cases}
    report = run_special(collected, cases, tmp_path)
    assert report["bugs"] == 0, report


def test_special_fuzz_counts_a_hang(collected, tmp_path, monkeypatch):
    """Control: with the store's JSON read as before issue 26 (no regular-file check), a FIFO manifest hangs the
    readers, and the harness counts the hang."""
    import json
    from pathlib import Path

    import fuzz_store

    from mnemo_mpc.dataset import store

    monkeypatch.setattr(fuzz_store, "SPECIAL_TIMEOUT_S", 1.0)
    monkeypatch.setattr(store, "load_json", lambda path, *args, **kwargs: json.loads(Path(path).read_bytes()))
    report = run_special(collected, [Corruption("manifest.json", "fifo")], tmp_path)
    assert report["bug_counts"].get("hang") == 1, report


@pytest.mark.slow
def test_fuzz_every_file(collected, tmp_path):  # ~425 cases, a few minutes
    report = run(collected, corruptions(collected, flips=3, seed=1), tmp_path)
    assert report["summary"]["files"] == len(store_files(collected))
    assert_clean(report["summary"])


def test_collect_corrupt_repair_recollect(collected, tmp_path, capsys):
    from mnemo_mpc.cli import main
    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.sim.episode import EpisodeConfig

    root = tmp_path / "ds"
    shutil.copytree(collected, root)
    before = pristine_values(root)
    spec = InputSpec(N=DatasetStore.open(root).manifest["config"]["mpc"]["N"])
    cache = build_cache(root, spec, progress=False)
    (root / "worlds" / "w000001" / "expert_states" / "c" / "0" / "0" / "0").unlink()
    assert main(["data", "verify", str(root), "--repair", "--no-progress"]) == 1
    assert "w000001 array expert_states chunk c/0/0/0: chunk is missing" in capsys.readouterr().out
    assert DatasetStore.open(root).world_ids == [0]
    cfg = CollectConfig(episode=EpisodeConfig(time_limit_s=TIME_LIMIT_S))
    summary = collect(root, 2, cfg, workers=1, progress=False)
    assert summary["worlds_collected_now"] == 1
    assert main(["data", "verify", str(root), "--no-progress"]) == 0
    after = pristine_values(root)
    # The input cache follows the world's seal: the re-collected world's entry is rebuilt, the other kept.
    kept = (cache / "w000000.npz").stat().st_mtime_ns
    build_cache(root, spec, progress=False)
    store = DatasetStore.open(root)
    for w in (0, 1):
        with np.load(cache / f"w00000{w}.npz") as z:
            assert str(z["world_sha256"]) == store.world_entry(w)["world_sha256"]
    assert (cache / "w000000.npz").stat().st_mtime_ns == kept
    # World 0 untouched, world 1 collected again from the same seed: every item as before, none lost or duplicated.
    assert len(after["items"]) == len(before["items"])
    for a, b in zip(after["items"], before["items"], strict=True):
        assert (a["world_id"], a["step"]) == (b["world_id"], b["step"])
        if a["world_id"] == 0:
            for k in b:
                np.testing.assert_array_equal(a[k], b[k])
