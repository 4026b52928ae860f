"""BrokerConnection.close() returns in bounded time even when the broker stopped reading.

A SIGSTOPped broker leaves a graceful close waiting for unsent bytes forever;
close() must give up after CLOSE_TIMEOUT_S and abort the socket, and a failed
connection must not wait at all.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from kafkakit.net.connection import CLOSE_TIMEOUT_S, BrokerConnection
from kafkakit.protocol import ApiKey
from kafkakit.records import encode_batch

from tests.brokers import BrokerMinProcess


async def test_close_to_a_paused_broker_returns_in_bounded_time(broker_min_process: BrokerMinProcess) -> None:
    host, port = broker_min_process.bootstrap_servers.split(":")
    conn = BrokerConnection(host, int(port), request_timeout_ms=60000)
    await conn.connect()
    pid = broker_min_process.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        batch = encode_batch([(None, os.urandom(1 << 20), 0, ())])
        for _ in range(40):  # ~40 MiB: far more than the socket buffers hold, so writes stay pending
            conn.send_frame(
                conn.request(ApiKey.PRODUCE, transactional_id=None, acks=0, timeout=1000,
                             topic_data=[{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]),
                expect_response=False,
            )  # fmt: skip
        started = time.monotonic()
        await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT_S + 5)
        assert time.monotonic() - started < CLOSE_TIMEOUT_S + 2
        assert not conn.connected
    finally:
        os.kill(pid, signal.SIGCONT)
