"""A short run of benchmarks/scale.py: curves for two partition counts and layouts, the plots, and broker_min start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_scale_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/scale.py", "--smoke", "--json", str(out), "--plots", str(tmp_path / "img")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    points = data["points"]
    assert {(p["partitions"], p["layout"]) for p in points} == {(1, "one-topic"), (100, "one-topic"), (100, "100-topics")}
    assert all(p["seconds"] > 0 and p["cpu"] > 0 for p in points)
    assert {p["client"] for p in points} == {"kafkakit", "confluent"}
    startup = data["startup"]
    assert startup["partitions"] == 200 and startup["records"] > 0
    assert startup["clean_start_s"] > 0 and startup["recovery_start_s"] > 0 and startup["rss_after_recovery_mb"] > 0
    assert (tmp_path / "img" / "scale-throughput.png").stat().st_size > 1000
    assert (tmp_path / "img" / "scale-cpu.png").stat().st_size > 1000
