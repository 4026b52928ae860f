"""A short run of the end-to-end latency benchmark (benchmarks/e2e_latency.py): well-formed, nothing lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_latency_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "latency.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/e2e_latency.py", "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    points = json.loads(out.read_text())["points"]
    assert set(points) == {"broker_min/1000/kafkakit", "broker_min/1000/confluent"}
    for runs in points.values():
        (point,) = runs
        assert point["lost"] == 0
        assert 0 < point["p50"] <= point["p99"] <= point["p99.9"] <= point["max"]
        assert point["achieved_rate"] > 500  # paced at 1,000/s
    assert "| kafkakit |" in result.stdout and "| confluent |" in result.stdout
