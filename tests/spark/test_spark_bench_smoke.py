"""A short run of benchmarks/spark_read.py against broker_min: the benchmark's kafkakit path works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_spark_read_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/spark_read.py", "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads(out.read_text())
    reader = results["brokers"]["broker_min"]["readers"]["kafkakit"]
    assert reader["records_per_s"] > 0  # the benchmark itself checked the count and bytes read
    assert "kafkakit.spark" in result.stdout
