"""A short run of ``benchmarks/spark_eos_steps.py`` (the exactly-once protocol's steps, kept vs fresh clients)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_eos_steps_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/spark_eos_steps.py", "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())["brokers"]["broker_min"]
    for kind in ("fresh", "kept"):
        assert set(figures[kind]) == {"task start", "task prepare", "driver commit"}
        assert figures[kind]["task start"] > 0 and figures[kind]["driver commit"] > 0
    assert "| broker_min | task start |" in result.stdout
    assert "Task was destroyed" not in result.stderr  # kept clients are closed at exit
