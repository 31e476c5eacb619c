"""Collection end to end: small collection -> loader round trip; SIGKILL mid-world + resume; failed episodes recorded;
the Ray path in local mode."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.dataset.collect import FAULT_ENV, CollectConfig, collect, collect_world, world_seed
from mnemo_mpc.dataset.loader import SQPStepDataset
from mnemo_mpc.dataset.store import DatasetStore
from mnemo_mpc.errors import DatasetError, InputError
from mnemo_mpc.sim.episode import EpisodeConfig

pytest.importorskip("pybullet")

STEPS = 20
# 20 steps per world at 10 Hz: the time limit cuts every episode short (status "timeout"), which keeps tests fast.
CFG = CollectConfig(seed=0, episode=EpisodeConfig(time_limit_s=STEPS * 0.1, keep_plan_every=0))


def snapshot(root, wid):
    g = DatasetStore.open(root).open_world(wid)
    return {k: g[k][:] for k in ("step", "pose", "grid", "expert_states")}


def test_kill_mid_world_then_resume_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    # Worker SIGKILLed at step 10 of world 1: the pool breaks, world 0 stays committed, world 1 is not.
    monkeypatch.setenv(FAULT_ENV, "kill:1:10")
    with pytest.raises(DatasetError, match="worker died"):
        collect(root, 3, CFG, workers=1, progress=False)
    store = DatasetStore.open(root)
    assert 0 in store.world_ids and 1 not in store.world_ids
    before = snapshot(root, 0)

    monkeypatch.delenv(FAULT_ENV)
    summary = collect(root, 3, CFG, workers=1, progress=False)
    assert summary["worlds_collected_now"] == 3 - len(store.world_ids)
    store = DatasetStore.open(root)
    assert store.world_ids == [0, 1, 2]
    assert store.manifest["counts"]["examples"] == 3 * STEPS
    after = snapshot(root, 0)
    for k in before:  # the committed world was neither redone nor touched
        np.testing.assert_array_equal(before[k], after[k])
    assert not (root / ".tmp").exists() or not any((root / ".tmp").iterdir())

    # Loader round trip: every (world, step) exactly once, seeds as generated, arrays as stored.
    ds = SQPStepDataset(root, split="all", only_converged=False)
    assert len(ds) == 3 * STEPS
    items = ds.__getitems__(list(range(len(ds))))
    pairs = [(it["world_id"], it["step"]) for it in items]
    assert sorted(pairs) == [(w, s) for w in range(3) for s in range(STEPS)]
    for it in items:
        assert it["seed"] == world_seed(0, it["world_id"])
        assert it["grid"].shape == (120, 120)
        assert np.allclose(it["expert_states"][0].numpy(), it["pose"].numpy(), atol=1e-4)
    w0 = [it for it in items if it["world_id"] == 0]
    np.testing.assert_array_equal(np.stack([it["grid"].numpy() for it in w0]), before["grid"])
    # A resumed store with another config is refused.
    with pytest.raises(DatasetError, match="different config"):
        collect(root, 3, CollectConfig(seed=5, episode=CFG.episode), progress=False)


def test_failed_episode_is_recorded_with_status_error(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CFG.to_dict())
    monkeypatch.setenv(FAULT_ENV, "raise:0:3")
    entry = collect_world(str(root), 0, CFG)
    assert entry["status"] == "error" and entry["steps"] == 0
    store.record_world(entry)
    g = DatasetStore.open(root).open_world(0)
    assert "injected fault" in g.attrs["info"]["error"]
    # Resume does not retry it silently: it is committed as a failed world.
    monkeypatch.delenv(FAULT_ENV)
    summary = collect(root, 1, CFG, progress=False)
    assert summary["worlds_collected_now"] == 0
    assert DatasetStore.open(root).manifest["counts"]["worlds_by_status"]["error"] == 1


def test_ray_local_mode(tmp_path):  # ~7 s on a quiet machine: Ray's start-up dominates
    pytest.importorskip("ray", reason="Ray is not installed; the --ray-address path cannot run")
    root = tmp_path / "ds"
    cfg = CollectConfig(seed=0, episode=EpisodeConfig(time_limit_s=0.5, keep_plan_every=0))
    summary = collect(root, 2, cfg, workers=1, ray_address="local", progress=False)
    assert summary["worlds_collected_now"] == 2
    assert DatasetStore.open(root).manifest["counts"]["examples"] == 10


def test_dense_worlds_with_moving_obstacles_are_collected(tmp_path):
    """The harder families reach the dataset (issue 10 item 5): world kinds in turn, moving obstacles in the worlds
    the expert drives (the lidar grid the examples hold sees them), and both saved in the manifest's config."""
    import dataclasses

    from mnemo_mpc.sim.worlds import generate_world

    world = dataclasses.replace(CFG.world, moving_obstacles=2)
    cfg = dataclasses.replace(CFG, world=world, kinds=("dense", "open"))
    root = tmp_path / "ds"
    collect(root, 2, cfg, workers=1, progress=False)
    store = DatasetStore.open(root)
    kinds = [store.open_world(w).attrs["kind"] for w in store.world_ids]
    assert kinds == ["dense", "open"]
    assert store.manifest["config"]["kinds"] == ["dense", "open"]
    assert store.manifest["config"]["world"]["moving_obstacles"] == 2
    assert len(generate_world(world_seed(0, 0), world, kind="dense").moving) > 0
    with pytest.raises(InputError, match="CollectConfig.kinds"):
        CollectConfig(kinds=("swamp",))
