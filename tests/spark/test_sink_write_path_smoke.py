"""A short run of ``benchmarks/spark_sink.py --write-path`` (the sink's write path without Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_sink_write_path_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    command = [sys.executable, "benchmarks/spark_sink.py", "--write-path", "--brokers", "broker_min"]
    result = subprocess.run(
        [*command, "--records", "20000", "--runs", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())["brokers"]["broker_min"]
    # The benchmark itself checked that the broker holds every record it wrote.
    assert figures["records_per_s"] > 0 and figures["ns_per_record"] > 0
    assert figures["arrow_chunk_ns_per_record"] > 0 and figures["cpu_ns_per_record"] > 0
    assert "| broker_min |" in result.stdout
