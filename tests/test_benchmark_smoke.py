"""A short run of the throughput benchmark: every client produces and consumes through it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_throughput_benchmark_smoke_run() -> None:
    result = subprocess.run(
        [
            sys.executable, "benchmarks/throughput.py", "--smoke", "--codecs", "lz4", "--records", "5000",
            "--consumers", "kafkakit,aiokafka,kafka-python,confluent,kafkakit-iter,aiokafka-iter",
            "--size-spread", "60",  # values of 40-160 B: the varied-length paths of every client
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for role, clients in (("produce", ["kafkakit", "kafkakit-bulk", "aiokafka", "kafka-python", "confluent", "kafkakit-gather", "aiokafka-gather", "kafka-python-gather", "confluent-gather", "kafkakit-keyed", "confluent-keyed", "kafkakit-sticky", "confluent-sticky"]), ("consume", ["kafkakit", "aiokafka", "kafka-python", "confluent", "kafkakit-iter", "aiokafka-iter"])):
        for client in clients:
            assert f"{role:8s} broker_min/lz4/{client} " in result.stdout, f"{role} {client} missing:\n{result.stdout}"
    assert "| kafkakit-bulk |" in result.stdout
    for pair in (
        "kafkakit / confluent", "kafkakit-gather / aiokafka-gather", "kafkakit-keyed / confluent-keyed",
        "kafkakit-sticky / confluent-sticky",
    ):  # fmt: skip
        assert f"{pair} by round: " in result.stdout, pair
