"""The spatial Mnemosyne ViT warm start: inputs, model, training, ONNX export and runtime, on a tiny real store."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart import data as wdata
from mnemo_mpc.warmstart.inputs import InputSpec, grid_input, mirror, vector_input
from mnemo_mpc.warmstart.model import ATTENTIONS, SpatialMnemosyneViT, ViTConfig, rollout

pytest.importorskip("pybullet")
ROBOT = RobotModel()
STEPS = 25
TINY = dict(width=16, depth=1, head_width=32, num_features=8)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four short closed-loop episodes (25 steps each) collected into a real store."""
    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.sim.episode import EpisodeConfig

    root = tmp_path_factory.mktemp("ws") / "store"
    cfg = CollectConfig(seed=7, episode=EpisodeConfig(time_limit_s=STEPS * 0.1, keep_plan_every=0))
    collect(root, 4, cfg, workers=1, progress=False)
    return root


def train_cfg(store, **kw):
    from mnemo_mpc.warmstart.train import WarmStartTrainConfig

    model = ViTConfig(**TINY)
    base = dict(data=str(store), epochs=3, batch_size=16, lr=3e-3, val_fraction=0.25, threads=1, model=model)
    base.update(kw)
    return WarmStartTrainConfig(**base)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_model_shapes_bounds_and_rollout_consistency(attention):
    cfg = ViTConfig(attention=attention, **TINY)
    torch.manual_seed(0)
    model = SpatialMnemosyneViT(cfg).eval()
    torch.nn.init.normal_(model.head[-1].weight, std=1.0)  # large raw outputs: the decoder must still bound them
    spec = cfg.inputs
    grid, vector = torch.randn(5, 2, spec.size, spec.size), torch.randn(5, spec.vector_size) * 0.5
    with torch.no_grad():
        u = model(grid, vector)
    assert u.shape == (5, spec.N, 2) and torch.isfinite(u).all()
    lim = cfg.limits
    assert (u[..., 0] >= lim.v_min - 1e-6).all() and (u[..., 0] <= lim.v_max + 1e-6).all()
    assert (u[..., 1].abs() <= lim.w_max + 1e-6).all()
    # rate limits hold until the velocity bounds clip (the robot's current velocity is in range here)
    vel = torch.tensor([[0.25, 0.0]]) / torch.tensor([lim.v_max, lim.w_max])
    vector[:, :2] = vel
    with torch.no_grad():
        u = model(grid, vector)
    steps = torch.diff(torch.cat([torch.tensor([[[0.25, 0.0]]]).expand(5, 1, 2), u], dim=1), dim=1).abs()
    assert (steps <= torch.tensor([lim.a_max, lim.alpha_max]) * spec.dt + 1e-5).all()
    # states by the robot model's rollout: dynamically consistent
    start = np.array([0.3, -1.0, 2.0])
    states = rollout(u.double(), spec.dt, torch.tensor(start).expand(5, 3)).numpy()
    for b in range(5):
        np.testing.assert_allclose(states[b], ROBOT.rollout(start, u[b].double().numpy(), spec.dt), atol=1e-12)


def test_inputs_see_the_problem_in_the_robot_frame_and_mirror_exactly():
    """The same situation at another pose gives the same inputs; mirroring the world mirrors the inputs."""
    spec = InputSpec()
    data = np.zeros((120, 120), np.int8)
    data[70:80, 75:90] = 100
    data[30:35, 20:100] = 100
    grid = OccupancyGrid(data, 0.05, (-3.0, -3.0, 0.0))
    field = DistanceField(grid)
    pose = np.array([0.1, 0.2, 0.4])
    ref = np.stack([pose[0] + np.linspace(0, 1.2, spec.N + 1), pose[1] + np.linspace(0, 0.3, spec.N + 1)], 1)
    subgoal = np.array([1.3, 0.5, 0.8])
    g0, v0 = grid_input(field, pose, ROBOT, spec), vector_input(pose, [0.3, 0.2], subgoal, ref, ROBOT, spec)
    # the whole scene rotated and translated: identical inputs
    rot, shift = 0.9, np.array([2.0, -1.0])
    c, s = np.cos(rot), np.sin(rot)
    r = np.array([[c, -s], [s, c]])
    moved = OccupancyGrid(data, 0.05, (*(r @ [-3.0, -3.0] + shift), rot))

    def move(p):
        p = np.asarray(p, dtype=float)
        return np.concatenate([r @ p[:2] + shift, p[2:] + rot]) if p.ndim == 1 else p[:, :2] @ r.T + shift

    g1 = grid_input(DistanceField(moved), move(pose), ROBOT, spec)
    v1 = vector_input(move(pose), [0.3, 0.2], move(subgoal), move(ref), ROBOT, spec)
    np.testing.assert_allclose(g1, g0, atol=1e-5)
    np.testing.assert_allclose(v1, v0, atol=1e-6)
    # mirror the world about the robot's heading line: inputs mirror exactly
    flipped = OccupancyGrid(data[::-1].copy(), 0.05, (-3.0, -3.0, 0.0))  # y -> -y about the grid's centre y = 0
    fpose = np.array([pose[0], -pose[1], -pose[2]])
    fref, fsub = ref * [1, -1], subgoal * [1, -1, -1]
    g2 = grid_input(DistanceField(flipped), fpose, ROBOT, spec)
    v2 = vector_input(fpose, [0.3, -0.2], fsub, fref, ROBOT, spec)
    gm, vm, _ = mirror(g0, v0, np.zeros((spec.N, 2), np.float32), spec)
    np.testing.assert_allclose(g2, gm, atol=1e-5)
    np.testing.assert_allclose(v2, vm, atol=1e-6)


def test_examples_come_from_converged_expert_steps(store):
    spec = InputSpec()
    cache = wdata.build_cache(store, spec, progress=False)
    s = wdata.DatasetStore.open(store)
    arrays = wdata.load(cache, s.world_ids)
    assert len(arrays) == s.manifest["counts"]["examples_expert_converged"] > 0
    assert arrays.grid.shape[1:] == (2, spec.size, spec.size) and arrays.vector.shape[1] == spec.vector_size
    assert np.all(np.abs(arrays.grid) <= 1.0) and np.all(np.isfinite(arrays.vector))
    assert np.all(arrays.controls[..., 0] >= -1e-6) and np.all(arrays.controls[..., 0] <= ROBOT.v_max + 1e-6)
    # the first example of a world starts at rest (velocity 0) at the world's start
    assert np.allclose(arrays.vector[0, :2], 0.0)
    with pytest.raises(wdata.DatasetError, match="N="):
        wdata.build_cache(store, InputSpec(N=20), progress=False)


def test_a_tiny_training_run_lowers_the_validation_loss_and_resumes(store, tmp_path):
    from mnemo_mpc.warmstart.train import train

    out = tmp_path / "run"
    first = train(train_cfg(store, epochs=1), out, progress=False)
    result = train(train_cfg(store, epochs=6), out, progress=False)  # resumes after epoch 1
    history = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in history] == list(range(1, 7))
    assert history[-1]["val_loss"] < first["history"]["val_loss"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert (out / "loss_curve.png").stat().st_size > 5000 and result["train_worlds"] == 3
    with pytest.raises(InputError, match="another configuration"):
        train(train_cfg(store, epochs=6, lr=1e-2), out, progress=False)


def test_a_one_epoch_loss_curve_shows_its_point(tmp_path):
    """One epoch is one point per curve: a bare line draws nothing there, so each point carries a marker, drawn in
    the curve's colour where the point lies."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from mnemo_mpc.warmstart.train import history_figure, plot_history

    history = [{"epoch": 1, "train_loss": 0.3, "val_loss": 0.1, "val_rms_v": 0.05, "val_rms_w": 0.2}]
    fig = history_figure(history)
    try:
        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3] / 255.0
        lines = [ln for ax in fig.axes for ln in ax.get_lines()]
        assert len(lines) == 4
        for ln in lines:
            assert len(ln.get_xdata()) == 1 and ln.get_marker() not in (None, "", "None", " ")
            x, y = ln.axes.transData.transform((ln.get_xdata()[0], ln.get_ydata()[0]))
            row, col = int(round(pixels.shape[0] - y)), int(round(x))
            assert np.allclose(pixels[row, col], to_rgb(ln.get_color()), atol=0.1), ln.get_label()
    finally:
        plt.close(fig)
    plot_history(history, tmp_path / "loss_curve.png")
    assert (tmp_path / "loss_curve.png").stat().st_size > 5000


def test_a_pack_holds_the_stores_examples_and_trains_the_same_run(store, tmp_path):
    from mnemo_mpc.warmstart.pack import read_pack, write_pack
    from mnemo_mpc.warmstart.train import train

    path = tmp_path / "store.mnpack"
    meta = write_pack(store, InputSpec(), path, val_fraction=0.25, progress=False)
    pack = read_pack(path)
    train_ids, val_ids = wdata.world_split(store, 0.25, 0)
    assert (pack.meta["train_worlds"], pack.meta["val_worlds"]) == (train_ids, val_ids)
    cache = wdata.cache_dir(store, pack.spec)
    for got, want in ((pack.train, wdata.load(cache, train_ids)), (pack.val, wdata.load(cache, val_ids))):
        assert np.array_equal(got.world, want.world)
        # 8-bit levels over each channel's range: half a step (1.25/255/2, 2/255/2) plus float16 rounding
        err = np.abs(got.grid.astype(np.float32) - want.grid.astype(np.float32)).max(axis=(0, 2, 3))
        assert err[0] < 0.0026 and err[1] < 0.0041
        assert np.allclose(got.vector, want.vector, rtol=1e-3, atol=1e-3)
        assert np.allclose(got.controls, want.controls, rtol=1e-3, atol=1e-4)
    assert meta["robot"] == pack.meta["robot"] and pack.robot == RobotModel(**meta["robot"])
    write_pack(store, InputSpec(), tmp_path / "half.mnpack", val_fraction=0.25, every=2, progress=False)
    half, full = read_pack(tmp_path / "half.mnpack"), pack.train
    for w in np.unique(full.world):  # each world's examples 0, 2, 4, ...; validation whole
        np.testing.assert_array_equal(half.train.controls[half.train.world == w], full.controls[full.world == w][::2])
    assert len(half.val) == len(pack.val)
    result = train(train_cfg(path, epochs=1), tmp_path / "run", progress=False)
    assert (result["train_examples"], result["val_examples"]) == (len(pack.train), len(pack.val))
    with pytest.raises(InputError, match="seed=0, the run asks 3"):
        train(train_cfg(path, epochs=1, seed=3), tmp_path / "run2", progress=False)
    with pytest.raises(InputError, match="inputs for"):
        train(train_cfg(path, epochs=1, model=ViTConfig(**TINY, inputs=InputSpec(clip_m=2.0))), tmp_path / "run3")


def test_a_damaged_or_hostile_pack_is_refused_by_name_before_it_is_decompressed(store, tmp_path):
    import zipfile

    from mnemo_mpc.warmstart.pack import read_pack, write_pack

    good = tmp_path / "good.mnpack"
    write_pack(store, InputSpec(), good, val_fraction=0.25, progress=False)
    cut = tmp_path / "cut.mnpack"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(wdata.DatasetError, match="cut.mnpack: not a readable training pack"):
        read_pack(cut)
    with zipfile.ZipFile(good) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    meta = json.loads(members["meta.json"])

    def repack(name, **changes):
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_LZMA) as zf:
            for k, v in {**members, **changes}.items():
                zf.writestr(k, v)
        return path

    # A member declaring gigabytes of zeros (a few kB compressed) is refused from its declared size.
    bomb = np.zeros((20_000, 2, 40, 40), dtype=np.uint8)
    import io

    buf = io.BytesIO()
    np.save(buf, bomb)
    with pytest.raises(wdata.DatasetError, match="train/grid: declares 64000128 bytes, expected"):
        read_pack(repack("bomb.mnpack", **{"train/grid.npy": buf.getvalue()}))
    with pytest.raises(wdata.DatasetError, match="expected format"):
        read_pack(repack("fmt.mnpack", **{"meta.json": json.dumps({**meta, "version": 99})}))
    with pytest.raises(wdata.DatasetError, match="KeyError"):
        read_pack(repack("nokey.mnpack", **{"meta.json": json.dumps({k: v for k, v in meta.items() if k != "shapes"})}))
    with pytest.raises(wdata.DatasetError, match="not a readable training pack"):
        read_pack(tmp_path)  # a directory


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory):
    from mnemo_mpc.warmstart.export import export
    from mnemo_mpc.warmstart.train import train

    out = tmp_path_factory.mktemp("run") / "run"
    train(train_cfg(store, epochs=2), out, progress=False)
    onnx_path = out.parent / "tiny.onnx"
    info = export(out, onnx_path)
    return out, onnx_path, info


def test_export_checks_and_carries_the_metadata(exported):
    import onnx

    _, path, info = exported
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    meta = {p.key: p.value for p in proto.metadata_props}
    for key in (
        "format",
        "version",
        "inputs",
        "robot",
        "footprint",
        "normalisation",
        "model",
        "feature_map",
        "training",
    ):
        assert f"mnemo_mpc.{key}" in meta
    inputs = json.loads(meta["mnemo_mpc.inputs"])
    assert inputs["N"] == 30 and inputs["dt"] == 0.1 and inputs["size"] == 40 and inputs["resolution"] == 0.1
    assert json.loads(meta["mnemo_mpc.robot"])["v_max"] == ROBOT.v_max
    assert json.loads(meta["mnemo_mpc.training"])["train_worlds"] == 3
    batch = [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim][0]
    assert batch == "batch"  # dynamic batch
    # export itself compares onnxruntime with torch on the run's validation examples
    assert info["parity"]["inputs"] == "validation" and info["parity"]["examples"] > 0
    assert info["parity"]["max_abs"] <= 1e-4
    assert json.loads(meta["mnemo_mpc.parity"]) == info["parity"]


def test_a_fixed_epoch_size_gives_every_training_set_the_same_steps_and_runs_compare(store, exported, tmp_path):
    from mnemo_mpc.warmstart.compare import compare, plot
    from mnemo_mpc.warmstart.train import train

    result = train(train_cfg(store, epochs=1, epoch_examples=160), tmp_path / "run", progress=False)
    assert result["train_examples"] < 160  # an epoch longer than the set: several passes, same step count
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert len(history) == 1 and np.isfinite(history[0]["val_loss"])
    with pytest.raises(InputError, match="epoch_examples"):
        train_cfg(store, epoch_examples=4)
    table = compare([str(exported[0]), str(tmp_path / "run")])
    assert table["same_validation_split"] and set(table["differs"]) == {"epoch_examples", "epochs"}
    assert [r["train_worlds"] for r in table["runs"]] == [3, 3]
    assert table["runs"][1]["val_loss"] == history[0]["val_loss"]
    plot(table, tmp_path / "runs.png")
    assert (tmp_path / "runs.png").stat().st_size > 5000
    with pytest.raises(InputError, match="not a finished training run"):
        compare([str(tmp_path)])


def test_bench_model_times_batches_and_sequence_lengths(exported):
    from mnemo_mpc.bench.model import ModelBenchConfig, report, run

    _, path, _ = exported
    cfg = ModelBenchConfig(batches=(1, 4), crops=(20, 40), attentions=("favor_plus", "softmax"), repeats=3, warmup=1)
    result = run(replace(cfg, model=str(path)), progress=False)
    assert set(result["batch"]["favor_plus"]) == {"1", "4"} and set(result["sequence"]["softmax"]) == {"16", "64"}
    assert result["growth"]["favor_plus"]["token_ratio"] == 4.0 and result["growth"]["favor_plus"]["ratio"] > 0
    assert result["model"]["provider"] == "CPUExecutionProvider" and result["model"]["total_ms"]["p50"] > 0
    assert "shipped model" in report(result)


def test_bench_pipeline_and_the_study_run_on_a_model(exported, tmp_path, monkeypatch):
    """Every mode on fresh and steady steps of a held-out world, with the schema the issue names; the study's
    table and figure come from the same runs."""
    from mnemo_mpc.bench.pipeline import PipelineConfig, run
    from mnemo_mpc.experiments.mpc_warmstart import Config
    from mnemo_mpc.experiments.runner import run_study

    _, path, _ = exported
    result = run(PipelineConfig(worlds=1, stride=10, max_steps=60, model=str(path)), progress=False)
    assert set(result["modes"]) == {"cold", "shift", "learned", "hybrid", "learned_model", "learned_in_step", "rti"}
    assert (
        result["modes"]["rti"]["steady"]["iterations"]["p95"] == 1.0
        and "cost_gap_rel" in result["modes"]["rti"]["fresh"]
    )
    for mode, by in result["modes"].items():
        assert set(by) == {"fresh", "steady"}, mode
        for s in by.values():
            assert {"iterations", "inference_ms", "total_ms", "feasible_rate"} <= set(s)
            assert set(s["total_ms"]) == {"p50", "p95", "p99"}
    hard = result["modes"]["learned"]["fresh"]["where_cold_needs_4_or_more"]
    assert hard["n"] == result["modes"]["cold"]["fresh"]["where_cold_needs_4_or_more"]["n"]
    # choose_start: no model on the step; the shift, or the shift solved ahead on the worker
    assert set(result["modes"]["hybrid"]["steady"]["starts_used"]) <= {"shift", "ahead"}
    ahead = result["prefetch"]["solve_ahead"]
    assert 0 < ahead["converged"] <= ahead["solves"] and ahead["time_ms"]["p50"] > 0
    assert set(result["modes"]["learned"]["fresh"]["starts_used"]) <= {"learned", "learned_prefetched"}
    assert 0 < result["prefetch"]["fitted"] <= result["prefetch"]["recorded"]
    assert set(result["ratios"]) == {"fresh_learned_vs_cold_total_p50", "steady_hybrid_vs_shift_total_p50"}
    import mnemo_mpc.experiments.mpc_warmstart as study

    monkeypatch.setattr(study, "quick_config", lambda: Config(worlds=1, stride=10, model=str(path)))
    out = run_study("mpc_warmstart", tmp_path, mode="quick")
    assert "learned_start_cuts_iterations" in out["claims"] and out["figures"] == ["mpc_warmstart.png"]
    assert "paper: cold" in (tmp_path / "mpc_warmstart" / "summary.md").read_text()


def test_bench_pipeline_skips_a_problem_no_start_can_solve(exported, monkeypatch):
    """A recorded step whose problem has no solution (the harsh generic robot met a sub-goal in an occupied cell) is
    counted and left out, not the end of the benchmark."""
    import mnemo_mpc.bench.pipeline as pipeline
    from mnemo_mpc.errors import InfeasibleProblemError

    _, path, _ = exported
    record, calls = pipeline._record, []

    def first_unsolvable(*args):
        calls.append(1)
        if len(calls) == 1:
            raise InfeasibleProblemError("goal (1.0, 2.0) lies in an occupied cell (3, 4)")
        return record(*args)

    monkeypatch.setattr(pipeline, "_record", first_unsolvable)
    result = pipeline.run(pipeline.PipelineConfig(worlds=1, stride=10, max_steps=40, model=str(path)), progress=False)
    assert result["config"]["unsolvable_steps"] == 1 and result["prefetch"]["recorded"] == len(calls) - 1 >= 1


def test_the_pipeline_total_is_the_critical_path():
    """A start predicted during the previous period puts only its taking (`select_s`) on the step; one computed on
    the step puts its inference there too."""
    from types import SimpleNamespace

    from mnemo_mpc.bench.pipeline import Solve, summarize

    result = SimpleNamespace(
        iterations=1, time_s=0.4e-3, cpu_time_s=0.4e-3, success=True, feasible=True, solver_stats={}
    )
    ahead = summarize([Solve(result, 1.0e-3, 0.05e-3, "learned_prefetched", False)], "wall")
    on_step = summarize([Solve(result, 1.0e-3, 0.05e-3, "learned")], "wall")
    assert ahead["total_ms"]["p50"] == pytest.approx(0.45) and on_step["total_ms"]["p50"] == pytest.approx(1.45)
    assert ahead["inference_ms"]["p50"] == pytest.approx(1.0)  # reported, off the critical path


def test_onnx_runtime_matches_torch_on_dataset_batches(exported, store, caplog):
    from mnemo_mpc.warmstart.runtime import WarmStartModel
    from mnemo_mpc.warmstart.train import load_model

    run, path, _ = exported
    model, _ = load_model(run)
    with caplog.at_level(logging.INFO, logger="mnemo_mpc.warmstart.runtime"):
        rt = WarmStartModel(path, ROBOT, 30, 0.1)
    assert rt.provider == "CPUExecutionProvider"  # no GPU on this machine
    assert len([r for r in caplog.records if "warm-start model" in r.getMessage()]) == 1
    arrays = wdata.load(wdata.cache_dir(store, model.cfg.inputs), wdata.DatasetStore.open(store).world_ids)
    for batch in (1, 7, 32):
        g, v = arrays.grid[:batch].astype(np.float32), arrays.vector[:batch]
        with torch.no_grad():
            want = model(torch.from_numpy(g), torch.from_numpy(v)).numpy()
        assert np.abs(rt.predict(g, v) - want).max() <= 1e-4


def test_runtime_errors_name_the_field(exported, tmp_path):
    from mnemo_mpc.warmstart.runtime import WarmStartModel

    _, path, _ = exported
    with pytest.raises(InputError, match="mnemo_mpc.robot.v_max"):
        WarmStartModel(path, replace(ROBOT, v_max=0.7), 30, 0.1)
    with pytest.raises(InputError, match="N=30"):
        WarmStartModel(path, ROBOT, 20, 0.1)
    rt = WarmStartModel(path, ROBOT, 30, 0.1)
    with pytest.raises(InputError, match="grid.*float32"):
        rt.predict(np.zeros((1, 2, 40, 40)), np.zeros((1, 67), np.float32))
    with pytest.raises(InputError, match=r"vector.*shape"):
        rt.predict(np.zeros((1, 2, 40, 40), np.float32), np.zeros((1, 60), np.float32))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(InputError, match="not a readable ONNX model"):
        WarmStartModel(bad, ROBOT, 30, 0.1)
    with pytest.raises(InputError, match="cannot read"):
        WarmStartModel(tmp_path / "missing.onnx", ROBOT, 30, 0.1)


def test_the_runtime_plugs_into_the_controller(exported):
    """hybrid with a (weak) model drives a closed-loop episode: every step planned from one of the candidates."""
    from mnemo_mpc.nav.controller import Controller, ControllerConfig
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.worlds import generate_world
    from mnemo_mpc.warmstart.runtime import WarmStartModel

    _, path, _ = exported
    model = WarmStartModel(path, ROBOT, 30, 0.1)
    c = Controller(ROBOT, config=ControllerConfig(warm_start="hybrid"), warm_start_provider=model)
    result = run_episode(generate_world(3), controller=c, config=EpisodeConfig(time_limit_s=3.0))
    starts = {s["start"] for s in result.steps}
    assert starts <= {"cold", "shift", "learned"}
    # every step planned, but for the rotation shim's in-place turn towards the path at the start
    assert all(s["status"] in ("planned", "rotating_to_path") for s in result.steps)
    assert sum(s["status"] == "planned" for s in result.steps) > len(result.steps) // 2


@pytest.mark.slow
def test_torchrun_trains_data_parallel_on_two_cpu_processes(store, tmp_path):
    """DistributedDataParallel on the gloo backend, two processes: one history, written by rank 0."""
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "mnemo_mpc.cli",
        "train",
        "--data",
        str(store),
        "--out",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--width",
        "16",
        "--depth",
        "1",
        "--num-features",
        "8",
        "--threads",
        "1",
        "--no-progress",
        "--device",
        "cpu",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    history = json.loads((out / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["val_loss"] > 0
    assert Path(out / "best.pt").exists()


def test_auto_says_in_one_line_why_no_shipped_model_fits(exported, tmp_path, monkeypatch, caplog):
    """`auto` on a robot no shipped model was trained for: shift, and one log line naming each model and the first
    field that differs."""
    from mnemo_mpc.warmstart.runtime import resolve

    _, path, _ = exported
    models = tmp_path / "models"
    models.mkdir()
    (models / "disc.onnx").write_bytes(path.read_bytes())
    monkeypatch.setenv("MNEMO_MPC_MODELS", str(models))
    with caplog.at_level(logging.INFO, logger="mnemo_mpc.warmstart.runtime"):
        assert resolve(None, None, ROBOT, 30, 0.05) == ("shift", None)
    lines = [r.getMessage() for r in caplog.records if "no shipped model fits" in r.getMessage()]
    assert len(lines) == 1 and "disc.onnx" in lines[0] and "dt=0.05" in lines[0]
    mode, model = resolve(None, None, ROBOT, 30, 0.1)
    assert mode == "hybrid" and model is not None
