"""Issue 27: quiet, truthful logs and progress -- what a new user sees on the console."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from mnemo_mpc.cli import main

ROOT = Path(__file__).resolve().parents[1]


def make_recipe(target: str) -> str:
    """The recipe lines of a Makefile target."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert match, f"no target {target}"
    return "".join(line for line in match.group(1).splitlines(True) if not line.strip().startswith("#"))


def test_make_experiments_runs_one_thread_and_make_demo_is_quiet():
    # `run lemma1_pgd --quick`: 41.8 s with the default threads on a busy 2-core machine, 9.1 s with one
    assert "OMP_NUM_THREADS=1" in make_recipe("experiments") and "MKL_NUM_THREADS=1" in make_recipe("experiments")
    assert "--quiet" in make_recipe("demo")  # a summary, not 351 per-step lines


def test_demo_help_says_how_to_drop_the_per_step_lines(capsys):
    assert main(["demo", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    description = out.split("options:")[0]
    assert "--quiet prints only the summary" in description and "--quiet summary only: no per-step lines" in out


def test_the_runtime_says_why_not_on_the_gpu_only_at_debug(monkeypatch, caplog):
    """Every command loading the warm-start model logged the missing CUDA / TensorRT libraries at INFO. Now: one short
    INFO line with the provider, the libraries at DEBUG; at INFO only for a caller that asked for a GPU provider."""
    from mnemo_mpc.planning.robot import RobotModel
    from mnemo_mpc.warmstart import runtime

    model = ROOT / "models" / "mnemo_vit_favor_plus_n30.onnx"
    real_session = runtime._session

    def session(data, providers, threads):  # as on a machine with the GPU build and no CUDA libraries
        got, provider, skipped = real_session(data, ("CPUExecutionProvider",), threads)
        gpu = [p for p in providers if p != "CPUExecutionProvider"]
        return got, provider, {p: "libcublas.so.13: cannot open shared object file" for p in gpu} | skipped

    monkeypatch.setattr(runtime, "_session", session)
    with caplog.at_level(logging.DEBUG, logger="mnemo_mpc.warmstart.runtime"):
        runtime.WarmStartModel(model, RobotModel(), 30, 0.1)
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert info == ["warm-start model mnemo_vit_favor_plus_n30.onnx on CPUExecutionProvider"]
    assert len(debug) == 1 and "libcublas" in debug[0] and "Tensorrt" in debug[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mnemo_mpc.warmstart.runtime"):
        runtime.WarmStartModel(
            model, RobotModel(), 30, 0.1, providers=("CUDAExecutionProvider", "CPUExecutionProvider")
        )
    (line,) = [r.getMessage() for r in caplog.records]
    assert "on CPUExecutionProvider (CUDA: libcublas" in line


def test_eval_counts_the_controllers_notes_instead_of_printing_them(caplog):
    """Moving-obstacle evals printed ~23 "start blocked ... in collision" WARNINGs into the progress bar: during the
    episodes the controller's records below ERROR are counted and summed up in one line afterwards."""
    from mnemo_mpc.commands._logs import episode_notes

    controller = logging.getLogger("mnemo_mpc.nav.controller")
    with caplog.at_level(logging.INFO):
        with episode_notes() as held:
            for _ in range(3):
                controller.warning("start blocked: start pose (1.000, 2.000) is in collision: clearance 0.1 m")
            controller.warning("MPC problem infeasible: goal in an obstacle")
            controller.info("recovery_rotate ended after 1.7 s")
            controller.error("control tick failed")  # errors are printed as they come
            logging.getLogger("mnemo_mpc.sim.episode").warning("another library's warning")  # so are other loggers
        assert held is not None
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("ERROR", "control tick failed") in lines and ("WARNING", "another library's warning") in lines
    assert not any(r.name.startswith("mnemo_mpc.nav") and r.levelno < logging.ERROR for r in caplog.records)
    summary = [m for level, m in lines if m.startswith("controller notes")]
    assert summary == [
        "controller notes held back during the episodes: start blocked x3, MPC problem infeasible x1, 1 info line "
        "(mnemo-mpc -v prints each)"
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO), episode_notes(verbose=True):  # `mnemo-mpc -v eval`: each line
        controller.warning("start blocked: x")
    assert [r.getMessage() for r in caplog.records] == ["start blocked: x"]


def test_eval_runs_its_episodes_under_episode_notes(tmp_path, monkeypatch):
    """The eval command itself takes the controller's notes out of the bar (not only the helper)."""
    pytest.importorskip("pybullet")
    import mnemo_mpc.commands._logs as logs

    entered = []
    real = logs.episode_notes

    def spy(verbose=False):
        entered.append(verbose)
        return real(verbose)

    monkeypatch.setattr(logs, "episode_notes", spy)
    out = tmp_path / "e.json"
    argv = ["eval", "--worlds", "1", "--time-limit", "0.3", "--no-progress", "--out", str(out)]
    assert main(argv) == 0 and entered == [False]


def test_bench_node_progress_counts_ticks_not_a_billion_messages(tmp_path, capsys):
    out = tmp_path / "node.json"
    assert main(["bench", "node", "--ticks", "3", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "3/3" in err and "tick" in err and "1000000000" not in err


def test_bench_sim_prints_its_measurements_not_its_config(tmp_path, capsys):
    pytest.importorskip("pybullet")
    out = tmp_path / "sim.json"
    assert main(["bench", "sim", "--worlds", "1", "--steps", "2", "--beams", "36", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sim_config" in json.loads(out.read_text())  # the JSON keeps the configuration
    assert "sim_config" not in printed and "physics_hz" not in printed and "machine" not in printed
    assert re.search(r"^timing lidar: median_ms [\d.]+, p95_ms", printed, re.M)
    assert len(printed.splitlines()) <= 12


def test_train_help_shows_the_defaults(capsys):
    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for flag, default in (("--epochs", 30), ("--batch-size", 256), ("--lr", 0.001), ("--seed", 0), ("--width", 64)):
        assert re.search(rf"{flag} \S+ [^-]*\(default: {default}\)", out), flag
    assert "(default: None)" not in out and "(default: False)" not in out


def test_the_torch_optimizer_is_importable_from_the_package():
    from mnemo_mpc.optimizers import MnemosyneOptimizer, load_learned_optimizer
    from mnemo_mpc.optimizers.factory import load_learned_optimizer as load
    from mnemo_mpc.optimizers.torch_optim import MnemosyneOptimizer as Optimizer

    assert MnemosyneOptimizer is Optimizer and load_learned_optimizer is load
    with pytest.raises(ImportError):
        from mnemo_mpc.optimizers import NoSuchThing  # noqa: F401


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--worlds", "1", "--out", "/proc/x/y.json"],
        ["bench", "sim", "--out", "/proc/x/y.json"],
        ["demo", "--out", "/proc/x/y"],
        ["bench", "sim", "--out", "/proc/y.json"],  # /proc exists, as root os.access says yes, and it takes no files
    ],
)
def test_an_unwritable_out_is_one_line_before_any_work(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --out: cannot create /proc/" in err, err


def test_experiments_out_under_proc_is_one_line(capsys):
    from mnemo_mpc.experiments.__main__ import main as experiments_main

    assert experiments_main(["run", "lemma1_pgd", "--out", "/proc/x/y"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --out: cannot create /proc/x/y" in err, err
