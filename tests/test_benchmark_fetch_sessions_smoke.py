"""A short run of benchmarks/fetch_sessions.py: sessions send fewer partitions per Fetch than full fetches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_fetch_sessions_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "sessions.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/fetch_sessions.py", "--smoke", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = json.loads(out.read_text())
    (with_sessions,), (full,) = runs["sessions"], runs["full fetches"]
    assert with_sessions["incremental"] > 0 and full["incremental"] == 0  # the broker refused sessions there
    assert full["partitions_per_request"] > 45  # every Fetch names (nearly) every partition
    assert with_sessions["partitions_per_request"] < full["partitions_per_request"]
    assert with_sessions["cpu_per_s"] > 0 and full["records"] > 0
