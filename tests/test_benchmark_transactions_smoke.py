"""A short run of the transactions benchmark: both clients, all three modes, on broker_min."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_transactions_benchmark_smoke_run() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/transactions.py", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for client in ("kafkakit", "confluent"):
        for mode in ("plain", "idempotent", "transactional"):
            assert f"produce broker_min/{client}/{mode} " in result.stdout, (
                f"{client}/{mode} missing:\n{result.stdout}"
            )
    for row in ("| kafkakit |", "| confluent-kafka |", "| kafkakit / confluent-kafka |"):
        assert row in result.stdout, f"table row {row!r} missing:\n{result.stdout}"
    assert "Command: `" in result.stdout
