"""A short run of the metrics-overhead benchmark: broker_min with and without --metrics-port."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_broker_metrics_overhead_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/broker_metrics_overhead.py", "--smoke", "--scrape-interval", "0.2",
         "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads(out.read_text())
    for role in ("produce", "consume"):
        for mode in ("off", "on"):
            assert results["rates"][f"{role}/{mode}"] > 0
        assert results["ratio"][role] > 0
    # The instrumented broker counted every record it was sent.
    assert results["messages_in_on"] == results["args"]["records"]
    assert "on/off rate ratio" in result.stdout
    for role in ("produce", "consume"):
        assert results["cpu_ratio"][role] > 0  # nan fails too
    assert results["requests_on"]["Produce"] > 0
