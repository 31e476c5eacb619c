"""Dataset store, loader and stats on synthetic records (no planner needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemo_mpc.dataset.loader import SQPStepDataset, split_worlds
from mnemo_mpc.dataset.stats import dataset_stats
from mnemo_mpc.dataset.store import (
    MANIFEST,
    SCHEMA_VERSION,
    TMP_DIR,
    WORLDS_DIR,
    DatasetStore,
    StoreCorruptionError,
    WorldRecord,
    _counts,
    _seal_manifest,
    verify_store,
    world_name,
    write_world,
)
from mnemo_mpc.errors import DatasetError

H, W, N = 12, 10, 5
CONFIG = {"generator": {"size": 8}, "planner": {"N": N}, "seed": 0}


def synthetic_record(world_id: int, steps: int, status: str = "success", rng_seed: int = 0) -> WorldRecord:
    rng = np.random.default_rng(rng_seed + world_id)
    t = np.arange(steps)
    return WorldRecord(
        world_id=world_id,
        seed=1000 + world_id,
        kind="rooms",
        status=status,
        steps={
            "step": t,
            "grid": rng.choice(np.array([-1, 0, 100], np.int8), size=(steps, H, W)),
            "grid_origin": rng.normal(size=(steps, 3)),
            "grid_resolution": np.full(steps, 0.05),
            "pose": np.stack([t * 0.1, t * 0.0 + world_id, t * 0.0], axis=1),
            "velocity": rng.normal(size=(steps, 2)),
            "goal": np.tile([5.0, 5.0, 0.0], (steps, 1)),
            "subgoal": np.tile([1.0, 1.0, 0.0], (steps, 1)),
            "expert_states": rng.normal(size=(steps, N + 1, 3)),
            "expert_controls": rng.normal(size=(steps, N, 2)),
            "expert_iterations": rng.integers(1, 20, steps),
            "expert_time_s": rng.uniform(0.001, 0.01, steps),
            "expert_status": ["Solve_Succeeded"] * (steps - 1) + ["Maximum_Iterations_Exceeded"] if steps else [],
            "expert_success": np.arange(steps) < steps - 1,
            "mpc_iterations": rng.integers(1, 10, steps),
            "mpc_time_s": rng.uniform(0.001, 0.01, steps),
            "mpc_status": ["Solve_Succeeded"] * steps,
            "mpc_success": np.ones(steps, bool),
            "command": rng.normal(size=(steps, 2)),
        },
        info={"time_s": steps * 0.1},
    )


def write_manifest(root, manifest, reseal=True):
    """Write a hand-edited manifest; `reseal` recomputes its counts and seal as the store's writer would."""
    manifest = json.loads(json.dumps(manifest))
    if reseal:
        try:
            manifest["counts"] = _counts(manifest["worlds"])
        except (KeyError, TypeError):  # an entry too broken to count; the entry check fires first anyway
            pass
        manifest["manifest_sha256"] = _seal_manifest(manifest)
    (root / MANIFEST).write_text(json.dumps(manifest))


def flip_bit(path, offset, bit=0):
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_write_commit_and_loader_roundtrip(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    records = [synthetic_record(0, 20), synthetic_record(1, 20, status="collision")]
    for rec in records:
        store.record_world(write_world(root, rec))
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["counts"]["examples"] == 40
    assert manifest["counts"]["worlds_by_status"]["collision"] == 1
    assert not any((root / TMP_DIR).glob("*"))

    ds = SQPStepDataset(root, split="all", only_converged=False)
    assert len(ds) == 40
    seen = set()
    for i in range(len(ds)):
        item = ds[i]
        rec = records[item["world_id"]]
        s = item["step"]
        seen.add((item["world_id"], s))
        np.testing.assert_array_equal(item["grid"].numpy(), rec.steps["grid"][s])
        np.testing.assert_allclose(item["expert_states"].numpy(), rec.steps["expert_states"][s], rtol=1e-6)
        np.testing.assert_allclose(item["pose"].numpy(), rec.steps["pose"][s], rtol=1e-6)
    assert len(seen) == 40
    # Batched fetch returns the same items as one-by-one fetch.
    batch = ds.__getitems__([39, 0, 21, 0])
    for b, i in zip(batch, [39, 0, 21, 0], strict=True):
        np.testing.assert_array_equal(b["grid"].numpy(), ds[i]["grid"].numpy())
        assert b["step"] == ds[i]["step"]
    # Only converged expert steps by default (the last step of each synthetic world did not converge).
    assert len(SQPStepDataset(root, split="all")) == 38


def test_loader_through_torch_dataloader(tmp_path):
    torch = pytest.importorskip("torch")
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    for wid in range(3):
        store.record_world(write_world(root, synthetic_record(wid, 7)))
    ds = SQPStepDataset(root, split="all")
    batches = list(torch.utils.data.DataLoader(ds, batch_size=5, shuffle=True))
    assert sum(b["grid"].shape[0] for b in batches) == len(ds) == 18
    assert batches[0]["grid"].shape[1:] == (H, W)
    assert batches[0]["expert_controls"].shape[1:] == (N, 2)


def test_split_is_by_world_and_disjoint(tmp_path):
    train, val = split_worlds(range(50), val_fraction=0.2, seed=3)
    assert len(val) == 10 and not set(train) & set(val) and sorted(train + val) == list(range(50))
    assert split_worlds(range(50), 0.2, 3) == (train, val)
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    for wid in range(6):
        store.record_world(write_world(root, synthetic_record(wid, 4)))
    tr = SQPStepDataset(root, split="train", val_fraction=0.34)
    va = SQPStepDataset(root, split="val", val_fraction=0.34)
    tr_worlds = {tr[i]["world_id"] for i in range(len(tr))}
    va_worlds = {va[i]["world_id"] for i in range(len(va))}
    assert va_worlds and tr_worlds and not tr_worlds & va_worlds
    assert len(tr) + len(va) == len(SQPStepDataset(root, split="all"))


def test_resume_skips_committed_cleans_tmp_and_repairs_manifest(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    store.record_world(write_world(root, synthetic_record(0, 5)))
    # A world committed by a worker that died before the coordinator wrote the manifest:
    write_world(root, synthetic_record(1, 6))
    # A half-written world of a killed worker:
    (root / TMP_DIR / "w000002-999-dead").mkdir(parents=True)
    (root / TMP_DIR / "w000002-999-dead" / "junk").write_bytes(b"x")
    store2 = DatasetStore.create_or_resume(root, CONFIG)
    assert store2.committed_world_ids() == {0, 1}
    assert store2.manifest["counts"]["examples"] == 11
    assert not (root / TMP_DIR).exists()
    # Writing a committed world again keeps the first copy: no duplicates.
    write_world(root, synthetic_record(1, 9))
    assert DatasetStore.open(root).open_world(1)["step"].shape[0] == 6
    assert len(list((root / WORLDS_DIR).glob("w*"))) == 2


def test_failed_world_is_recorded_not_dropped(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    rec = synthetic_record(4, 0, status="error")
    rec.info["error"] = "InfeasibleProblemError: start in collision"
    store.record_world(write_world(root, rec))
    s = dataset_stats(root)
    assert s["worlds"] == 1 and s["worlds_by_status"]["error"] == 1 and s["examples"] == 0
    assert len(SQPStepDataset(root, split="all")) == 0


def test_stats_counts(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    for wid in range(2):
        store.record_world(write_world(root, synthetic_record(wid, 20)))
    s = dataset_stats(root)
    assert s["examples"] == 40 and s["examples_expert_converged"] == 38
    assert s["grid_shapes"] == [[H, W]] and s["horizons"] == [N]
    assert 1 <= s["expert_iterations"]["mean"] < 20
    assert s["disk_bytes"] > 0


def test_bad_stores_raise_clear_errors(tmp_path):
    with pytest.raises(DatasetError, match="no manifest.json"):
        DatasetStore.open(tmp_path / "nothing")
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    store.record_world(write_world(root, synthetic_record(0, 3)))
    manifest = json.loads((root / MANIFEST).read_text())

    bad = dict(manifest, schema_version=SCHEMA_VERSION + 1)
    (root / MANIFEST).write_text(json.dumps(bad))
    with pytest.raises(DatasetError, match="schema_version"):
        DatasetStore.open(root)

    (root / MANIFEST).write_text("{not json")
    with pytest.raises(DatasetError, match="unreadable manifest"):
        DatasetStore.open(root)

    ghost = dict(manifest)
    ghost["worlds"] = dict(manifest["worlds"], **{"7": dict(manifest["worlds"]["0"], world_id=7)})
    write_manifest(root, ghost)
    with pytest.raises(DatasetError, match="inconsistent store"):
        DatasetStore.open(root)

    wrong_steps = dict(manifest)
    wrong_steps["worlds"] = {"0": dict(manifest["worlds"]["0"], steps=4)}
    write_manifest(root, wrong_steps)
    with pytest.raises(DatasetError, match="inconsistent world"):
        DatasetStore.open(root).open_world(0)

    (root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="different config"):
        DatasetStore.create_or_resume(root, dict(CONFIG, seed=1))
    (root / WORLDS_DIR / world_name(0) / "zarr.json").write_text("garbage")
    with pytest.raises(DatasetError, match="world w000000, metadata zarr.json: group metadata is unreadable"):
        DatasetStore.open(root).open_world(0)
    other = tmp_path / "other"
    other.mkdir()
    (other / "file.txt").write_text("x")
    with pytest.raises(DatasetError, match="not empty"):
        DatasetStore.create_or_resume(other, CONFIG)


def test_inconsistent_record_is_rejected(tmp_path):
    rec = synthetic_record(0, 5)
    rec.steps["pose"] = rec.steps["pose"][:4]
    with pytest.raises(DatasetError, match="disagree"):
        write_world(tmp_path, rec)
    rec = synthetic_record(0, 5)
    rec.steps["expert_states"][2, 0, 0] = np.nan
    with pytest.raises(DatasetError, match="NaN"):
        write_world(tmp_path, rec)


def test_optional_reference_field(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    with_ref = synthetic_record(0, 4)
    with_ref.steps["reference"] = np.random.default_rng(0).normal(size=(4, N + 1, 2))
    store.record_world(write_world(root, with_ref))
    store.record_world(write_world(root, synthetic_record(1, 4)))  # an older world without it
    ds = SQPStepDataset(root, split="all", only_converged=False, fields=("grid", "reference"))
    item = ds[0]
    np.testing.assert_allclose(item["reference"].numpy(), with_ref.steps["reference"][0], rtol=1e-6)
    with pytest.raises(DatasetError, match="no field"):
        ds[len(ds) - 1]
    bad = synthetic_record(2, 4)
    bad.steps["reference"] = np.zeros((4, N, 2))
    with pytest.raises(DatasetError, match="reference"):
        write_world(tmp_path / "other", bad)


def small_store(tmp_path, worlds=2, steps=6):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    records = [synthetic_record(w, steps) for w in range(worlds)]
    for rec in records:
        store.record_world(write_world(root, rec))
    return root, records


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda w: w["0"].pop("steps"), r"worlds\['0'\]: field 'steps' missing"),
        (lambda w: w.update({"abc": w.pop("0")}), r"worlds\['abc'\]: world id must be"),
        (lambda w: w["0"].update(steps=-1), r"worlds\['0'\]: field 'steps' is -1"),
        (lambda w: w["0"].update(steps=True), r"field 'steps' is True"),
        (lambda w: w["0"].update(expert_converged=99), r"field 'expert_converged' is 99"),
        (lambda w: w["0"].update(seed="7"), r"field 'seed' is '7'"),
        (lambda w: w["0"].update(status="lost"), r"field 'status' is 'lost'"),
        (lambda w: w["0"].update(world_id=3), r"field 'world_id' is 3"),
        (lambda w: w["0"].update(wall_time_s=float("nan")), r"field 'wall_time_s'"),
        (lambda w: w["0"].pop("world_sha256"), r"field 'world_sha256' missing"),
        (lambda w: w.update({"0": [1, 2]}), r"worlds\['0'\]: expected an object"),
    ],
)
def test_manifest_entries_are_validated(tmp_path, edit, message):
    root, _ = small_store(tmp_path, worlds=1)
    manifest = json.loads((root / MANIFEST).read_text())
    edit(manifest["worlds"])
    write_manifest(root, manifest)
    with pytest.raises(DatasetError, match=message):
        DatasetStore.open(root)


def test_manifest_seal_and_old_schema(tmp_path):
    root, _ = small_store(tmp_path, worlds=1)
    manifest = json.loads((root / MANIFEST).read_text())
    edited = json.loads(json.dumps(manifest))
    edited["worlds"]["0"]["seed"] += 1  # well-formed, but not what was written
    write_manifest(root, edited, reseal=False)
    with pytest.raises(DatasetError, match="fails its SHA-256 seal"):
        DatasetStore.open(root)
    write_manifest(root, dict(manifest, schema_version=1), reseal=False)
    with pytest.raises(DatasetError, match="schema_version 1 is not supported.*re-collect"):
        DatasetStore.open(root)
    (root / MANIFEST).write_bytes(b"\xff\xfe{")
    with pytest.raises(DatasetError, match="unreadable manifest"):
        DatasetStore.open(root)


def test_every_chunk_is_written_even_when_all_fill_value(tmp_path):
    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    rec = synthetic_record(0, 1)  # step == [0], expert_success == [False]: equal to zarr's fill value
    rec.steps["grid"][:] = 0
    store.record_world(write_world(root, rec))
    wdir = root / WORLDS_DIR / world_name(0)
    for key in ("step/c/0", "expert_success/c/0", "grid/c/0/0/0"):
        assert (wdir / key).is_file(), key
    (wdir / "step" / "c" / "0").unlink()
    with pytest.raises(StoreCorruptionError, match=r"world w000000, array 'step', chunk c/0: chunk is missing"):
        DatasetStore.open(root).open_world(0)


def test_missing_chunk_raises_never_fill_values(tmp_path):
    root, records = small_store(tmp_path)
    chunk = root / WORLDS_DIR / world_name(1) / "pose" / "c" / "0" / "0"
    world = DatasetStore.open(root).open_world(1)  # opened while the chunk still exists
    chunk.unlink()
    with pytest.raises(StoreCorruptionError, match=r"world w000001, array 'pose', chunk c/0/0: chunk is missing"):
        world["pose"][:]
    with pytest.raises(StoreCorruptionError, match=r"array 'pose', chunk c/0/0: chunk is missing"):
        DatasetStore.open(root).open_world(1)
    ds = SQPStepDataset(root, split="all", only_converged=False)
    assert ds[0]["world_id"] == 0  # the intact world still reads
    with pytest.raises(DatasetError, match="w000001.*'pose'"):
        ds.__getitems__([0, len(ds) - 1])
    # Control: without the store's checks zarr hands out its fill value - exactly what the checks prevent.
    unverified = SQPStepDataset(root, split="all", only_converged=False, verify=False)
    assert np.all(unverified[len(unverified) - 1]["pose"].numpy() == 0)
    assert not np.all(records[1].steps["pose"][-1] == 0)


def test_bit_flips_name_the_chunk(tmp_path):
    root, records = small_store(tmp_path, worlds=1)
    wdir = root / WORLDS_DIR / world_name(0)
    flip_bit(wdir / "grid" / "c" / "0" / "0" / "0", 3)  # inside the first inner chunk: step 0's grid
    ds = SQPStepDataset(root, split="all", only_converged=False)
    with pytest.raises(
        StoreCorruptionError, match=r"array 'grid', chunk c/0/0/0 \(inner chunk of step row 0\): checksum"
    ):
        ds[0]
    np.testing.assert_array_equal(ds[1]["grid"].numpy(), records[0].steps["grid"][1])  # other steps unaffected
    flip_bit(wdir / "velocity" / "c" / "0" / "0", 5, bit=3)
    with pytest.raises(StoreCorruptionError, match=r"array 'velocity', chunk c/0/0: checksum mismatch"):
        SQPStepDataset(root, split="all", only_converged=False)[1]
    flip_bit(wdir / "pose" / "zarr.json", 40)
    with pytest.raises(StoreCorruptionError, match=r"array 'pose', metadata zarr.json: array metadata fails"):
        DatasetStore.open(root).open_world(0)
    flip_bit(wdir / "pose" / "zarr.json", 40)  # undo
    text = (wdir / "zarr.json").read_text()
    (wdir / "zarr.json").write_text(text.replace('"kind": "rooms"', '"kind": "rooma"'))
    with pytest.raises(StoreCorruptionError, match=r"world w000000, metadata zarr.json: group metadata fails its SHA"):
        DatasetStore.open(root).open_world(0)


def test_verify_and_repair(tmp_path, capsys):
    from mnemo_mpc.cli import main

    root, _ = small_store(tmp_path, worlds=3)
    assert verify_store(root).ok
    assert main(["data", "verify", str(root), "--no-progress"]) == 0
    capsys.readouterr()
    flip_bit(root / WORLDS_DIR / world_name(1) / "expert_controls" / "c" / "0" / "0" / "0", 17)
    report = verify_store(root)
    assert report.bad_worlds == [1] and not report.ok
    assert report.problems[0]["array"] == "expert_controls" and report.problems[0]["chunk"] == "c/0/0/0"
    assert main(["data", "verify", str(root), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["bad_worlds"] == [1]
    assert main(["data", "verify", str(root), "--repair", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "w000001 array expert_controls chunk c/0/0/0: checksum mismatch" in out and "repaired" in out
    assert DatasetStore.open(root).world_ids == [0, 2]
    assert [p.name.split("-")[0] for p in (root / ".quarantine").iterdir()] == ["w000001"]
    assert main(["data", "verify", str(root), "--no-progress"]) == 0
    # A resumed collection sees world 1 as not committed, so it is collected again.
    assert DatasetStore.create_or_resume(root, CONFIG).committed_world_ids() == {0, 2}
    assert main(["data", "verify", str(tmp_path / "nope")]) == 2
    assert "not a dataset store" in capsys.readouterr().err


def test_stats_refuse_unverified_figures(tmp_path):
    root, _ = small_store(tmp_path)
    s = dataset_stats(root, verify=False)
    assert s["verified"] is False and s["examples"] == 12
    assert s["expert_iterations"] is None and s["grid_shapes"] is None
    (root / WORLDS_DIR / world_name(0) / "mpc_time_s" / "c" / "0").unlink()
    with pytest.raises(StoreCorruptionError, match="'mpc_time_s'"):
        dataset_stats(root)


def test_throughput_reads_as_words(tmp_path, capsys):
    """Issue 27: `collect` and `data stats` printed keys like `projected_hours_2787_worlds_2_workers_wall`; now the
    numbers are nested under readable names, and `data stats` says them in a sentence."""
    from mnemo_mpc.cli import main
    from mnemo_mpc.dataset.stats import throughput_text

    root = tmp_path / "ds"
    store = DatasetStore.create_or_resume(root, CONFIG)
    rec = synthetic_record(0, 6)
    rec.info.update(wall_time_s=2.0, cpu_time_s=1.5)
    store.record_world(write_world(root, rec))
    t = dataset_stats(root)["throughput"]
    assert t == {
        "examples_per_s_per_worker": {"wall": 3.0, "cpu": 4.0},
        "projected_hours": {"worlds": 2787, "workers": 2, "wall": 0.77, "cpu": 0.58},
    }
    text = "3 examples/s per worker (wall clock), 4 (CPU time); 2787 worlds on 2 workers: 0.77 h (wall clock), 0.58 h"
    assert throughput_text(t).startswith(text)
    assert main(["data", "stats", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"throughput       {text}" in out and "projected_hours" not in out
