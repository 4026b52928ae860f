"""stop() returns within its timeout while the cluster does not answer (issue 11: no call waits forever).

The broker runs as a child process and is frozen with SIGSTOP: its sockets stay
open and accept nothing, the worst case for a client (no error, no answer).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafkakit import Consumer, Producer
from kafkakit.errors import KafkaError

from tests.brokers import BrokerMinProcess


@pytest.fixture
def frozen_later(tmp_path: Path) -> Iterator[BrokerMinProcess]:
    broker = BrokerMinProcess(tmp_path / "data")
    broker.start()
    try:
        yield broker
    finally:
        if broker.pid is not None:
            os.kill(broker.pid, signal.SIGCONT)
        broker.stop()


def _freeze(broker: BrokerMinProcess) -> None:
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)


async def test_producer_stop_with_a_timeout_fails_undelivered_records_in_time(frozen_later: BrokerMinProcess) -> None:
    topic = f"frozen-{uuid.uuid4().hex[:8]}"
    producer = Producer(bootstrap_servers=frozen_later.bootstrap_servers, acks=1, request_timeout_ms=20000)
    await producer.start()
    await (await producer.send(topic, b"before"))  # connected, metadata known
    _freeze(frozen_later)
    pending = [await producer.send(topic, b"%d" % i) for i in range(10)]
    started = time.monotonic()
    await producer.stop(timeout=2.0)
    took = time.monotonic() - started
    assert took < 8.0, took  # 2 s for delivery, then connections close within their own bound
    for future in pending:
        with pytest.raises(KafkaError):
            await future


async def test_consumer_stop_returns_within_its_timeout(frozen_later: BrokerMinProcess) -> None:
    topic = f"frozen-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=frozen_later.bootstrap_servers) as producer:
        await (await producer.send(topic, b"x"))
    consumer = Consumer(
        topic, bootstrap_servers=frozen_later.bootstrap_servers, group_id=f"g-{topic}",
        auto_offset_reset="earliest", fetch_max_wait_ms=100,
    )  # fmt: skip
    await consumer.start()
    records: list[object] = []
    deadline = time.monotonic() + 30
    while not records and time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(batch)
    assert records, "the consumer read nothing before the freeze"
    _freeze(frozen_later)
    started = time.monotonic()
    await consumer.stop(timeout=2.0)  # the auto-commit and LeaveGroup get no answer
    took = time.monotonic() - started
    assert took < 8.0, took
