"""A short run of the security benchmark: every client over PLAINTEXT and SASL_SSL, and connection set-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_security_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/security.py", "--smoke", "--records", "5000", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads(out.read_text())
    for role in ("produce", "consume"):
        for client in ("kafkakit", "confluent", "aiokafka"):
            for protocol in ("PLAINTEXT", "SASL_SSL"):
                assert results["rates"][f"broker_min/{role}/{client}/{protocol}"] > 0
            assert results["slowdown"][f"broker_min/{role}/{client}"] > 0
    assert all(seconds > 0 for seconds in results["connect"]["broker_min"].values())
    assert "TLS/plaintext" in result.stdout
