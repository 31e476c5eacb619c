"""File fuzz of the warm-start model and robot-profile surfaces (issue 26), beside `fuzz_maps.py` and `fuzz_store.py`.

Seeded generators build cases in families, each a set of files and what must happen:

* models (`WarmStartModel`, what `--model` and the node's `warm_start_model` load): valid small models of several
  crops and horizons; graphs that disagree with their metadata (crop, vector, knots fixed or dynamic, element type,
  names); outputs NaN / inf; every metadata field missing, not JSON, of the wrong type, NaN / Infinity / negative /
  huge / 5000-digit, nested 10,000 deep; special files (FIFO, /dev/zero symlink, directory, sparse file over the
  cap); byte mutations and truncations of a valid model (any outcome but a bug is fine: the validation is the oracle);
* profiles (`NavParams.from_yaml` + `profile.build`, what `--params` and the node load): valid profiles with random
  in-bounds values; each numeric field over its upper bound, negative, .nan, .inf, a 5000-digit number, a string, a
  bool, a list; hostile footprints (5000 digits, nesting, non-convex, huge, NaN); hostile YAML (alias bomb, deep,
  duplicate keys, non-UTF-8, tags); special files.

Each case runs in a worker subprocess (`CASE_TIMEOUT_S`, peak RSS per case, an address-space backstop), as in
`fuzz_maps.py`. Bugs: any exception but `InputError`, a message that names neither the file nor a field, a hang, a
crash, a case over `RSS_LIMIT_BYTES`, an invalid file that loads (silent accept), a valid one refused.

    python tests/fuzz_files.py --surface model --cases 2000 --out results/fuzz_models.json
    python tests/fuzz_files.py --surface profile --cases 2000 --out results/fuzz_profiles.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz_maps import _materialise, _peak_rss_bytes, _peak_rss_reset, _recv, _send  # noqa: E402

CASE_TIMEOUT_S = 10.0
RSS_LIMIT_BYTES = 1 << 30
BUG_CLASSES = (
    "other_exception",
    "message_without_name",
    "hang",
    "crash",
    "over_memory",
    "silent_accept",
    "rejected_valid",
)
SMALL_CAP = 1 << 20  # MNEMO_MPC_MAX_MODEL_BYTES in the workers: sparse files just over it stay cheap to create


@dataclass
class Case:
    id: int
    surface: str  # "model" | "profile"
    family: str
    sub: str
    files: dict[str, Any]  # name -> bytes or a special (fuzz_maps._materialise)
    expect: str  # "valid" | "invalid" | "any" (mutations: judged by the loader's own checks)
    target: str = "target"
    kwargs: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------------------------
def _spec(rng: random.Random) -> dict[str, Any]:
    return {"size": rng.choice([8, 16, 40, 64]), "N": rng.choice([5, 10, 30]), "dt": rng.choice([0.05, 0.1])}


def _model(spec: dict[str, Any], **kwargs: Any) -> bytes:
    from onnx_models import model_bytes

    from mnemo_mpc.warmstart.inputs import InputSpec

    return model_bytes(InputSpec(**spec), **kwargs)


HOSTILE_JSON = [
    "NaN",
    "Infinity",
    "-Infinity",
    "-1",
    "0",
    "1e308",
    "1e400",
    "9" * 5000,
    '"40"',
    "true",
    "null",
    "[]",
    "{}",
    "[" * 10_000 + "]" * 10_000,
    '{"a": ' * 80 + "1" + "}" * 80,
    "{not json",
    "",
    '"\\ud800"',
]


def model_case(rng: random.Random, cid: int) -> Case:
    spec = _spec(rng)
    kw = {"n": spec["N"], "dt": spec["dt"]}
    family = rng.choices(
        ["valid", "graph", "values", "meta_field", "meta_value", "special", "mutate", "truncate"],
        [0.1, 0.15, 0.05, 0.15, 0.3, 0.05, 0.15, 0.05],
    )[0]
    if family == "valid":
        extra = rng.choice([{}, {"out_n": "knots"}, {"value": 0.3}, {"grid_size": "s", "vector_size": "v"}])
        return Case(cid, "model", family, str(sorted(extra)), {"target": _model(spec, **extra)}, "valid", kwargs=kw)
    if family == "graph":
        sub, extra = rng.choice(
            [
                ("crop", {"grid_size": spec["size"] + rng.choice([-2, 1, 8])}),
                ("vector", {"vector_size": 2 * spec["N"] + 7 + rng.choice([-1, 1, 20])}),
                ("knots", {"out_n": spec["N"] + rng.choice([-1, 1, 10])}),
                ("knots_dynamic", {"out_n": "k", "real_n": spec["N"] + rng.choice([-1, 1, 10])}),
                ("dtype", {"out_dtype": rng.choice([7, 11, 10])}),
                ("names", {"input_names": rng.choice([("image", "vector"), ("grid", "vec")])}),
                ("output_name", {"output_name": "u"}),
            ]
        )
        return Case(cid, "model", family, sub, {"target": _model(spec, **extra)}, "invalid", kwargs=kw)
    if family == "values":
        value = rng.choice([math.nan, math.inf, -math.inf])
        return Case(cid, "model", family, str(value), {"target": _model(spec, value=value)}, "invalid", kwargs=kw)
    if family == "meta_field":
        key = rng.choice(["mnemo_mpc.format", "mnemo_mpc.inputs", "mnemo_mpc.robot", "mnemo_mpc.training"])
        value = rng.choice([None, *HOSTILE_JSON])
        sub = f"{key}={'missing' if value is None else value[:12]}"
        expect = "any" if key == "mnemo_mpc.training" and value is not None else "invalid"
        if key == "mnemo_mpc.training" and value is not None:
            # free-form information: any JSON is fine, non-JSON or too deep is not
            from mnemo_mpc.safe_io import json_depth

            try:
                json.loads(value)
                expect = "valid" if json_depth(value.encode()) <= 64 and len(value) < 4300 else "invalid"
            except (ValueError, RecursionError):
                expect = "invalid"
        return Case(cid, "model", family, sub, {"target": _model(spec, meta={key: value})}, expect, kwargs=kw)
    if family == "meta_value":
        which = rng.choice(["inputs", "robot"])
        if which == "inputs":
            name = rng.choice(["size", "resolution", "behind_m", "clip_m", "margin_scale_m", "scale_m", "N", "dt"])
            doc = dict(spec)
            doc[name] = "@@"
            value = rng.choice(HOSTILE_JSON[:13] + ["200000", "1.5", "-0.1"])
            text = json.dumps(doc).replace('"@@"', value)
            return Case(
                cid,
                "model",
                family,
                f"inputs.{name}={value[:12]}",
                {"target": _model(spec, meta={"mnemo_mpc.inputs": text})},
                "any",
                kwargs=kw,
            )
        from onnx_models import robot_meta

        doc = robot_meta()
        name = rng.choice(["radius", "safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max", "footprint"])
        doc[name] = "@@"
        value = rng.choice(HOSTILE_JSON[:13] + ['[[0, "x"]]', "[[1, 2, 3]]", "[" * 3000 + "]" * 3000])
        text = json.dumps(doc).replace('"@@"', value)
        # legal: v_min 0 is the built-in robot's own; a footprint null or [] means the round robot
        legal = (name == "v_min" and value == "0") or (name == "footprint" and value in ("null", "[]"))
        return Case(
            cid,
            "model",
            family,
            f"robot.{name}={value[:12]}",
            {"target": _model(spec, meta={"mnemo_mpc.robot": text})},
            "valid" if legal else "invalid",
            kwargs=kw,
        )
    if family == "special":
        sub = rng.choice(["fifo", "dev_zero", "dir", "sparse", "symlink_loop", "empty"])
        special = {
            "fifo": ("fifo",),
            "dev_zero": ("symlink", "/dev/zero"),
            "dir": ("dir",),
            "sparse": ("sparse", SMALL_CAP + rng.randint(1, 1 << 30)),
            "symlink_loop": ("symlink", "target"),
            "empty": b"",
        }[sub]
        return Case(cid, "model", family, sub, {"target": special}, "invalid", kwargs=kw)
    data = bytearray(_model(spec))
    if family == "truncate":
        return Case(
            cid, "model", family, "truncate", {"target": bytes(data[: rng.randrange(len(data))])}, "invalid", kwargs=kw
        )
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(data))
        data[i] = rng.choice([0, 0xFF, data[i] ^ (1 << rng.randrange(8)), rng.randrange(256)])
    return Case(cid, "model", family, "bytes", {"target": bytes(data)}, "any", kwargs=kw)


def load_model(path: Path, kwargs: dict[str, Any]) -> Any:
    from onnx_models import ROBOT

    from mnemo_mpc.warmstart.runtime import WarmStartModel

    m = WarmStartModel(path, ROBOT, kwargs["n"], kwargs["dt"])
    return {"N": m.spec.N, "size": m.spec.size}


# ------------------------------------------------------------------------------------------------------------------
# profiles
# ------------------------------------------------------------------------------------------------------------------
def _profile_yaml(values: dict[str, str]) -> bytes:
    lines = ["/**:", "  ros__parameters:"]
    lines += [f"    {k}: {v}" for k, v in values.items()]
    return ("\n".join(lines) + "\n").encode()


VALID_RANGES = {  # in-bounds values that keep the horizon inside the window (profile.build checks it)
    "control_rate_hz": (10.0, 50.0),
    "stale_timeout_s": (0.1, 60.0),
    "diagnostics_rate_hz": (0.1, 100.0),
    "goal_tolerance_m": (0.05, 1.0),
    "max_grid_cells": (100, 16_000_000),
    "max_path_poses": (2, 1_000_000),
    "max_iter": (1, 100),
    "sensor_range_m": (1.0, 100.0),
    "sensor_beams": (1, 10_000),
    "v_max": (0.1, 0.5),
    "safety_margin": (0.0, 0.1),
}
NUMERIC = [
    "control_rate_hz",
    "stale_timeout_s",
    "diagnostics_rate_hz",
    "goal_tolerance_m",
    "grid_window_m",
    "grid_resolution",
    "max_grid_cells",
    "max_path_poses",
    "robot_radius",
    "footprint_tolerance",
    "safety_margin",
    "v_min",
    "v_max",
    "w_max",
    "a_max",
    "alpha_max",
    "sensor_range_m",
    "horizon_steps",
    "dt",
    "max_iter",
]
HOSTILE_VALUES = [
    ".nan",
    ".inf",
    "-.inf",
    "-1",
    "0",
    "1e308",
    "1.0e+308",
    "9" * 5000,
    "'fast'",
    "true",
    "[1, 2]",
    "{a: 1}",
    "~",
    "1.0e+9",
    "100000000",
]


def profile_case(rng: random.Random, cid: int) -> Case:
    family = rng.choices(["valid", "value", "footprint", "yaml", "special"], [0.15, 0.5, 0.15, 0.15, 0.05])[0]
    if family == "valid":
        values = {}
        for name in rng.sample(sorted(VALID_RANGES), rng.randint(1, 5)):
            lo, hi = VALID_RANGES[name]
            values[name] = str(rng.randint(lo, hi)) if isinstance(lo, int) else repr(round(rng.uniform(lo, hi), 4))
        if "control_rate_hz" not in values:
            values["control_rate_hz"] = "10.0"
        return Case(cid, "profile", family, ",".join(sorted(values)), {"target": _profile_yaml(values)}, "valid")
    if family == "value":
        name = rng.choice(NUMERIC + ["sensor_beams", "sensor_fov_deg", "sensor_dropout", "warm_start", "frame_id"])
        value = rng.choice(HOSTILE_VALUES)
        key = name if not name.startswith("sensor_") or name == "sensor_range_m" else None
        if key is None:
            text = f"/**:\n  ros__parameters:\n    sensor:\n      {name[7:]}: {value}\n".encode()
        else:
            text = _profile_yaml({name: value})
        # a few hostile values are legal for a few fields (0 for v_min / safety_margin, a string name...)
        return Case(cid, "profile", family, f"{name}={value[:12]}", {"target": text}, "any")
    if family == "footprint":
        value = rng.choice(
            [
                "'[[0.3, 0.2], [0.3, -0.2], [-0.3, -0.2], [" + "1" * 5000 + ", 0.2]]'",
                "'" + "[" * 5000 + "]" * 5000 + "'",
                "'[[0, 0], [1, 1], [1, 0], [0, 1]]'",
                "'[[1.0e+6, 1.0e+6], [-1.0e+6, 1.0e+6], [-1.0e+6, -1.0e+6], [1.0e+6, -1.0e+6]]'",
                "'[[.nan, 0], [1, 0], [0, 1]]'",
                "'[[0.3, 0.2], [0.3, -0.2]]'",
                "'[[a, b], [c, d], [e, f]]'",
                "[[0.3, 0.2], [0.3, -0.2], [-0.3, -0.2], [-0.3, 0.2]]",
                "'" + ", ".join(["[0.3, 0.2]"] * 20000) + "'",
            ]
        )
        return Case(cid, "profile", family, value[:16], {"target": _profile_yaml({"footprint": value})}, "invalid")
    if family == "yaml":
        sub = rng.choice(["alias", "deep", "dup", "utf8", "tag", "not_mapping", "no_entry", "huge_int_key"])
        text = {
            "alias": b"/**:\n  ros__parameters: &a\n    x: &b [1, 2]\n    y: [*b, *b]\n",
            "deep": b"/**:\n  ros__parameters:\n    a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
            "dup": b"/**:\n  ros__parameters:\n    v_max: 0.4\n    v_max: 0.5\n",
            "utf8": b"/**:\n  ros__parameters:\n    frame_id: \xff\xfe\n",
            "tag": b"/**:\n  ros__parameters:\n    v_max: !!python/object:os.system ['true']\n",
            "not_mapping": b"- 1\n- 2\n",
            "no_entry": b"other_node:\n  ros__parameters: {v_max: 0.4}\n",
            "huge_int_key": b"/**:\n  ros__parameters:\n    " + b"9" * 5000 + b": 1\n",
        }[sub]
        return Case(cid, "profile", family, sub, {"target": text}, "invalid")
    sub = rng.choice(["fifo", "dev_zero", "dir", "sparse", "empty"])
    special = {
        "fifo": ("fifo",),
        "dev_zero": ("symlink", "/dev/zero"),
        "dir": ("dir",),
        "sparse": ("sparse", (1 << 20) + rng.randint(1, 1 << 30)),
        "empty": b"",
    }[sub]
    return Case(cid, "profile", family, sub, {"target": special}, "invalid")


def load_profile(path: Path, kwargs: dict[str, Any]) -> Any:
    from mnemo_mpc.profile import NavParams, build

    p = build(NavParams.from_yaml(path))
    return {"N": p.mpc.N, "rate": p.params.control_rate_hz}


GENERATORS = {"model": model_case, "profile": profile_case}
LOADERS = {"model": load_model, "profile": load_profile}


def generate_cases(surface: str, n: int, seed: int = 0) -> list[Case]:
    rng = random.Random(f"{surface}:{seed}")
    return [GENERATORS[surface](rng, i) for i in range(n)]


# ------------------------------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------------------------------
def run_case_here(case: Case, root: Path) -> dict[str, Any]:
    from mnemo_mpc.errors import InputError

    root.mkdir(parents=True, exist_ok=True)
    held = _materialise(case, root)
    per_case = _peak_rss_reset()
    t0 = time.perf_counter()
    out: dict[str, Any] = {"id": case.id}
    path = root / case.target
    try:
        out.update(outcome="loaded", value=LOADERS[case.surface](path, case.kwargs))
    except InputError as exc:
        msg = str(exc)
        named = str(path) in msg or "parameter" in msg or "/dev/zero" in msg
        out.update(outcome="InputError", detail=msg[:300], names=named)
    except Exception as exc:  # noqa: BLE001 - the point is to see every other exception
        out.update(outcome="exception", detail=f"{type(exc).__name__}: {str(exc)[:300]}")
    out["wall_s"] = time.perf_counter() - t0
    out["rss_bytes"] = _peak_rss_bytes()
    out["rss_per_case"] = per_case
    for s in held:
        s.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def worker_main(tmp: str, surface: str) -> None:
    os.environ["MNEMO_MPC_MAX_MODEL_BYTES"] = str(SMALL_CAP)
    import onnxruntime  # noqa: F401 - imported before the address-space limit

    import mnemo_mpc.profile  # noqa: F401
    import mnemo_mpc.warmstart.runtime  # noqa: F401

    LOADERS[surface]  # noqa: B018 - a bad surface fails here, in the worker
    vm = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            vm = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.RLIM_INFINITY))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    while True:
        try:
            case = _recv(stdin)
        except EOFError:
            return
        _send(stdout, run_case_here(case, Path(tmp) / f"case_{case.id}"))


class _Worker:
    def __init__(self, tmp: str, surface: str) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", tmp, "--surface", surface],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.case: Case | None = None
        self.deadline = self.started = 0.0

    def submit(self, case: Case, timeout_s: float) -> None:
        self.case, self.started = case, time.monotonic()
        self.deadline = self.started + timeout_s
        _send(self.proc.stdin, case)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def classify(case: Case, res: dict[str, Any]) -> str:
    outcome = res["outcome"]
    if outcome in ("hang", "crash"):
        return outcome
    if res.get("rss_bytes", 0) > RSS_LIMIT_BYTES:
        return "over_memory"
    if outcome == "exception":
        return "other_exception"
    if outcome == "InputError":
        if not res.get("names"):
            return "message_without_name"
        return "rejected_valid" if case.expect == "valid" else "ok_rejected"
    return "silent_accept" if case.expect == "invalid" else "ok_loaded"


def run_fuzz(cases: list[Case], surface: str, workers: int = 1, timeout_s: float = CASE_TIMEOUT_S) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix=f"fuzz_{surface}_")
    pool = [_Worker(tmp, surface) for _ in range(max(1, workers))]
    todo = list(reversed(cases))
    results: list[tuple[Case, dict[str, Any], str]] = []
    t_start = time.monotonic()
    try:
        while todo or any(w.case is not None for w in pool):
            for w in pool:
                if w.case is None and todo:
                    w.submit(todo.pop(), timeout_s)
            busy = [w for w in pool if w.case is not None]
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], wait)
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
                case, w.case = w.case, None
                results.append((case, res, classify(case, res)))
                if res["outcome"] in ("hang", "crash"):
                    w.kill()
                    shutil.rmtree(Path(tmp) / f"case_{case.id}", ignore_errors=True)
                    pool[i] = _Worker(tmp, surface)
    finally:
        for w in pool:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
            w.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return summarise(results, time.monotonic() - t_start)


def summarise(results: list[tuple[Case, dict[str, Any], str]], wall_s: float) -> dict[str, Any]:
    per_family: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case, res, cls in results:
        per_family[case.family][cls] += 1
        if cls in BUG_CLASSES and len(examples[cls]) < 5:
            examples[cls].append({"family": case.family, "sub": case.sub, "id": case.id, "detail": res.get("detail")})
    totals = Counter(cls for _, _, cls in results)
    return {
        "cases": len(results),
        "bugs": sum(totals[b] for b in BUG_CLASSES),
        "totals": dict(sorted(totals.items())),
        "per_family": {f: dict(sorted(c.items())) for f, c in sorted(per_family.items())},
        "valid_cases": sum(1 for c, _, _ in results if c.expect == "valid"),
        "valid_loaded": sum(1 for c, _, cls in results if c.expect == "valid" and cls == "ok_loaded"),
        "max_case_wall_s": max((r.get("wall_s", 0.0) for _, r, _ in results), default=0.0),
        "max_rss_bytes": max((r.get("rss_bytes", 0) for _, r, _ in results), default=0),
        "hang_timeout_s": CASE_TIMEOUT_S,
        "rss_limit_bytes": RSS_LIMIT_BYTES,
        "bug_examples": dict(examples),
        "wall_s": round(wall_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surface", choices=sorted(GENERATORS), required=True)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--worker", metavar="TMP", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.surface)
        return 0
    cases = generate_cases(args.surface, args.cases, args.seed)
    summary = run_fuzz(cases, args.surface, args.workers)
    summary["config"] = {
        "surface": args.surface,
        "cases_requested": args.cases,
        "seed": args.seed,
        "command": f"python tests/fuzz_files.py --surface {args.surface} --cases {args.cases} --seed {args.seed}",
        "model_cap_bytes_in_workers": SMALL_CAP,
        "case": asdict(cases[0]) | {"files": "..."} if cases else None,
    }
    text = json.dumps(summary, indent=2, default=str)
    if args.out:
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
                    "bug_examples",
                )
            },
            indent=2,
            default=str,
        )
    )
    return 1 if summary["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
