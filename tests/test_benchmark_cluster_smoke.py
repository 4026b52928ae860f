"""A short run of benchmarks/cluster.py against a 3-node broker_min cluster only: every figure is there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_cluster_benchmark_smoke_run(tmp_path: Path) -> None:
    raw = tmp_path / "cluster.json"
    result = subprocess.run(
        [
            sys.executable, "benchmarks/cluster.py", "--brokers", "broker_min", "--records", "2000",
            "--rounds", "1", "--warmup", "0", "--settle", "1", "--json", str(raw),
        ],  # fmt: skip
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "Command: `python3 benchmarks/cluster.py --brokers broker_min --records 2000" in out
    number = r"[\d,]+(?:\.\d+)?"
    for row in ("produce, await send() + flush()", "produce, gather futures every 10,000", "consume the 'send' topic"):
        assert re.search(rf"\| {re.escape(row)}[^|]* \| {number} \|", out), f"{row!r} has no rate:\n{out}"
    for row in ("a survivor's Metadata names a live leader", "an acks=all send to the partition is acknowledged"):
        assert re.search(rf"\| {re.escape(row)} \| {number} \({number}\) \|", out), f"{row!r} has no time:\n{out}"
    for row in ("idle after start", "after the throughput rounds"):
        assert re.search(rf"\| {row} \| {number} / {number} / {number} \|", out), f"{row!r} has no RSS:\n{out}"

    results = json.loads(raw.read_text())
    for workload in ("produce-send", "produce-gather", "consume"):
        (seconds,) = results["throughput"]["broker_min"][workload]
        assert seconds > 0
    (round_,) = results["failover"]["broker_min"]
    assert round_["victim"] != round_["controller"]  # a partition leader, not the active controller
    # Nothing is acknowledged before the controller fences the dead node (session timeout 5 s).
    assert 3.0 < round_["metadata_s"] < 30.0 and 3.0 < round_["produce_s"] < 30.0
    assert all(10 < rss < 1000 for rss, _ in results["memory"]["broker_min"]["idle"].values())
