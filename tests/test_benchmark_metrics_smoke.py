"""A short run of benchmarks/metrics_overhead.py: every workload runs with metrics on and off."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_metrics_overhead_benchmark_smoke_run(tmp_path: Path) -> None:
    table = tmp_path / "table.md"
    result = subprocess.run(
        [sys.executable, "benchmarks/metrics_overhead.py", "--smoke", "--markdown", str(table)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {
        line.split("|")[1].strip(): line for line in table.read_text().splitlines() if line.startswith("| ")
    }
    for workload in ("produce", "getmany", "async-for"):
        cells = [c.strip() for c in rows[workload].split("|")[2:6]]
        on, off = float(cells[0].replace(",", "")), float(cells[1].replace(",", ""))
        ratio, cpu_ratio = float(cells[2]), float(cells[3])
        assert on > 0 and off > 0 and ratio > 0 and cpu_ratio > 0, rows[workload]
        assert re.search(
            rf"round 1 {workload}\s+on\s+[\d,]+/s\s+off\s+[\d,]+/s\s+ratio \d\.\d{{3}}\s+cpu ratio \d\.\d{{3}}",
            result.stdout,
        )
