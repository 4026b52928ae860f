"""A short run of benchmarks/group_scale.py: a group of two joins, a third member is taken in; both assignors, both clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_group_scale_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "groups.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/group_scale.py", "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    points = json.loads(out.read_text())
    assert {(p["client"], p["assignor"]) for p in points} == {
        (client, assignor)
        for client in ("kafkakit", "confluent")
        for assignor in ("range", "cooperative-sticky")
    }
    assert all(p["members"] == 2 and 0 < p["join_s"] < 60 and 0 < p["rebalance_s"] < 60 for p in points)
    assert "| broker_min | 2 | range |" in result.stdout and "x |" in result.stdout  # the table with ratios
