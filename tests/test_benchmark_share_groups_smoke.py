"""A short run of the share-group benchmark on broker_min: kafkakit and confluent-kafka share
consumers (1 and 2 members) and the classic reference row, every record consumed and acknowledged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_share_groups_benchmark_smoke_run() -> None:
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "ShareConsumer"):
        pytest.skip(f"confluent-kafka {ck.version()[0]} has no ShareConsumer")
    result = subprocess.run(
        [sys.executable, "benchmarks/share_groups.py", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| broker_min |")]
    cells = {(cols[1].strip(), int(cols[2])): [c.strip() for c in cols] for cols in rows}
    expected = [("kafkakit", 1), ("confluent", 1), ("kafkakit", 2), ("confluent", 2), ("kafkakit-classic", 1)]
    assert sorted(cells) == sorted(expected), result.stdout
    for cols in cells.values():
        # records/s, then: all consumed, all acked (the group's lag 0 afterwards).
        assert float(cols[3].replace(",", "")) > 0, cols
        assert float(cols[7].replace(",", "")) > 0, cols  # records/s after the first record
        assert cols[-2:] == ["yes", "yes"], cols
    assert "as fast as one kafkakit ShareConsumer" in result.stdout
