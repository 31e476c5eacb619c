"""`mnemo-mpc bench sim`: the simulator timing benchmark writes its JSON through the shared bench command."""

from __future__ import annotations

import json

from mnemo_mpc.cli import main


def test_bench_sim_tiny(tmp_path, capsys):
    out = tmp_path / "bench_sim.json"
    assert main(["bench", "sim", "--worlds", "1", "--steps", "3", "--beams", "36", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["timing"]["lidar"]["median_ms"] > 0
    assert f"wrote {out}" in capsys.readouterr().out
