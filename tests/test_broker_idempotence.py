"""broker_min's idempotent producer support over real sockets: InitProducerId, producer state in
Produce (duplicates, gaps, epochs, restarts) and FindCoordinator; then two third-party idempotent
producers end to end."""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.handlers import HANDLERS
from kafkakit.broker.producer_state import (
    PRODUCER_ID_BLOCK_SIZE,
    PRODUCER_IDS_FILE,
    ProducerIdAllocator,
    last_sequence,
)
from kafkakit.records import decode_batches, encode_batch, iter_batch_headers
from kio.schema.errors import ErrorCode

from tests.raw_protocol import RawClient, req, sub

MS = datetime.timedelta(milliseconds=1)
INT32_MAX = 2**31 - 1
TOPIC = "idem"


def batch(pid: int, epoch: int, seq: int, count: int = 3, tag: str = "v") -> bytes:
    records = [(None, f"{tag}-{seq}-{i}".encode(), 1_700_000_000_000 + i, ()) for i in range(count)]
    encoded: bytes = encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return encoded


async def produce(client: RawClient, records: bytes, version: int = 9, partition: int = 0) -> Any:
    pdata = sub(0, version, "PartitionProduceData", index=partition, records=records)
    tdata = sub(0, version, "TopicProduceData", name=TOPIC, partition_data=(pdata,))
    request = req(0, version, transactional_id=None, acks=-1, timeout=5000 * MS, topic_data=(tdata,))
    response = await client.call(request)
    return response.responses[0].partition_responses[0]


async def fetch_all(client: RawClient, partition: int = 0) -> bytes:
    part = sub(1, 11, "FetchPartition", partition=partition, current_leader_epoch=-1, fetch_offset=0,
               last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=50 * 1024 * 1024)  # fmt: skip
    topic = sub(1, 11, "FetchTopic", topic=TOPIC, partitions=(part,))
    request = req(1, 11, replica_id=-1, max_wait=0 * MS, min_bytes=1, max_bytes=50 * 1024 * 1024,
                  isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                  forgotten_topics_data=(), rack_id="")  # fmt: skip
    response = await client.call(request)
    data = response.responses[0].partitions[0]
    assert data.error_code == ErrorCode.none
    return bytes(data.records or b"")


def log_end(broker: Broker, partition: int = 0) -> int:
    log = broker.state.partition_log(TOPIC, partition)
    assert log is not None
    end: int = log.log_end_offset
    return end


async def init_producer_id(
    client: RawClient,
    version: int = 4,
    transactional_id: str | None = None,
    timeout_ms: int = -1,
    producer_id: int = -1,
    epoch: int = -1,
) -> Any:
    return await client.call(
        req(
            22,
            version,
            transactional_id=transactional_id,
            transaction_timeout=timeout_ms * MS,
            producer_id=producer_id,
            producer_epoch=epoch,
        )  # fmt: skip
    )


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path / "data") as running:
        running.state.create_topic(TOPIC, 2)
        yield running


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[RawClient]:
    raw = await RawClient.connect(broker)
    yield raw
    raw.close()


# -- producer state in Produce -------------------------------------------------------------


async def test_duplicate_batch_returns_original_offset_and_appends_nothing(
    broker: Broker, client: RawClient
) -> None:
    pid = (await init_producer_id(client)).producer_id
    first = await produce(client, batch(pid, 0, 0))
    second = await produce(client, batch(pid, 0, 3))
    assert (first.error_code, first.base_offset, second.base_offset) == (ErrorCode.none, 0, 3)
    end = log_end(broker)
    for retry, offset in ((batch(pid, 0, 3), 3), (batch(pid, 0, 0), 0)):
        answer = await produce(client, retry)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, offset)
    assert log_end(broker) == end == 6
    assert [r.value for r in decode_batches(await fetch_all(client), TOPIC, 0)] == [
        f"v-{seq}-{i}".encode() for seq in (0, 3) for i in range(3)
    ]


async def test_only_the_last_five_batches_are_recognised_as_duplicates(
    broker: Broker, client: RawClient
) -> None:
    pid = (await init_producer_id(client)).producer_id
    for n in range(6):
        assert (await produce(client, batch(pid, 0, 3 * n))).base_offset == 3 * n
    assert (await produce(client, batch(pid, 0, 3))).base_offset == 3  # 5th newest: duplicate
    too_old = await produce(client, batch(pid, 0, 0))
    assert too_old.error_code == ErrorCode.out_of_order_sequence_number
    assert log_end(broker) == 18


async def test_sequence_gap_is_rejected(broker: Broker, client: RawClient) -> None:
    pid = (await init_producer_id(client)).producer_id
    await produce(client, batch(pid, 0, 0))
    gap = await produce(client, batch(pid, 0, 4))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert "sequence 4 after 2" in gap.error_message
    assert log_end(broker) == 3
    assert (await produce(client, batch(pid, 0, 3))).error_code == ErrorCode.none


async def test_old_epoch_is_fenced_and_new_epoch_starts_at_zero(broker: Broker, client: RawClient) -> None:
    pid = (await init_producer_id(client)).producer_id
    await produce(client, batch(pid, 0, 0))
    bad_start = await produce(client, batch(pid, 1, 3))
    assert bad_start.error_code == ErrorCode.out_of_order_sequence_number
    assert (await produce(client, batch(pid, 1, 0))).base_offset == 3
    stale = await produce(client, batch(pid, 0, 3))
    assert stale.error_code == ErrorCode.invalid_producer_epoch
    # A duplicate of the old epoch's batch is no longer recognised either: the epoch moved on.
    assert (await produce(client, batch(pid, 0, 0))).error_code == ErrorCode.invalid_producer_epoch
    assert log_end(broker) == 6


async def test_unknown_producer_is_accepted_at_any_sequence_and_sequences_wrap(
    broker: Broker, client: RawClient
) -> None:
    # Kafka (KIP-360): a producer without state may have lost it to retention; no UNKNOWN_PRODUCER_ID.
    pid = (await init_producer_id(client)).producer_id
    near_max = INT32_MAX - 1
    assert (await produce(client, batch(pid, 0, near_max))).error_code == ErrorCode.none  # ends at 0
    assert (await produce(client, batch(pid, 0, 0))).error_code == ErrorCode.out_of_order_sequence_number
    assert (await produce(client, batch(pid, 0, 1))).base_offset == 3
    assert (await produce(client, batch(pid, 0, near_max))).base_offset == 0  # still a duplicate


async def test_producers_and_partitions_are_tracked_separately(broker: Broker, client: RawClient) -> None:
    a = (await init_producer_id(client)).producer_id
    b = (await init_producer_id(client)).producer_id
    assert a != b
    await produce(client, batch(a, 0, 0), partition=0)
    await produce(client, batch(b, 0, 0), partition=0)
    assert (await produce(client, batch(a, 0, 0), partition=1)).base_offset == 0  # new on partition 1
    assert (await produce(client, batch(b, 0, 0), partition=0)).base_offset == 3  # b's duplicate


async def test_idempotent_batch_after_a_plain_one_in_the_same_request_is_tracked(
    broker: Broker, client: RawClient
) -> None:
    pid = (await init_producer_id(client)).producer_id
    await produce(client, batch(pid, 0, 0))  # builds the partition's state
    mixed = batch(-1, -1, -1, tag="plain") + batch(pid, 0, 3)
    assert (await produce(client, mixed)).base_offset == 3
    assert (await produce(client, batch(pid, 0, 3))).base_offset == 6  # recognised as a duplicate
    assert log_end(broker) == 9


async def test_non_idempotent_batches_are_untouched(broker: Broker, client: RawClient) -> None:
    for n in range(3):
        assert (await produce(client, batch(-1, -1, -1))).base_offset == 3 * n
    log = broker.state.partition_log(TOPIC, 0)
    assert log is not None and broker.state.producer_states.loaded(log) is None


async def test_state_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(data) as first:
        first.state.create_topic(TOPIC, 1)
        client = await RawClient.connect(first)
        pid = (await init_producer_id(client)).producer_id
        await produce(client, batch(pid, 0, 0))
        await produce(client, batch(pid, 0, 3))
        client.close()
    async with Broker(data) as second:
        client = await RawClient.connect(second)
        retried = await produce(client, batch(pid, 0, 3))
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 3)
        assert log_end(second) == 6
        assert (await produce(client, batch(pid, 0, 7))).error_code == ErrorCode.out_of_order_sequence_number
        assert (await produce(client, batch(pid, 0, 6))).base_offset == 6
        client.close()


async def test_deleted_and_recreated_topic_starts_without_producer_state(
    broker: Broker, client: RawClient
) -> None:
    pid = (await init_producer_id(client)).producer_id
    await produce(client, batch(pid, 0, 0))
    broker.state.delete_topic(TOPIC)
    broker.state.create_topic(TOPIC, 2)
    again = await produce(client, batch(pid, 0, 0))
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)
    assert log_end(broker) == 3


async def test_log_append_time_duplicate_reports_the_original_append_time(
    broker: Broker, client: RawClient
) -> None:
    broker.state.create_topic("idem-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    pid = (await init_producer_id(client)).producer_id

    async def send() -> Any:
        pdata = sub(0, 9, "PartitionProduceData", index=0, records=batch(pid, 0, 0))
        tdata = sub(0, 9, "TopicProduceData", name="idem-lat", partition_data=(pdata,))
        request = req(0, 9, transactional_id=None, acks=1, timeout=5000 * MS, topic_data=(tdata,))
        return (await client.call(request)).responses[0].partition_responses[0]

    first = await send()
    await asyncio.sleep(0.01)
    retried = await send()
    assert first.log_append_time is not None
    assert (retried.base_offset, retried.log_append_time) == (0, first.log_append_time)


def test_last_sequence_wraps_after_int32_max() -> None:
    assert last_sequence(0, 4) == 4
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX, 1) == 0
    assert last_sequence(INT32_MAX - 1, 5) == 3


def test_corrupt_producer_id_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_IDS_FILE).write_text("next.block.start=banana\n")
    with pytest.raises(ValueError, match="is corrupt"):
        ProducerIdAllocator(tmp_path)


# -- InitProducerId --------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(5))
async def test_init_producer_id_every_version(client: RawClient, version: int) -> None:
    answers = [await init_producer_id(client, version) for _ in range(3)]
    assert [a.error_code for a in answers] == [ErrorCode.none] * 3
    assert [a.producer_epoch for a in answers] == [0, 0, 0]
    ids = [a.producer_id for a in answers]
    assert len(set(ids)) == 3 and min(ids) >= 0


async def test_producer_ids_are_distinct_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seen: list[int] = []
    for _ in range(3):
        async with Broker(data) as broker:
            client = await RawClient.connect(broker)
            seen += [(await init_producer_id(client)).producer_id for _ in range(2)]
            client.close()
    assert len(set(seen)) == len(seen) == 6
    assert seen == sorted(seen)
    assert (data / PRODUCER_IDS_FILE).read_text().strip() == f"next.block.start={3 * PRODUCER_ID_BLOCK_SIZE}"


async def test_epoch_bump_with_current_id_and_epoch(client: RawClient) -> None:
    pid = (await init_producer_id(client)).producer_id
    bumped = await init_producer_id(client, 3, producer_id=pid, epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, pid, 1)
    again = await init_producer_id(client, 4, producer_id=pid, epoch=1)
    assert (again.producer_id, again.producer_epoch) == (pid, 2)
    # A stale pair (or one this broker never handed out) gets a fresh id, as Kafka answers.
    stale = await init_producer_id(client, 4, producer_id=pid, epoch=0)
    assert stale.producer_id not in (pid, -1) and stale.producer_epoch == 0
    foreign = await init_producer_id(client, 4, producer_id=10**12, epoch=7)
    assert foreign.producer_id < 10**12 and foreign.producer_epoch == 0


# -- FindCoordinator -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(4))
async def test_find_coordinator_single_key(broker: Broker, client: RawClient, version: int) -> None:
    key_types = (0,) if version == 0 else (0, 1)
    for key_type in key_types:
        answer = await client.call(req(10, version, key="some-group", key_type=key_type))
        assert answer.error_code == ErrorCode.none
        assert (answer.node_id, answer.host, answer.port) == (broker.state.node_id, "127.0.0.1", broker.port)


async def test_find_coordinator_v4_answers_each_key(broker: Broker, client: RawClient) -> None:
    for key_type in (0, 1):
        answer = await client.call(req(10, 4, key_type=key_type, coordinator_keys=("a", "b", "c")))
        assert [c.key for c in answer.coordinators] == ["a", "b", "c"]
        assert {(c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators} == {
            (ErrorCode.none, broker.state.node_id, "127.0.0.1", broker.port)
        }


async def test_find_coordinator_unknown_key_type(client: RawClient) -> None:
    answer = await client.call(req(10, 3, key="g", key_type=2))
    assert answer.error_code == ErrorCode.invalid_request and answer.node_id == -1


def test_advertised_ranges() -> None:
    assert (HANDLERS[10].min_version, HANDLERS[10].max_version) == (0, 4)
    assert (HANDLERS[22].min_version, HANDLERS[22].max_version) == (0, 5)  # as Kafka 4.x


# -- third-party idempotent producers ---------------------------------------------------------

RECORD_COUNT = 1000


def _kafka_python_produce(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer  # type: ignore[attr-defined]

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=4096)
    try:
        assert producer.config["enable_idempotence"], "kafka-python's default should be idempotent"
        futures = [producer.send(topic, f"kp-{i}".encode(), partition=i % 2) for i in range(RECORD_COUNT)]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)


def _confluent_produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "batch.size": 4096}
    )
    for i in range(RECORD_COUNT):
        producer.produce(topic, f"ck-{i}".encode(), partition=i % 2,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)  # fmt: skip
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


@pytest.mark.parametrize(
    ("prefix", "produce_blocking"), [("kp", _kafka_python_produce), ("ck", _confluent_produce)]
)
async def test_third_party_idempotent_producer_delivers_exactly_once(
    broker: Broker, client: RawClient, prefix: str, produce_blocking: Any
) -> None:
    await asyncio.to_thread(produce_blocking, broker.bootstrap_servers, TOPIC)
    values: list[bytes] = []
    producer_ids: set[int] = set()
    for partition in (0, 1):
        raw = await fetch_all(client, partition)
        producer_ids |= {h.producer_id for _, h in iter_batch_headers(raw)}
        values += [r.value for r in decode_batches(raw, TOPIC, partition) if r.value is not None]
    assert sorted(values) == sorted(f"{prefix}-{i}".encode() for i in range(RECORD_COUNT))
    assert len(producer_ids) == 1 and min(producer_ids) >= 0, producer_ids


class ResponseDroppingProxy:
    """A TCP proxy in front of the broker that loses the responses of the first ``drops`` Produce
    requests: the broker appends them, then the proxy closes the client's connection instead of
    forwarding the answer, so the client must retry batches the log already holds."""

    def __init__(self, broker_port: int, drops: int) -> None:
        self._broker_port = broker_port
        self.drops_left = drops
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", self._broker_port)
        doomed: set[int] = set()  # correlation ids of Produce requests whose answer is lost
        tasks = [
            asyncio.create_task(self._upstream(client_reader, broker_writer, doomed)),
            asyncio.create_task(self._downstream(broker_reader, client_writer, doomed)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
            client_writer.close()
            broker_writer.close()

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, doomed: set[int]
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            api_key, _, correlation_id = struct.unpack_from(">hhi", frame, 4)
            if api_key == 0 and self.drops_left > 0 and not doomed:  # one loss per connection
                self.drops_left -= 1
                doomed.add(correlation_id)
            writer.write(frame)

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, doomed: set[int]
    ) -> None:
        while True:
            frame = await _read_frame(reader)
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id in doomed:
                self.dropped += 1
                return  # the caller closes both sides: the client sees the connection drop
            writer.write(frame)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = await reader.readexactly(4)
    return size + await reader.readexactly(struct.unpack(">i", size)[0])


@pytest.mark.parametrize(
    ("prefix", "produce_blocking"), [("kp", _kafka_python_produce), ("ck", _confluent_produce)]
)
async def test_third_party_retry_after_lost_response_is_deduplicated(
    broker: Broker, client: RawClient, prefix: str, produce_blocking: Any
) -> None:
    proxy = ResponseDroppingProxy(broker.port, drops=2)
    proxy_port = await proxy.start()
    broker.state.set_listener("127.0.0.1", proxy_port)  # Metadata sends the client back to the proxy
    try:
        await asyncio.to_thread(produce_blocking, f"127.0.0.1:{proxy_port}", TOPIC)
    finally:
        await proxy.stop()
    assert proxy.dropped == 2
    values: list[bytes] = []
    for partition in (0, 1):
        values += [
            r.value for r in decode_batches(await fetch_all(client, partition), TOPIC, partition) if r.value
        ]
    assert sorted(values) == sorted(f"{prefix}-{i}".encode() for i in range(RECORD_COUNT))
