"""KIP-227 fetch sessions with clients other than kafkakit's, and a Fetch that reaches the broker twice.

Apache Kafka's Java consumer and kafka-python (3.x) keep fetch sessions; librdkafka
(confluent-kafka) fetches without one. Each reads many partitions exactly once from
either broker kind, with partitions paused and resumed under a live session; the
session clients' own debug logs show incremental fetches and no session error.

The last test puts a proxy between a kafkakit consumer and broker_min that, once
armed, sends one incremental Fetch to the broker twice (a copy first, as a retried
request does): the consumer's own copy then carries a stale epoch, the broker answers
INVALID_FETCH_SESSION_EPOCH, and the consumer opens a new session without losing or
repeating a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import re
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import Broker
from kio.schema.errors import ErrorCode

from tests.brokers import ensure_kafka_jars, missing_kafka_tools
from tests.raw_protocol import RawClient, req, sub

JAVA_CONSUMER = Path(__file__).parent / "java" / "FetchSessionConsumer.java"
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.sessions.name = org.apache.kafka.clients.FetchSessionHandler
logger.sessions.level = DEBUG
"""
FETCH = 1
INVALID_FETCH_SESSION_EPOCH = 71


async def _fill(bootstrap: str, topics: dict[str, int], per_partition: int) -> list[TopicPartition]:
    """Create ``topics`` (name -> partitions) and write ``per_partition`` records to each partition."""
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, count, 1) for name, count in topics.items()])
    tps = [TopicPartition(name, p) for name, count in topics.items() for p in range(count)]
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(per_partition):
            for tp in tps:
                await producer.send(
                    tp.topic, b"%s-%d-%d" % (tp.topic.encode(), tp.partition, i), partition=tp.partition
                )
    return tps


def _exactly_once(offsets: dict[TopicPartition, list[int]], tps: list[TopicPartition], count: int) -> None:
    missing = [tp for tp in tps if sorted(offsets.get(tp, [])) != list(range(count))]
    assert not missing, {tp: sorted(offsets.get(tp, []))[:5] for tp in missing[:3]}


async def test_java_consumer_reads_through_fetch_sessions(broker: Any, topic: str, tmp_path: Path) -> None:
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    topics = {f"{topic}-a": 30, f"{topic}-b": 20}
    tps = await _fill(broker.bootstrap_servers, topics, 40)
    log4j = tmp_path / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    proc = await asyncio.create_subprocess_exec(
        "java", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{lib}/*", str(JAVA_CONSUMER),
        broker.bootstrap_servers, str(len(tps) * 40), *(f"{name}:{count}" for name, count in topics.items()),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out = (await asyncio.wait_for(proc.communicate(), 180))[0].decode()
    assert proc.returncode == 0, out[-3000:]
    parts = {}
    for line in out.splitlines():
        if line.startswith("PART "):
            _, name, partition, records, distinct, first, last = line.split()
            parts[TopicPartition(name, int(partition))] = (int(records), int(distinct), int(first), int(last))
    assert parts == dict.fromkeys(tps, (40, 40, 0, 39)), out[-3000:]  # every record once, in order
    incremental = re.findall(r"Built incremental fetch .* Added (\d+) partition\(s\), altered (\d+) partition\(s\), "
                             r"removed (\d+) partition\(s\)", out)  # fmt: skip
    assert len(incremental) >= 5, out[-3000:]
    # Pausing forgot partitions from the session and resuming added them back.
    assert any(int(removed) >= 20 for _, _, removed in incremental), incremental
    assert any(int(added) >= 20 for added, _, _ in incremental), incremental
    problems = [line for line in out.splitlines() if "unable to process" in line or "invalid" in line]
    assert not problems, problems


async def test_kafka_python_consumer_reads_through_fetch_sessions(
    broker: Any, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    tps = await _fill(broker.bootstrap_servers, {topic: 40}, 25)

    def consume() -> dict[TopicPartition, list[int]]:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                                 fetch_max_wait_ms=100, max_partition_fetch_bytes=300)  # fmt: skip
        try:
            assigned = [KpTopicPartition(tp.topic, tp.partition) for tp in tps]
            consumer.assign(assigned)
            consumer.seek_to_beginning(*assigned)
            seen: dict[TopicPartition, list[int]] = {}
            deadline = time.monotonic() + 60
            polls = 0
            while sum(map(len, seen.values())) < len(tps) * 25 and time.monotonic() < deadline:
                polls += 1
                if polls == 3:
                    consumer.pause(*assigned[:20])
                elif polls == 8:
                    consumer.resume(*assigned[:20])
                for ktp, records in consumer.poll(timeout_ms=200).items():
                    seen.setdefault(TopicPartition(ktp.topic, ktp.partition), []).extend(
                        r.offset for r in records
                    )
            for ktp, records in consumer.poll(timeout_ms=300).items():
                seen.setdefault(TopicPartition(ktp.topic, ktp.partition), []).extend(
                    r.offset for r in records
                )
            return seen
        finally:
            consumer.close()

    with caplog.at_level(logging.DEBUG, logger="kafka.consumer.fetcher"):
        seen = await asyncio.to_thread(consume)
    _exactly_once(seen, tps, 25)
    messages = [r.getMessage() for r in caplog.records if r.name == "kafka.consumer.fetcher"]
    assert sum("Built incremental fetch" in m for m in messages) >= 5
    assert not [m for m in messages if "unable to process" in m or "invalid" in m]


async def test_confluent_consumer_reads_many_partitions(broker: Any, topic: str) -> None:
    from confluent_kafka import Consumer as ConfluentConsumer
    from confluent_kafka import TopicPartition as CkTopicPartition

    tps = await _fill(broker.bootstrap_servers, {topic: 40}, 25)

    def consume() -> dict[TopicPartition, list[int]]:
        consumer = ConfluentConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic,
                                      "enable.auto.commit": False, "fetch.wait.max.ms": 100})  # fmt: skip
        try:
            consumer.assign([CkTopicPartition(tp.topic, tp.partition, 0) for tp in tps])
            seen: dict[TopicPartition, list[int]] = {}
            deadline = time.monotonic() + 60
            while sum(map(len, seen.values())) < len(tps) * 25 and time.monotonic() < deadline:
                for message in consumer.consume(500, 0.2):
                    assert message.error() is None, message.error()
                    seen.setdefault(TopicPartition(message.topic(), message.partition()), []).append(
                        message.offset()
                    )
            return seen
        finally:
            consumer.close()

    _exactly_once(await asyncio.to_thread(consume), tps, 25)


def _fetch_v12(topic: str, session_id: int, epoch: int, offsets: dict[int, int], max_wait_ms: int) -> Any:
    partitions = tuple(
        sub(
            1,
            12,
            "FetchPartition",
            partition=p,
            fetch_offset=o,
            partition_max_bytes=1 << 20,
            log_start_offset=-1,
        )
        for p, o in offsets.items()
    )
    return req(
        1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=(sub(1, 12, "FetchTopic", topic=topic, partitions=partitions),) if partitions else (),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


async def test_a_caught_up_session_wakes_for_an_append_to_any_of_its_partitions(
    broker: Any, topic: str
) -> None:
    """A long poll on an incremental Fetch that names no partition returns as soon as one of the
    session's quiet partitions gets a record, with only that partition (broker_min skips reading
    caught-up partitions whose offsets did not move: the append must still be seen)."""
    await _fill(broker.bootstrap_servers, {topic: 3}, 2)
    client = await RawClient.connect(broker)
    try:
        full = await client.call(_fetch_v12(topic, 0, 0, {0: 0, 1: 0, 2: 0}, 0))
        assert full.error_code == ErrorCode.none and full.session_id != 0
        sid = int(full.session_id)
        caught_up = await client.call(_fetch_v12(topic, sid, 1, {0: 2, 1: 2, 2: 2}, 100))
        assert caught_up.error_code == ErrorCode.none and list(caught_up.responses) == []

        async def append_later() -> None:
            await asyncio.sleep(0.5)
            async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
                await producer.send_and_wait(topic, b"late", partition=1)

        appending = asyncio.create_task(append_later())
        start = time.monotonic()
        client.timeout = 20.0
        woken = await client.call(_fetch_v12(topic, sid, 2, {}, 15_000))
        waited = time.monotonic() - start
        await appending
    finally:
        client.close()
    assert woken.error_code == ErrorCode.none
    answered = {(t.topic, int(p.partition_index)): p for t in woken.responses for p in t.partitions}
    assert list(answered) == [(topic, 1)] and answered[(topic, 1)].high_watermark == 3
    assert answered[(topic, 1)].records, "the new record"
    assert waited < 10, waited  # woken by the append, not by max_wait


class DuplicatingProxy:
    """Forwards Kafka connections to a broker; when armed, the next incremental Fetch is sent twice.

    The copy goes first, on a connection of its own, and its answer is dropped: the
    broker moves the session to the next epoch, so the client's own request then
    carries a stale epoch. ``fetch_errors`` lists the top-level error code of every
    Fetch response passed back to clients, ``fetches`` the (session id, epoch) of every
    Fetch request from them.
    """

    def __init__(self) -> None:
        self.target: tuple[str, int] = ("127.0.0.1", 0)
        self.armed = False
        self.duplicated = 0
        self.fetch_errors: list[int] = []
        self.fetches: list[tuple[int, int]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection(*self.target)
        versions: dict[int, int] = {}  # correlation id -> Fetch version of requests in flight
        up = asyncio.create_task(self._upstream(client_r, broker_w, versions))
        down = asyncio.create_task(self._downstream(broker_r, client_w, versions))
        self._tasks |= {up, down}
        with contextlib.suppress(Exception):
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        client_w.close()
        broker_w.close()

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, versions: dict[int, int]
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == FETCH:
                versions[correlation_id] = version
                session = _session(frame) if version >= 7 else (0, -1)
                self.fetches.append(session)
                if self.armed and session[1] > 0:
                    self.armed = False
                    await self._send_copy(frame)
            writer.write(frame)
            await writer.drain()

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, versions: dict[int, int]
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            version = versions.pop(correlation_id, None)
            if version is not None and version >= 7:
                # Response header v1 (Fetch v12+) has a tagged-field count; then throttle_time_ms, error_code.
                at = 8 + (1 if version >= 12 else 0) + 4
                self.fetch_errors.append(struct.unpack_from(">h", frame, at)[0])
            writer.write(frame)
            await writer.drain()

    async def _send_copy(self, frame: bytes) -> None:
        reader, writer = await asyncio.open_connection(*self.target)
        try:
            writer.write(frame)
            await _read_frame(reader)
            self.duplicated += 1
        finally:
            writer.close()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = await reader.readexactly(4)
    return size + await reader.readexactly(struct.unpack(">i", size)[0])


def _session(frame: bytes) -> tuple[int, int]:
    """(session id, session epoch) of a Fetch v7+ request frame (request header v1 or v2)."""
    version = struct.unpack_from(">h", frame, 6)[0]
    (client_id_len,) = struct.unpack_from(">h", frame, 12)
    at = 14 + max(client_id_len, 0)
    if version >= 12:
        at += 1  # the header's tagged fields: none
    # replica_id (up to v14; v15 moved it to a tagged field), max_wait_ms, min_bytes, max_bytes (v3+),
    # isolation_level (v4+), session_id, session_epoch
    replica_id = 4 if version < 15 else 0
    session_id, epoch = struct.unpack_from(">ii", frame, at + replica_id + 4 + 4 + 4 + 1)
    return int(session_id), int(epoch)


async def test_a_fetch_seen_twice_gets_invalid_epoch_and_the_consumer_recovers(tmp_path: Path) -> None:
    proxy = DuplicatingProxy()  # broker_min advertises the proxy: every connection goes through it
    port = await proxy.start()
    broker = Broker(tmp_path / "data", advertised_listeners=f"PLAINTEXT://127.0.0.1:{port}")
    await broker.start()
    consumer = Consumer(
        bootstrap_servers=f"127.0.0.1:{port}", auto_offset_reset="earliest", fetch_max_wait_ms=50
    )
    try:
        proxy.target = ("127.0.0.1", broker.port)
        tps = await _fill(broker.bootstrap_servers, {"dup-a": 20, "dup-b": 20}, 5)
        await consumer.start()
        consumer.assign(tps)
        seen: dict[TopicPartition, list[int]] = {}
        await _read(consumer, seen, len(tps) * 5)
        while consumer.fetch_session_stats()["incremental_requests"] < 2:
            assert await consumer.getmany(timeout_ms=100) == {}
        before = consumer.fetch_session_stats()
        proxy.armed = True
        async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            for tp in tps:
                await producer.send(tp.topic, b"late", partition=tp.partition)
        await _read(consumer, seen, len(tps) * 6)
        for _ in range(5):  # the new session goes on incrementally
            assert await consumer.getmany(timeout_ms=100) == {}
        after = consumer.fetch_session_stats()
        sessions_left = len(broker.state.fetch_sessions)
    finally:
        await consumer.stop()
        await broker.stop()
        await proxy.close()
    assert proxy.duplicated == 1
    assert INVALID_FETCH_SESSION_EPOCH in proxy.fetch_errors
    # The Fetch after the error names the old session with epoch 0: the broker closes it and
    # opens a new one, so only one session of this consumer is left in the cache.
    failed = proxy.fetch_errors.index(INVALID_FETCH_SESSION_EPOCH)
    old_id, _ = proxy.fetches[failed]
    assert proxy.fetches[failed + 1] == (old_id, 0), proxy.fetches[failed - 1 : failed + 3]
    assert sessions_left == 1
    _exactly_once(seen, tps, 6)
    assert after["session_resets"] > before["session_resets"], (before, after)
    assert after["full_requests"] > before["full_requests"], (before, after)
    assert after["incremental_requests"] >= before["incremental_requests"] + 3, (before, after)


async def _read(consumer: Consumer, seen: dict[TopicPartition, list[int]], want: int) -> None:
    got = sum(map(len, seen.values()))
    deadline = time.monotonic() + 30
    while got < want:
        assert time.monotonic() < deadline, f"read {got} of {want}"
        for tp, records in (await consumer.getmany(timeout_ms=500)).items():
            seen.setdefault(tp, []).extend(r.offset for r in records)
            got += len(records)
