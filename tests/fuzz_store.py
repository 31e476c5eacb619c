"""Dataset-store corruption fuzz (issue 13): damage every file of a real 2-world store and read it back every way.

A store is collected once with the real collector (`mnemo_mpc.dataset.collect.collect`, 2 worlds, one worker
process). Then, for EVERY file of the store - each array's chunk (the sharded grid included) and `zarr.json`, each
world's group `zarr.json`, the root and `worlds/` group documents and `manifest.json` - the harness applies, each to a
fresh copy: delete, truncate (to a seeded length shorter than the file) and `flips` single-bit flips at seeded
offsets. Each damaged copy is read through every reader and compared value by value with the pristine store:

- `SQPStepDataset` item by item (`ds[i]`, every field of every step) and in batches (torch `DataLoader`, which
  goes through `__getitems__`: the concurrent read path);
- `warmstart.data.world_examples` for both worlds (the training-input builder; reads whole arrays);
- `dataset.stats.dataset_stats` (the summary `mnemo-mpc data stats` prints);
- `dataset.store.verify_store` (what `mnemo-mpc data verify` runs): must flag every corruption.

Per reader, each item (an example, a world's examples, the stats dict) is `same` (equal to pristine), `error`
(`DatasetError`), `other` (any other exception: a bug) or `wrong` (differs from pristine, no error: silent wrong data,
the bug this issue is about). A corruption every reader read as `same` is "benign" for the readers: only the root
and `worlds/` group documents can be (no reader opens them; the store's readers open world groups by path), and
`verify_store` still flags those. Expected: 0 wrong, 0 other, every corruption flagged.

`control=True` reads with `verify=False` (the store's own checks off, zarr's CRC still on): it shows the harness does
count silent wrong data - deleting a chunk then yields fill values.

`--special` (issue 26): special files and pathological JSON in place of the store's files - a FIFO, a /dev/zero
symlink, a directory, a sparse file far over the size caps, a symlink loop for any file; for the JSON documents also
nesting 100,000 and 70 deep, 5000-digit numbers, NaN / Infinity / 1e400, non-UTF-8, empty, a JSON list or null, and
valid documents with one leaf value replaced by such a value. Each case reads the store with `DatasetStore.open`,
every world, every item (`SQPStepDataset`), `dataset_stats` and `verify_store` under a per-case alarm
(`SPECIAL_TIMEOUT_S`: a FIFO used to hang them > 90 s) and with its peak memory measured; bugs: a hang, an exception
other than `DatasetError`, an item that differs from the pristine store without an error, a case `verify_store`
does not flag, a case over 1 GB.

    python tests/fuzz_store.py --out results/fuzz_store.json          # the full sweep (default 3 flips per file)
    python tests/fuzz_store.py --special --cases 2000 --time-limit-s 2 --out results/fuzz_store_special.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.dataset.loader import SQPStepDataset
from mnemo_mpc.dataset.stats import dataset_stats
from mnemo_mpc.dataset.store import ALL_STEP_FIELDS, DatasetStore, verify_store
from mnemo_mpc.errors import DatasetError

ITEM_FIELDS = tuple(ALL_STEP_FIELDS)  # every array of a world, as items
BATCH = 64


SPECIALS = ("fifo", "dev_zero", "dir", "sparse", "loop")
# Pathological JSON documents (issue 26); PATHOLOGICAL_VALUES replace one leaf of a valid document.
PATHOLOGICAL_DOCS = (
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a": ' * 70 + b"1" + b"}" * 70,
    b"9" * 5000,
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"\xff\xfe{}",
    b"",
    b"[]",
    b"null",
    b'{"zarr_format": 3, "node_type": "group", "attributes": ' + b"[" * 5000 + b"]" * 5000 + b"}",
)
PATHOLOGICAL_VALUES = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "9" * 5000,
    "[" * 3000 + "]" * 3000,
    "null",
    '"x"',
    "-1",
)


@dataclass(frozen=True)
class Corruption:
    path: str  # relative to the store root
    kind: str  # "delete" | "truncate" | "flip" | a SPECIALS entry | "json" | "json_value"
    offset: int = -1  # truncate: the new length; flip: the byte; json: PATHOLOGICAL_DOCS index; json_value: leaf
    bit: int = -1  # flip: the bit; json_value: PATHOLOGICAL_VALUES index

    def label(self) -> str:
        extra = {"delete": "", "truncate": f" to {self.offset} B", "flip": f" byte {self.offset} bit {self.bit}"}
        extra |= {k: "" for k in SPECIALS} | {"json": f" doc {self.offset}", "json_value": f" leaf {self.offset}"}
        if self.kind == "json_value":
            return f"{self.kind} {self.path} leaf {self.offset} = {PATHOLOGICAL_VALUES[self.bit][:12]}"
        return f"{self.kind} {self.path}{extra[self.kind]}"

    def apply(self, root: Path) -> None:
        p = root / self.path
        if self.kind in SPECIALS:
            p.unlink()
            if self.kind == "fifo":
                os.mkfifo(p)
            elif self.kind == "dev_zero":
                p.symlink_to("/dev/zero")
            elif self.kind == "dir":
                p.mkdir()
            elif self.kind == "sparse":
                with open(p, "wb") as fh:
                    fh.truncate(4 << 30)
            else:
                p.symlink_to(p.name)  # a link to itself: ELOOP
        elif self.kind == "json":
            p.write_bytes(PATHOLOGICAL_DOCS[self.offset])
        elif self.kind == "json_value":
            text = p.read_bytes().decode()
            leaves = list(_LEAF.finditer(text))
            m = leaves[self.offset % len(leaves)]
            p.write_text(text[: m.start(1)] + PATHOLOGICAL_VALUES[self.bit] + text[m.end(1) :])
        elif self.kind == "delete":
            p.unlink()
        elif self.kind == "truncate":
            os.truncate(p, self.offset)
        else:
            data = bytearray(p.read_bytes())
            data[self.offset] ^= 1 << self.bit
            p.write_bytes(bytes(data))


_LEAF = re.compile(r'(?<=[:\[,])\s*(-?\d[\d.eE+-]*|"(?:[^"\\]|\\.)*"|true|false|null)')


def _leaf_count(text: str) -> int:
    """How many scalar values (number, string, true/false/null after ':', '[' or ',') a JSON text has."""
    return max(1, sum(1 for _ in _LEAF.finditer(text)))


def special_cases(root: Path, n: int, seed: int = 0) -> list[Corruption]:
    """`n` seeded special-file and pathological-JSON cases over every file of the store (module docstring)."""
    rng = np.random.default_rng(seed)
    files = store_files(root)
    docs = [f for f in files if f.endswith(".json")]
    cases = []
    for _ in range(n):
        family = rng.choice(["special", "json", "json_value"], p=[0.3, 0.3, 0.4])
        if family == "special":
            cases.append(Corruption(str(rng.choice(files)), str(rng.choice(SPECIALS))))
        elif family == "json":
            cases.append(Corruption(str(rng.choice(docs)), "json", int(rng.integers(len(PATHOLOGICAL_DOCS)))))
        else:
            doc = str(rng.choice(docs))
            leaves = _leaf_count((root / doc).read_text())
            leaf, value = int(rng.integers(leaves)), int(rng.integers(len(PATHOLOGICAL_VALUES)))
            cases.append(Corruption(doc, "json_value", leaf, value))
    return cases


SPECIAL_TIMEOUT_S = 10.0


class _Alarm(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Alarm


def read_special(root: Path, pristine_items: list[dict[str, Any]]) -> dict[str, Any]:
    """One special/JSON case read every way (module docstring), under an alarm; counts and the first problem."""
    import signal

    out: dict[str, Any] = {"same": 0, "error": 0, "other": 0, "wrong": 0, "hang": False, "others": []}

    def note(exc: BaseException) -> None:
        if isinstance(exc, DatasetError):
            out["error"] += 1
        else:
            out["other"] += 1
            out["others"].append(f"{type(exc).__name__}: {str(exc)[:200]}")

    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, SPECIAL_TIMEOUT_S)
    try:
        try:
            store = DatasetStore.open(root)
            for w in store.world_ids:
                try:
                    store.open_world(w)
                except Exception as exc:  # noqa: BLE001 - every exception is classified
                    note(exc)
        except _Alarm:
            raise
        except Exception as exc:  # noqa: BLE001
            note(exc)
        try:
            ds = SQPStepDataset(root, split="all", only_converged=False, fields=ITEM_FIELDS)
            for i in range(len(pristine_items)):
                try:
                    same = i < len(ds) and _same(_item_np(ds[i]), pristine_items[i])
                    out["same" if same else "wrong"] += 1
                except _Alarm:
                    raise
                except Exception as exc:  # noqa: BLE001
                    note(exc)
        except _Alarm:
            raise
        except Exception as exc:  # noqa: BLE001
            note(exc)
        try:
            dataset_stats(root)
        except _Alarm:
            raise
        except Exception as exc:  # noqa: BLE001
            note(exc)
        try:
            report = verify_store(root)
            out["flagged"] = not report.ok
        except DatasetError:
            out["flagged"] = True
        except _Alarm:
            raise
        except Exception as exc:  # noqa: BLE001
            out["flagged"] = False
            note(exc)
    except _Alarm:
        out["hang"] = True
        out["flagged"] = False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return out


def run_special(pristine_root: Path, cases: list[Corruption], workdir: Path, progress: bool = False) -> dict[str, Any]:
    """Apply each special/JSON case to a fresh copy and `read_special` it; the summary and one line per bug."""
    import resource

    pristine = SQPStepDataset(pristine_root, split="all", only_converged=False, fields=ITEM_FIELDS)
    items = [_item_np(pristine[i]) for i in range(len(pristine))]
    t0 = time.perf_counter()
    counts: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    bugs: list[str] = []
    slowest = 0.0
    for k, case in enumerate(cases):
        copy = workdir / f"special{k}"
        shutil.copytree(pristine_root, copy, symlinks=True)
        t = time.perf_counter()
        try:
            case.apply(copy)
            r = read_special(copy, items)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        slowest = max(slowest, time.perf_counter() - t)
        kc = by_kind.setdefault(case.kind, Counter())
        kc["cases"] += 1
        problems = [
            name
            for name, bad in (
                ("hang", r["hang"]),
                ("other_exception", r["other"] > 0),
                ("silent_wrong", r["wrong"] > 0),
                ("not_flagged", not r["flagged"]),
            )
            if bad
        ]
        for p in problems:
            counts[p] += 1
            kc[p] += 1
        if problems and len(bugs) < 20:
            bugs.append(f"{case.label()}: {problems} {r['others'][:1]}")
        if progress and (k + 1) % 200 == 0:
            print(f"[{k + 1}/{len(cases)}] {dict(counts)}", file=sys.stderr)
    return {
        "cases": len(cases),
        "files": len({c.path for c in cases}),
        "bugs": int(sum(counts.values())),
        "bug_counts": dict(counts),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "items_per_store": len(items),
        "slowest_case_s": round(slowest, 3),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "timeout_s": SPECIAL_TIMEOUT_S,
        "bug_examples": bugs,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def build_store(root: Path, worlds: int = 2, time_limit_s: float | None = None) -> Path:
    """Collect `worlds` worlds with the real collector (a worker process, as `mnemo-mpc collect` does).
    `time_limit_s` cuts episodes short (fewer steps per world: a faster fuzz); None: the CLI's defaults."""
    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.sim.episode import EpisodeConfig

    cfg = CollectConfig() if time_limit_s is None else CollectConfig(episode=EpisodeConfig(time_limit_s=time_limit_s))
    collect(root, worlds, cfg, workers=1, progress=False)
    return root


def store_files(root: Path) -> list[str]:
    """Every file of the store a reader or `verify_store` depends on (not `.tmp/`, `.quarantine/`, caches)."""
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".tmp", ".quarantine", "cache"))
        for f in sorted(files):
            out.append((Path(dirpath) / f).relative_to(root).as_posix())
    return out


def corruptions(root: Path, flips: int = 3, seed: int = 0) -> list[Corruption]:
    """Delete, truncate and `flips` bit flips for every file; offsets drawn from a generator seeded per file."""
    cases = []
    for i, rel in enumerate(store_files(root)):
        size = (root / rel).stat().st_size
        rng = np.random.default_rng([seed, i])
        cases.append(Corruption(rel, "delete"))
        if size:
            cases.append(Corruption(rel, "truncate", int(rng.integers(0, size))))
            for _ in range(flips):
                cases.append(Corruption(rel, "flip", int(rng.integers(0, size)), int(rng.integers(0, 8))))
    return cases


def _world_examples_all(root: Path, verify: bool) -> dict[int, dict[str, np.ndarray]]:
    from mnemo_mpc.warmstart import data as wdata
    from mnemo_mpc.warmstart.inputs import InputSpec

    store = DatasetStore.open(root, verify=verify)
    robot, n, dt = wdata.store_robot(store)
    spec = InputSpec(N=n, dt=dt)
    return {w: wdata.world_examples(store, w, spec, robot) for w in store.world_ids}


def _stats_view(s: dict[str, Any]) -> dict[str, Any]:
    # disk_bytes follows the files (a truncated file is smaller) and root is the copy's path: not data figures.
    return {k: v for k, v in s.items() if k not in ("disk_bytes", "root")}


def pristine_values(root: Path) -> dict[str, Any]:
    ds = SQPStepDataset(root, split="all", only_converged=False, fields=ITEM_FIELDS)
    items = [_item_np(ds[i]) for i in range(len(ds))]
    return {
        "items": items,
        "examples": _world_examples_all(root, True),
        "stats": _stats_view(dataset_stats(root)),
    }


def _item_np(item: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in item.items()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))
    return bool(a == b)


def _classify(exc: BaseException) -> str:
    return "error" if isinstance(exc, DatasetError) else "other"


def read_everything(root: Path, pristine: dict[str, Any], verify: bool = True) -> dict[str, Any]:
    """Outcome counts per reader for one (damaged) store, plus the first non-DatasetError exception seen."""
    out: dict[str, Any] = {}
    others: list[str] = []
    n_items = len(pristine["items"])

    def note(exc: BaseException) -> None:
        if not isinstance(exc, DatasetError) and len(others) < 3:
            others.append("".join(traceback.format_exception_only(type(exc), exc)).strip()[:300])

    # SQPStepDataset, one item at a time.
    c: Counter[str] = Counter()
    try:
        ds = SQPStepDataset(root, split="all", only_converged=False, fields=ITEM_FIELDS, verify=verify)
        n = len(ds)
        for i in range(max(n, n_items)):
            if i >= n or i >= n_items:
                c["wrong"] += 1  # an item appeared or vanished without an error
                continue
            try:
                c["same" if _same(_item_np(ds[i]), pristine["items"][i]) else "wrong"] += 1
            except Exception as exc:
                c[_classify(exc)] += 1
                note(exc)
    except Exception as exc:
        c[_classify(exc)] += n_items
        note(exc)
    out["items"] = dict(c)

    # The DataLoader batch path (__getitems__: concurrent reads).
    import torch

    c = Counter()
    try:
        ds = SQPStepDataset(root, split="all", only_converged=False, fields=ITEM_FIELDS, verify=verify)
        if len(ds) != n_items:
            c["wrong"] += n_items
        else:
            loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=False, collate_fn=lambda b: b)
            it = iter(loader)
            for start in range(0, n_items, BATCH):
                expect = pristine["items"][start : start + BATCH]
                try:
                    batch = next(it)
                    c.update("same" if _same(_item_np(x), e) else "wrong" for x, e in zip(batch, expect, strict=True))
                except Exception as exc:
                    c[_classify(exc)] += len(expect)
                    note(exc)
    except Exception as exc:
        c[_classify(exc)] += n_items
        note(exc)
    out["batches"] = dict(c)

    # warmstart.data.world_examples, per world.
    c = Counter()
    for w, expect in pristine["examples"].items():
        try:
            from mnemo_mpc.warmstart import data as wdata
            from mnemo_mpc.warmstart.inputs import InputSpec

            store = DatasetStore.open(root, verify=verify)
            robot, n, dt = wdata.store_robot(store)
            got = wdata.world_examples(store, w, InputSpec(N=n, dt=dt), robot)
            c["same" if _same(got, expect) else "wrong"] += 1
        except Exception as exc:
            c[_classify(exc)] += 1
            note(exc)
    out["warmstart_worlds"] = dict(c)

    # dataset_stats.
    try:
        got = _stats_view(dataset_stats(root, verify=True)) if verify else _unverified_stats(root)
        out["stats"] = {"same" if _same(got, pristine["stats"]) else "wrong": 1}
    except Exception as exc:
        out["stats"] = {_classify(exc): 1}
        note(exc)

    # verify_store.
    try:
        report = verify_store(root)
        out["verify_flagged"] = not report.ok
        out["verify_problem"] = report.problems[0] if report.problems else None
    except DatasetError as exc:  # "not a store" (e.g. manifest deleted) is a refusal, i.e. flagged
        out["verify_flagged"] = True
        out["verify_problem"] = {"reason": str(exc)}
    except Exception as exc:
        out["verify_flagged"] = False
        out["verify_problem"] = {"reason": f"raised {type(exc).__name__}"}
        note(exc)
    out["others"] = others
    return out


def _unverified_stats(root: Path) -> dict[str, Any]:
    """What the old `data stats` computed: raw zarr reads of the summarised columns (the control run)."""
    import zarr

    from mnemo_mpc.dataset.store import WORLDS_DIR, world_name

    store = DatasetStore.open(root, verify=False)
    cols = {}
    for w in store.world_ids:
        g = zarr.open_group(root / WORLDS_DIR / world_name(w), mode="r")
        for k in ("expert_iterations", "mpc_iterations", "mpc_time_s", "expert_time_s"):
            cols[f"{w}/{k}"] = np.asarray(g[k][:])
    return cols


def run(
    pristine_root: Path,
    cases: list[Corruption],
    workdir: Path,
    verify: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """Apply each corruption to a fresh copy, read everything, and summarise (see the module docstring)."""
    pristine = pristine_values(pristine_root)
    if not verify:
        pristine["stats"] = _unverified_stats(pristine_root)
    results = []
    t0 = time.perf_counter()
    for k, case in enumerate(cases):
        copy = workdir / f"case{k}"
        shutil.copytree(pristine_root, copy)
        try:
            case.apply(copy)
            r = read_everything(copy, pristine, verify=verify)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        readers = ("items", "batches", "warmstart_worlds", "stats")
        r["wrong"] = sum(r[x].get("wrong", 0) for x in readers)
        r["other"] = sum(r[x].get("other", 0) for x in readers)
        r["benign"] = all(set(r[x]) <= {"same"} for x in readers)
        r["case"] = case.label()
        r["kind"] = case.kind
        r["file"] = case.path
        results.append(r)
        if progress:
            print(
                f"[{k + 1}/{len(cases)}] {case.label()}: wrong={r['wrong']} other={r['other']} "
                f"benign={r['benign']} flagged={r['verify_flagged']}",
                file=sys.stderr,
            )
    by_kind: dict[str, Counter[str]] = {}
    for r in results:
        kc = by_kind.setdefault(r["kind"], Counter())
        kc["cases"] += 1
        kc["silent_wrong_cases"] += r["wrong"] > 0
        kc["other_exception_cases"] += r["other"] > 0
        kc["benign_cases"] += r["benign"]
        kc["flagged_by_verify"] += r["verify_flagged"]
    summary = {
        "cases": len(results),
        "files": len({r["file"] for r in results}),
        "silent_wrong_items": int(sum(r["wrong"] for r in results)),
        "silent_wrong_cases": int(sum(r["wrong"] > 0 for r in results)),
        "non_dataset_error_exceptions": int(sum(r["other"] for r in results)),
        "benign_cases": int(sum(r["benign"] for r in results)),
        "benign_files": sorted({r["file"] for r in results if r["benign"]}),
        "flagged_by_verify": int(sum(r["verify_flagged"] for r in results)),
        "not_flagged_by_verify": [r["case"] for r in results if not r["verify_flagged"]],
        "items_per_store": len(pristine["items"]),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return {"summary": summary, "results": results}


def bench_reads(root: Path, repeats: int = 7, batch_size: int = 64) -> dict[str, Any]:
    """Read throughput (items/s) with the store's verification on and off, alternating within one run; medians.

    Two paths: `ds[i]` for every item (a fresh dataset each repeat, so world opens and the small arrays' first load
    count) and a shuffled torch `DataLoader` (batches through `__getitems__`). zarr checks the CRC32C of every chunk
    in both arms (it is part of the format); `crc32c_us_per_item` is that check's own cost, measured separately."""
    import google_crc32c
    import torch

    timings: dict[str, dict[str, list[float]]] = {m: {"items": [], "batches": []} for m in ("verified", "unverified")}
    n = 0
    for rep in range(repeats):
        order = ("verified", "unverified") if rep % 2 == 0 else ("unverified", "verified")
        for mode in order:
            verify = mode == "verified"
            t = time.perf_counter()
            ds = SQPStepDataset(root, split="all", only_converged=False, verify=verify)
            for i in range(len(ds)):
                ds[i]
            timings[mode]["items"].append(len(ds) / (time.perf_counter() - t))
            t = time.perf_counter()
            ds = SQPStepDataset(root, split="all", only_converged=False, verify=verify)
            gen = torch.Generator().manual_seed(rep)
            n = sum(
                b["grid"].shape[0] for b in torch.utils.data.DataLoader(ds, batch_size, shuffle=True, generator=gen)
            )
            timings[mode]["batches"].append(n / (time.perf_counter() - t))
    root = Path(root)
    chunk_bytes = [p.read_bytes() for p in root.rglob("*") if p.is_file() and "c" in p.relative_to(root).parts]
    t = time.perf_counter()
    for _ in range(20):
        for b in chunk_bytes:
            google_crc32c.value(b)
    crc_s = (time.perf_counter() - t) / 20
    med = {m: {k: round(float(np.median(v)), 1) for k, v in d.items()} for m, d in timings.items()}
    return {
        "items": n,
        "repeats": repeats,
        "batch_size": batch_size,
        "items_per_s_median": med,
        "verified_over_unverified": {
            k: round(med["verified"][k] / med["unverified"][k], 3) for k in ("items", "batches")
        },
        "items_per_s_all": {m: {k: [round(x, 1) for x in v] for k, v in d.items()} for m, d in timings.items()},
        "crc32c_us_per_item": round(crc_s / max(n, 1) * 1e6, 2),
    }


def bench_writes(root: Path, workdir: Path, repeats: int = 5) -> dict[str, Any]:
    """Write cost per world: `write_world` (CRC32C chunks, every chunk written, digests, seals, read-back check) vs
    the schema-1 write (zarr defaults: zstd without checksum, same chunking), same arrays, alternating; medians."""
    import zarr

    from mnemo_mpc.dataset.store import WorldRecord, write_world

    store = DatasetStore.open(root)
    records = []
    for w in store.world_ids:
        g = store.open_world(w)
        e = store.world_entry(w)
        steps = {name: g[name][:] for name in g.array_keys()}
        records.append(WorldRecord(w, e["seed"], e["kind"], e["status"], steps, dict(g.attrs["info"])))
    times: dict[str, list[float]] = {"schema2": [], "schema1_plain": []}
    for rep in range(repeats):
        for mode in ("schema2", "schema1_plain") if rep % 2 == 0 else ("schema1_plain", "schema2"):
            out = workdir / f"w{rep}-{mode}"
            t = time.perf_counter()
            for rec in records:
                if mode == "schema2":
                    write_world(out, WorldRecord(**{**rec.__dict__, "info": dict(rec.info)}))
                else:
                    grp = zarr.open_group(out / f"w{rec.world_id}", mode="w-", zarr_format=3)
                    for name, a in rec.steps.items():
                        if name == "grid":
                            grp.create_array(name, data=a, chunks=(1, *a.shape[1:]), shards=a.shape)
                        else:
                            grp.create_array(name, data=a, chunks=tuple(max(x, 1) for x in a.shape))
                    grp.attrs.update({"info": rec.info})
            times[mode].append((time.perf_counter() - t) / len(records) * 1e3)
            shutil.rmtree(out, ignore_errors=True)
    med = {k: round(float(np.median(v)), 2) for k, v in times.items()}
    steps = sum(store.world_entry(w)["steps"] for w in store.world_ids) / len(records)
    return {
        "ms_per_world_median": med,
        "ms_per_world_all": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "extra_ms_per_example": round((med["schema2"] - med["schema1_plain"]) / steps, 4),
        "steps_per_world": steps,
    }


def compact_result(r: dict[str, Any]) -> str:
    """One line per case for the JSON file: each reader's outcome counts and what `verify_store` reported."""
    p = r["verify_problem"] or {}
    where = "/".join(str(p[k]) for k in ("world_id", "array", "chunk") if p.get(k) is not None)
    reason = re.sub(r"\S*/case\d+/?:?\s*", "", str(p.get("reason", "")))
    readers = "; ".join(f"{x} {dict(sorted(r[x].items()))}" for x in ("items", "batches", "warmstart_worlds", "stats"))
    others = f"; other: {r['others']}" if r["others"] else ""
    flagged = "flagged" if r["verify_flagged"] else "NOT FLAGGED"
    return f"{r['case']} | {readers}{others} | verify {flagged}: {where} {reason}".strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/fuzz_store.json", help="JSON summary (and per-case results)")
    ap.add_argument("--store", default=None, help="use this pristine store instead of collecting one (not modified)")
    ap.add_argument("--flips", type=int, default=3, help="bit flips per file (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit-s", type=float, default=None, help="episode limit for the collected store")
    ap.add_argument("--control", action="store_true", help="read with verify=False (shows what is caught)")
    ap.add_argument("--bench", action="store_true", help="measure read throughput with/without verification instead")
    ap.add_argument("--worlds", type=int, default=2, help="worlds to collect (default 2)")
    ap.add_argument("--special", action="store_true", help="special files and pathological JSON instead (issue 26)")
    ap.add_argument("--cases", type=int, default=2000, help="--special: cases (default 2000)")
    args = ap.parse_args(argv)
    if args.bench:
        return _bench_main(args, argv)
    if args.special:
        return _special_main(args, argv)
    with tempfile.TemporaryDirectory(prefix="fuzz_store-") as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        root = Path(args.store) if args.store else build_store(tmp_path / "store", args.worlds, args.time_limit_s)
        collect_s = time.perf_counter() - t0
        cases = corruptions(root, args.flips, args.seed)
        report = run(root, cases, tmp_path, verify=not args.control, progress=True)
    report["results"] = [compact_result(r) for r in report["results"]]
    report["config"] = {
        "command": "python tests/fuzz_store.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "flips_per_file": args.flips,
        "seed": args.seed,
        "time_limit_s": args.time_limit_s,
        "verify": not args.control,
        "collect_s": round(collect_s, 1),
        "python": platform.python_version(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from mnemo_mpc.atomic import atomic_write_json

    atomic_write_json(out, report)
    print(json.dumps(report["summary"], indent=2))
    s = report["summary"]
    bad = s["silent_wrong_items"] or s["non_dataset_error_exceptions"] or s["not_flagged_by_verify"]
    return 1 if bad and not args.control else 0


def _special_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    from mnemo_mpc.atomic import atomic_write_json

    with tempfile.TemporaryDirectory(prefix="fuzz_store_special-") as tmp:
        root = Path(args.store) if args.store else build_store(Path(tmp) / "store", args.worlds, args.time_limit_s)
        report = run_special(root, special_cases(root, args.cases, args.seed), Path(tmp), progress=True)
    report["config"] = {
        "command": "python tests/fuzz_store.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seed": args.seed,
        "time_limit_s": args.time_limit_s,
        "python": platform.python_version(),
    }
    atomic_write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 1 if report["bugs"] else 0


def _bench_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.sim.episode import EpisodeConfig

    with tempfile.TemporaryDirectory(prefix="bench_store-") as tmp:
        if args.store:
            root, collected = Path(args.store), None
        else:
            root = Path(tmp) / "store"
            ep = EpisodeConfig() if args.time_limit_s is None else EpisodeConfig(time_limit_s=args.time_limit_s)
            summary = collect(root, args.worlds, CollectConfig(episode=ep), workers=1, progress=False)
            collected = {k: summary[k] for k in ("worlds_collected_now", "examples_now", "wall_s", "examples_per_s")}
        if collected is not None:
            from mnemo_mpc.dataset.stats import world_throughput

            collected.update(world_throughput(DatasetStore.open(root)))
        report = {"reads": bench_reads(root), "writes": bench_writes(root, Path(tmp)), "collect": collected}
    report["config"] = {
        "command": "python tests/fuzz_store.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "worlds": args.worlds,
        "time_limit_s": args.time_limit_s,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    atomic_write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
