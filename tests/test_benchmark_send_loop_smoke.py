"""A short run of benchmarks/send_loop.py: every shape, both clients, a ratio for each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_send_loop_benchmark_smoke_run() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/send_loop.py", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and " us |" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| partition", "| sticky", "| keyed", "| unique-keys"]
    for row in rows:
        ours, theirs, ratio = row.strip(" |").split(" | ")[1:]
        assert float(ours.split()[0]) > 0 and float(theirs.split()[0]) > 0 and ratio.endswith("x")
