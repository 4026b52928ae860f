"""broker_min over real sockets with raw frames: framing, ordering, long poll, and each API's details."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.handlers import HANDLERS
from kafkakit.broker.handlers.base import ApiHandler, make, nested
from kafkakit.protocol import decode_response, encode_request, request_class
from kafkakit.records.encoder import encode_batch
from kio.schema.errors import ErrorCode

MS = datetime.timedelta(milliseconds=1)


class RawClient:
    """One TCP connection speaking raw Kafka frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._next_id = 0

    @classmethod
    async def connect(cls, broker: Broker) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        return cls(reader, writer)

    def send(self, payload: Any, correlation_id: int | None = None) -> int:
        if correlation_id is None:
            self._next_id += 1
            correlation_id = self._next_id
        self.writer.write(encode_request(correlation_id, "raw-test", payload))
        return correlation_id

    async def read_frame(self, timeout: float = 5.0) -> bytes:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))
        body: bytes = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        return body

    async def receive(self, payload: Any, timeout: float = 5.0) -> tuple[int, Any]:
        body = await self.read_frame(timeout)
        correlation_id, response = decode_response(payload.__api_key__, payload.__version__, body)
        return correlation_id, response

    async def call(self, payload: Any, timeout: float = 5.0) -> Any:
        correlation_id = self.send(payload)
        got_id, response = await self.receive(payload, timeout)
        assert got_id == correlation_id
        return response

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        data = await asyncio.wait_for(self.reader.read(1), timeout)
        return data == b""

    def close(self) -> None:
        self.writer.close()


def req(api_key: int, version: int, **fields: Any) -> Any:
    return make(request_class(api_key, version), **fields)


def sub(api_key: int, version: int, entity: str, **fields: Any) -> Any:
    return make(nested(request_class(api_key, version), entity), **fields)


def metadata_req(version: int, topics: list[str] | None, allow_create: bool = True) -> Any:
    entries = (
        None
        if topics is None
        else tuple(sub(3, version, "MetadataRequestTopic", name=t, topic_id=None) for t in topics)
    )
    return req(
        3,
        version,
        topics=entries,
        allow_auto_topic_creation=allow_create,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def create_req(
    version: int,
    name: str,
    partitions: int = 1,
    rf: int = -1,
    configs: dict[str, str] | None = None,
    validate_only: bool = False,
) -> Any:
    cfgs = tuple(
        sub(19, version, "CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items()
    )
    topic = sub(
        19,
        version,
        "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=(),
        configs=cfgs,
    )
    return req(19, version, topics=(topic,), timeout=1000 * MS, validate_only=validate_only)


def produce_req(version: int, topic: str, partition: int, records: bytes | None, acks: int = -1) -> Any:
    pdata = sub(0, version, "PartitionProduceData", index=partition, records=records)
    tdata = sub(0, version, "TopicProduceData", name=topic, partition_data=(pdata,))
    return req(0, version, transactional_id=None, acks=acks, timeout=5000 * MS, topic_data=(tdata,))


def fetch_req(
    version: int,
    parts: list[tuple[str, int, int]],
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    isolation_level: int = 0,
) -> Any:
    topics: dict[str, list[Any]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(
            sub(
                1,
                version,
                "FetchPartition",
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=partition_max_bytes,
                log_start_offset=-1,
            )
        )
    return req(
        1,
        version,
        replica_id=-1,
        max_wait=max_wait_ms * MS,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=tuple(
            sub(1, version, "FetchTopic", topic=t, partitions=tuple(ps)) for t, ps in topics.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_req(version: int, topic: str, timestamp: int, isolation_level: int = 0) -> Any:
    part = sub(
        2, version, "ListOffsetsPartition", partition_index=0, timestamp=timestamp, current_leader_epoch=-1
    )
    return req(
        2,
        version,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(sub(2, version, "ListOffsetsTopic", name=topic, partitions=(part,)),),
    )


def batch(n: int, value_size: int = 10, ts: int | None = None, key: bytes | None = b"k") -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    data: bytes = encode_batch(
        [(key, bytes([65 + i % 26]) * value_size, now + i, [("h", b"v")]) for i in range(n)]
    )
    return data


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path / "data") as b:
        yield b


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[RawClient]:
    c = await RawClient.connect(broker)
    yield c
    c.close()


async def create_topic(
    client: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    resp = await client.call(create_req(7, name, partitions, configs=configs))
    assert resp.topics[0].error_code == ErrorCode.none, resp


# -- ApiVersions ---------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_api_versions_lists_implemented_apis(client: RawClient, version: int) -> None:
    resp = await client.call(req(18, version, client_software_name="t", client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert resp.error_code == ErrorCode.none
    assert ranges[0] == (0, 12) and ranges[1] == (4, 12) and ranges[3] == (0, 12) and ranges[18] == (0, 4)
    assert ranges[2] == (1, 7) and ranges[19] == (2, 7) and ranges[20] == (1, 6)


async def test_api_versions_unknown_version_gets_v0_fallback(client: RawClient) -> None:
    # Version 99: header v2-style client software fields are not even parsed.
    frame = struct.pack(">hhih", 18, 99, 42, 1) + b"x" + b"\x00\x02a\x021\x00"
    client.writer.write(struct.pack(">i", len(frame)) + frame)
    body = await client.read_frame()
    correlation_id, resp = decode_response(18, 0, body)
    assert correlation_id == 42
    assert resp.error_code == ErrorCode.unsupported_version
    assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys}


# -- Metadata ------------------------------------------------------------------


async def test_metadata_auto_creates_and_lists(client: RawClient, broker: Broker) -> None:
    resp = await client.call(metadata_req(12, ["auto-a"]))
    (topic,) = resp.topics
    assert topic.error_code == ErrorCode.none and topic.name == "auto-a"
    assert topic.topic_id != uuid.UUID(int=0)
    (p,) = topic.partitions
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (1, 0, (1,), (1,))
    assert resp.cluster_id == broker.state.cluster_id and resp.controller_id == 1
    assert (resp.brokers[0].host, resp.brokers[0].port) == ("127.0.0.1", broker.port)

    # v0: an empty list means all topics; v1+: null means all, empty means none.
    assert [t.name for t in (await client.call(metadata_req(0, []))).topics] == ["auto-a"]
    assert [t.name for t in (await client.call(metadata_req(1, None))).topics] == ["auto-a"]
    assert (await client.call(metadata_req(1, []))).topics == ()


async def test_metadata_respects_allow_auto_topic_creation_and_bad_names(client: RawClient) -> None:
    resp = await client.call(metadata_req(4, ["not-created"], allow_create=False))
    assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    resp = await client.call(metadata_req(9, ["bad name!"]))
    assert resp.topics[0].error_code == ErrorCode.invalid_topic_exception
    assert (await client.call(metadata_req(1, None))).topics == ()


async def test_metadata_by_topic_id(client: RawClient) -> None:
    await create_topic(client, "by-id", 3)
    listed = await client.call(metadata_req(12, None))
    topic_id = listed.topics[0].topic_id
    request = req(
        3,
        12,
        topics=(sub(3, 12, "MetadataRequestTopic", name=None, topic_id=topic_id),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    resp = await client.call(request)
    assert resp.topics[0].name == "by-id" and len(resp.topics[0].partitions) == 3


# -- CreateTopics / DeleteTopics ---------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
async def test_create_topics_every_version(client: RawClient, version: int) -> None:
    resp = await client.call(create_req(version, f"v{version}", 2))
    assert resp.topics[0].error_code == ErrorCode.none
    resp = await client.call(create_req(version, f"v{version}", 2))
    assert resp.topics[0].error_code == ErrorCode.topic_already_exists
    names = [t.name for t in (await client.call(metadata_req(1, None))).topics]
    assert names == [f"v{version}"]


async def test_create_topics_errors(client: RawClient) -> None:
    cases = [
        (create_req(7, "ok", 2, configs={"retention.ms": "1000"}), ErrorCode.none),
        (create_req(7, "ok", 2), ErrorCode.topic_already_exists),
        (create_req(2, "zero", 0), ErrorCode.invalid_partitions),
        (create_req(4, "rf3", 1, rf=3), ErrorCode.invalid_replication_factor),
        (create_req(5, "bad/name"), ErrorCode.invalid_topic_exception),
        (create_req(7, "badcfg", configs={"retention.ms": "soon"}), ErrorCode.invalid_config),
        (create_req(7, "dry", validate_only=True), ErrorCode.none),
    ]
    for request, code in cases:
        resp = await client.call(request)
        assert resp.topics[0].error_code == code, (request, resp)
    created = await client.call(create_req(7, "defaults", -1))
    result = created.topics[0]
    assert result.num_partitions == 1 and result.replication_factor == 1
    names = [t.name for t in (await client.call(metadata_req(1, None))).topics]
    assert sorted(names) == ["defaults", "ok"]  # validate_only created nothing


async def test_delete_topics_by_name_and_id(client: RawClient) -> None:
    await create_topic(client, "del-a")
    await create_topic(client, "del-b")
    resp = await client.call(req(20, 1, topic_names=("del-a", "missing"), timeout=1000 * MS))
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    topic_id = (await client.call(metadata_req(10, ["del-b"]))).topics[0].topic_id
    state = sub(20, 6, "DeleteTopicState", name=None, topic_id=topic_id)
    gone = sub(20, 6, "DeleteTopicState", name=None, topic_id=uuid.uuid4())
    resp = await client.call(req(20, 6, topics=(state, gone), timeout=1000 * MS))
    assert [(r.name, r.error_code) for r in resp.responses] == [
        ("del-b", ErrorCode.none),
        (None, ErrorCode.unknown_topic_id),
    ]
    assert (await client.call(metadata_req(1, None))).topics == ()


# -- Produce / Fetch -----------------------------------------------------------


@pytest.mark.parametrize("fetch_version", [4, 5, 7, 10, 11, 12])
async def test_produce_then_fetch_every_version(client: RawClient, fetch_version: int) -> None:
    await create_topic(client, "pf", 2)
    data = batch(5)
    resp = await client.call(produce_req(9, "pf", 0, data))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset, part.log_start_offset) == (ErrorCode.none, 0, 0)
    resp = await client.call(produce_req(3, "pf", 0, batch(3)))
    assert resp.responses[0].partition_responses[0].base_offset == 5

    resp = await client.call(fetch_req(fetch_version, [("pf", 0, 0), ("pf", 1, 0)]))
    p0, p1 = resp.responses[0].partitions
    assert p0.error_code == ErrorCode.none and p0.high_watermark == 8 and p0.last_stable_offset == 8
    assert p0.records[16 : len(data)] == data[16:]  # all but base offset, length and leader epoch as produced
    assert p0.aborted_transactions is None
    assert p1.records == b"" and p1.high_watermark == 0  # empty partition: empty bytes, never null
    if fetch_version >= 7:
        assert resp.session_id == 0 and resp.error_code == ErrorCode.none


async def test_fetch_read_committed_has_empty_aborted_list(client: RawClient) -> None:
    await create_topic(client, "rc")
    await client.call(produce_req(9, "rc", 0, batch(1)))
    for version in (4, 12):
        resp = await client.call(fetch_req(version, [("rc", 0, 0)], isolation_level=1))
        assert resp.responses[0].partitions[0].aborted_transactions == ()


async def test_fetch_errors(client: RawClient) -> None:
    await create_topic(client, "fe")
    await client.call(produce_req(9, "fe", 0, batch(2)))
    resp = await client.call(fetch_req(11, [("fe", 0, 3), ("nope", 0, 0)]))
    oor = resp.responses[0].partitions[0]
    unknown = resp.responses[1].partitions[0]
    assert (oor.error_code, oor.high_watermark, oor.records) == (ErrorCode.offset_out_of_range, 2, b"")
    assert (unknown.error_code, unknown.records) == (ErrorCode.unknown_topic_or_partition, b"")


async def test_fetch_kip74_first_batch_even_if_too_big(client: RawClient) -> None:
    await create_topic(client, "big", 2)
    big = batch(1, value_size=60_000)  # above the sendfile threshold: served zero-copy
    await client.call(produce_req(9, "big", 0, big))
    await client.call(produce_req(9, "big", 0, batch(1, value_size=60_000)))
    await client.call(produce_req(9, "big", 1, batch(1)))
    for version in (4, 12):
        resp = await client.call(
            fetch_req(version, [("big", 0, 0), ("big", 1, 0)], max_bytes=1000, partition_max_bytes=1000)
        )
        p0, p1 = resp.responses[0].partitions
        assert len(p0.records) == len(big) and p0.records[16:] == big[16:]
        assert p1.records == b""  # the response is already over max_bytes
        # partition_max_bytes caps the second partition's share too.
        resp = await client.call(fetch_req(version, [("big", 0, 0)], partition_max_bytes=len(big) + 10))
        assert len(resp.responses[0].partitions[0].records) == len(big)


async def test_fetch_from_middle_of_batch_returns_whole_batch(client: RawClient) -> None:
    await create_topic(client, "mid")
    data = batch(10)
    await client.call(produce_req(9, "mid", 0, data))
    resp = await client.call(fetch_req(12, [("mid", 0, 7)]))
    assert resp.responses[0].partitions[0].records[16:] == data[16:]


async def test_long_poll_wakes_on_append(client: RawClient, broker: Broker) -> None:
    await create_topic(client, "lp")
    start = time.monotonic()
    correlation_id = client.send(fetch_req(12, [("lp", 0, 0)], max_wait_ms=10_000))
    await asyncio.sleep(0.2)
    producer = await RawClient.connect(broker)
    await producer.call(produce_req(9, "lp", 0, batch(1)))
    got_id, resp = await client.receive(fetch_req(12, []))
    assert got_id == correlation_id
    assert resp.responses[0].partitions[0].records != b""
    assert time.monotonic() - start < 3
    producer.close()


async def test_long_poll_times_out_with_empty_records(client: RawClient) -> None:
    await create_topic(client, "lpt")
    start = time.monotonic()
    resp = await client.call(fetch_req(11, [("lpt", 0, 0)], max_wait_ms=300))
    elapsed = time.monotonic() - start
    assert 0.25 < elapsed < 2
    assert resp.responses[0].partitions[0].records == b""


async def test_pipelined_responses_come_in_request_order(client: RawClient, broker: Broker) -> None:
    await create_topic(client, "pipe")
    slow = fetch_req(12, [("pipe", 0, 0)], max_wait_ms=400)
    fast = metadata_req(12, None)
    ids = [client.send(slow), client.send(fast), client.send(slow), client.send(fast)]
    # Meanwhile another connection is not held up by the long polls.
    other = await RawClient.connect(broker)
    start = time.monotonic()
    await other.call(metadata_req(12, None))
    assert time.monotonic() - start < 0.3
    other.close()
    received = []
    for payload in (slow, fast, slow, fast):
        got_id, _ = await client.receive(payload)
        received.append(got_id)
    assert received == ids


async def test_acks0_gets_no_response_and_does_not_stall(client: RawClient, broker: Broker) -> None:
    await create_topic(client, "acks0")
    client.send(produce_req(9, "acks0", 0, batch(2), acks=0))
    client.send(produce_req(9, "acks0", 0, batch(2), acks=0))
    resp = await client.call(list_offsets_req(7, "acks0", -1))
    assert resp.topics[0].partitions[0].offset == 4


async def test_acks0_failure_closes_connection(client: RawClient, caplog: pytest.LogCaptureFixture) -> None:
    client.send(produce_req(9, "no-such-topic", 0, batch(1), acks=0))
    assert await client.closed_by_peer()
    assert "acks=0 produce failed" in caplog.text


async def test_produce_errors(client: RawClient) -> None:
    await create_topic(client, "perr", configs={"max.message.bytes": "200"})
    corrupt = bytearray(batch(1))
    corrupt[-1] ^= 0xFF
    cases = [
        (produce_req(9, "missing", 0, batch(1)), ErrorCode.unknown_topic_or_partition),
        (produce_req(9, "perr", 5, batch(1)), ErrorCode.unknown_topic_or_partition),
        (produce_req(9, "perr", 0, bytes(corrupt)), ErrorCode.corrupt_message),
        (produce_req(9, "perr", 0, batch(1, value_size=500)), ErrorCode.message_too_large),
        (produce_req(9, "perr", 0, batch(1), acks=2), ErrorCode.invalid_required_acks),
    ]
    for request, code in cases:
        resp = await client.call(request)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == code, (code, part)
        assert part.base_offset == -1


async def test_produce_v2_is_refused_with_unsupported_version(client: RawClient) -> None:
    await create_topic(client, "old")
    records = batch(1)
    body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 3) + b"old"
    body += struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records
    header = struct.pack(">hhih", 0, 2, 77, 1) + b"x"
    client.writer.write(struct.pack(">i", len(header) + len(body)) + header + body)
    frame = await client.read_frame()
    correlation_id, count, name_len = struct.unpack_from(">iih", frame)
    assert (correlation_id, count, frame[10:13]) == (77, 1, b"old")
    n, index, error, base_offset, append_time, throttle = struct.unpack_from(">iihqqi", frame, 13)
    assert (n, index, error, base_offset, append_time, throttle) == (1, 0, 35, -1, -1, 0)
    assert len(frame) == 13 + struct.calcsize(">iihqqi")


# -- ListOffsets ----------------------------------------------------------------


async def test_list_offsets(client: RawClient) -> None:
    await create_topic(client, "lo")
    await client.call(produce_req(9, "lo", 0, batch(3, ts=1000)))  # offsets 0-2, ts 1000-1002
    await client.call(produce_req(9, "lo", 0, batch(3, ts=5000)))  # offsets 3-5, ts 5000-5002

    async def query(ts: int, version: int = 7) -> tuple[int, int]:
        p = (await client.call(list_offsets_req(version, "lo", ts))).topics[0].partitions[0]
        assert p.error_code == ErrorCode.none
        return p.offset, p.timestamp

    assert await query(-2) == (0, -1)
    assert await query(-1) == (6, -1)
    assert await query(-1, version=1) == (6, -1)
    assert await query(-3) == (5, 5002)
    assert await query(1001) == (1, 1001)
    assert await query(2000) == (3, 5000)
    assert await query(9999) == (-1, -1)
    resp = await client.call(list_offsets_req(7, "nope", -1))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


# -- DescribeCluster / DescribeConfigs -----------------------------------------


async def test_describe_cluster_and_configs(client: RawClient, broker: Broker) -> None:
    resp = await client.call(req(60, 1, include_cluster_authorized_operations=False, endpoint_type=1))
    assert resp.cluster_id == broker.state.cluster_id and resp.brokers[0].port == broker.port
    await create_topic(client, "cfg", configs={"retention.ms": "12345"})
    resource = sub(
        32, 4, "DescribeConfigsResource", resource_type=2, resource_name="cfg", configuration_keys=None
    )
    missing = sub(
        32, 4, "DescribeConfigsResource", resource_type=2, resource_name="nope", configuration_keys=None
    )
    brk = sub(
        32,
        4,
        "DescribeConfigsResource",
        resource_type=4,
        resource_name="1",
        configuration_keys=["num.partitions"],
    )
    resp = await client.call(
        req(32, 4, resources=(resource, missing, brk), include_synonyms=False, include_documentation=False)
    )
    cfg, gone, node = resp.results
    by_name = {c.name: c for c in cfg.configs}
    assert by_name["retention.ms"].value == "12345" and by_name["retention.ms"].config_source == 1
    assert by_name["segment.bytes"].config_source == 5 and by_name["segment.bytes"].value == str(1 << 30)
    assert gone.error_code == ErrorCode.unknown_topic_or_partition
    assert [(c.name, c.value) for c in node.configs] == [("num.partitions", "1")]


# -- bad input -------------------------------------------------------------------


async def _assert_only_this_connection_closes(
    broker: Broker, caplog: pytest.LogCaptureFixture, payload: bytes, close_write: bool = False
) -> str:
    bystander = await RawClient.connect(broker)
    await bystander.call(metadata_req(12, None))
    bad = await RawClient.connect(broker)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafkakit.broker"):
        bad.writer.write(payload)
        if close_write:
            bad.writer.write_eof()
        assert await bad.closed_by_peer()
        await asyncio.sleep(0.05)
    lines = [r for r in caplog.records if r.name == "kafkakit.broker"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert (await bystander.call(metadata_req(12, None))).brokers[0].node_id == 1
    bad.close()
    bystander.close()
    return lines[0].getMessage()


async def test_oversized_frame_closes_only_that_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with Broker(tmp_path, socket_request_max_bytes=4096) as broker:
        message = await _assert_only_this_connection_closes(
            broker, caplog, struct.pack(">i", 5000) + b"x" * 100
        )
    assert "exceeds socket_request_max_bytes" in message


async def test_tiny_frame_closes_connection(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    message = await _assert_only_this_connection_closes(broker, caplog, struct.pack(">i", 3) + b"abc")
    assert "shorter than a request header" in message


async def test_truncated_frame_closes_connection(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    message = await _assert_only_this_connection_closes(
        broker, caplog, struct.pack(">i", 100) + b"x" * 20, close_write=True
    )
    assert "inside a frame" in message


async def test_garbage_body_closes_connection(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    frame = struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\xff" * 30  # Metadata v12 header then junk
    message = await _assert_only_this_connection_closes(broker, caplog, struct.pack(">i", len(frame)) + frame)
    assert "undecodable" in message


async def test_unknown_api_key_closes_connection(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    frame = struct.pack(">hhih", 9999, 0, 1, 1) + b"x"
    message = await _assert_only_this_connection_closes(broker, caplog, struct.pack(">i", len(frame)) + frame)
    assert "unsupported api 9999" in message


async def test_unsupported_but_decodable_version_gets_error(client: RawClient) -> None:
    # Fetch v13 is known to kio but not served; its response has a top-level error code.
    request = req(1, 13, max_wait=0 * MS, min_bytes=1, topics=(), forgotten_topics_data=(), rack_id="")
    resp = await client.call(request)
    assert resp.error_code == ErrorCode.unsupported_version


# -- restart ---------------------------------------------------------------------


async def test_restart_keeps_topics_and_data(tmp_path: Path) -> None:
    data = [batch(4), batch(2)]
    async with Broker(tmp_path) as broker:
        c = await RawClient.connect(broker)
        await create_topic(c, "keep", 2, configs={"retention.ms": "86400000"})
        for d in data:
            await c.call(produce_req(9, "keep", 1, d))
        before = (await c.call(metadata_req(12, ["keep"]))).topics[0]
        cluster_id = broker.state.cluster_id
        c.close()
    async with Broker(tmp_path) as broker:
        assert broker.state.cluster_id == cluster_id
        c = await RawClient.connect(broker)
        after = (await c.call(metadata_req(12, ["keep"]))).topics[0]
        assert after.topic_id == before.topic_id and len(after.partitions) == 2
        resp = await c.call(fetch_req(12, [("keep", 1, 0)]))
        part = resp.responses[0].partitions[0]
        assert part.high_watermark == 6
        assert part.records[16 : len(data[0])] == data[0][16:]
        assert broker.state.topics.get("keep").configs == {"retention.ms": "86400000"}  # type: ignore[union-attr]
        c.close()


async def test_handler_exception_closes_only_that_connection(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(state: Any, header: Any, request: Any) -> Any:
        raise RuntimeError("handler bug")

    monkeypatch.setitem(HANDLERS, 60, ApiHandler(60, 0, 1, broken))
    bystander = await RawClient.connect(broker)
    bad = await RawClient.connect(broker)
    with caplog.at_level(logging.WARNING, logger="kafkakit.broker"):
        bad.send(req(60, 1, include_cluster_authorized_operations=False, endpoint_type=1))
        assert await bad.closed_by_peer()
    errors = [r for r in caplog.records if r.name == "kafkakit.broker"]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "handler bug" in caplog.text
    assert (await bystander.call(metadata_req(12, None))).brokers[0].node_id == 1
    bad.close()
    bystander.close()


async def test_retention_runs_in_the_background(tmp_path: Path) -> None:
    async with Broker(tmp_path, log_retention_check_interval_ms=50) as broker:
        c = await RawClient.connect(broker)
        await create_topic(c, "ret", configs={"retention.ms": "100", "segment.bytes": "1024"})
        old = int(time.time() * 1000) - 60_000
        for _ in range(5):
            await c.call(produce_req(9, "ret", 0, batch(1, value_size=900, ts=old)))
        deadline = time.monotonic() + 5
        earliest = 0
        while earliest == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            earliest = (await c.call(list_offsets_req(7, "ret", -2))).topics[0].partitions[0].offset
        assert earliest > 0
        resp = await c.call(fetch_req(12, [("ret", 0, 0)]))
        assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
        c.close()
