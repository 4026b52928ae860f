"""The idempotent producer end to end, against broker_min and Apache Kafka.

Exactly once and in order, also when Produce responses are lost after the
broker appended the records: a Kafka-aware TCP proxy (below) forwards a Produce
request, reads the broker's answer and cuts the client's connection instead of
passing it on, so the client must retry records the broker already has.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import pytest
from kafkakit import Producer
from kafkakit.errors import KafkaConfigError
from kafkakit.producer.idempotence import next_sequence, stamp_batch
from kafkakit.protocol import decode_response, encode_response
from kafkakit.protocol.build import make_response
from kafkakit.protocol.framing import ApiKey, decode_request, decode_request_header
from kafkakit.records import encode_batch, iter_batch_headers, verify_crc
from kafkakit.structs import TopicPartition

from tests.test_consumer import consumer_for, setup_topic

# -- the proxy ---------------------------------------------------------------------

_SIZE = struct.Struct(">i")


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


def _error_response(header: Any, body: bytes, code: int) -> bytes:
    """A Produce response giving every partition of the request ``code`` (kafkakit matches by correlation id)."""
    request = decode_request(header, body)
    response = make_response(
        ApiKey.PRODUCE,
        header.api_version,
        throttle_time=0,
        responses=[
            {
                "name": topic.name,
                "partition_responses": [
                    {
                        "index": part.index,
                        "error_code": code,
                        "base_offset": -1,
                        "log_append_time": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": None,
                    }
                    for part in topic.partition_data
                ],
            }
            for topic in request.topic_data
        ],
    )
    return encode_response(header.correlation_id, response)


class KafkaProxy:
    """Listen on 127.0.0.1:<ephemeral>, forward to ``upstream``; see the module docstring."""

    def __init__(
        self,
        upstream: str,
        *,
        drop_produce: Callable[[int], bool] = lambda n: False,
        reject_produce: Callable[[int], int] = lambda n: 0,
        drop_end_txn: Callable[[int], bool] = lambda n: False,
    ) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self.upstream = (host, int(port))
        self.drop_produce = drop_produce  # called with the Produce response count (1, 2, ...)
        # Called with the Produce request count: an error code answers the request in the
        # broker's place (the broker never sees it), 0 forwards it.
        self.reject_produce = reject_produce
        # Called with the EndTxn response count: True cuts the connection instead (a lost response).
        self.drop_end_txn = drop_end_txn
        self.end_txn_responses = 0
        # Produce requests forwarded and not yet answered by the broker, and the most at once.
        self.outstanding_produce = 0
        self.max_outstanding_produce = 0
        self.produce_requests = 0
        self.rejected = 0
        self.produce_responses = 0
        self.dropped = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def __aenter__(self) -> KafkaProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            self._tasks.discard(task)
            return
        pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        upward = asyncio.ensure_future(self._client_to_broker(client_r, client_w, up_w, pending))
        try:
            await self._broker_to_client(up_r, client_w, pending)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            upward.cancel()
            with contextlib.suppress(BaseException):
                await upward
            client_w.close()
            up_w.close()
            self._tasks.discard(task)

    async def _client_to_broker(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        up_w: asyncio.StreamWriter,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
            while True:
                body = await _read_frame(client_r)
                header = decode_request_header(body)
                if header.api_key == ApiKey.PRODUCE:
                    self.produce_requests += 1
                    code = self.reject_produce(self.produce_requests)
                    if code:
                        self.rejected += 1
                        client_w.write(_error_response(header, body, code))
                        continue
                    self.outstanding_produce += 1
                    self.max_outstanding_produce = max(self.max_outstanding_produce, self.outstanding_produce)
                pending[header.correlation_id] = (header.api_key, header.api_version)
                up_w.write(_SIZE.pack(len(body)) + body)
                await up_w.drain()

    async def _broker_to_client(
        self, up_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, pending: dict[int, tuple[int, int]]
    ) -> None:
        while True:
            body = await _read_frame(up_r)
            (correlation_id,) = _SIZE.unpack_from(body, 0)
            api_key, version = pending.pop(correlation_id, (-1, -1))
            frame = _SIZE.pack(len(body)) + body
            if api_key == ApiKey.PRODUCE:
                self.outstanding_produce -= 1
                self.produce_responses += 1
                if self.drop_produce(self.produce_responses):
                    self.dropped += 1
                    return  # the broker appended the records; the client never hears of it
            elif api_key == ApiKey.END_TXN:
                self.end_txn_responses += 1
                if self.drop_end_txn(self.end_txn_responses):
                    self.dropped += 1
                    return  # the coordinator ended the transaction; the client must retry
            elif api_key in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR):
                frame = self._rewrite(api_key, version, body)
            client_w.write(frame)
            await client_w.drain()

    def _rewrite(self, api_key: int, version: int, body: bytes) -> bytes:
        correlation_id, response = decode_response(api_key, version, body)
        if api_key == ApiKey.METADATA:
            brokers = tuple(
                dataclasses.replace(b, host="127.0.0.1", port=self.port) for b in response.brokers
            )
            response = dataclasses.replace(response, brokers=brokers)
        else:
            response = self._rewrite_coordinator(response)
        return encode_response(correlation_id, response)

    def _rewrite_coordinator(self, response: Any) -> Any:
        if hasattr(response, "coordinators"):  # v4+
            return dataclasses.replace(
                response,
                coordinators=tuple(
                    dataclasses.replace(c, host="127.0.0.1", port=self.port) for c in response.coordinators
                ),
            )
        if int(response.error_code):
            return response
        return dataclasses.replace(response, host="127.0.0.1", port=self.port)


# -- unit: batch stamping and settings ------------------------------------------------


def test_stamp_batch_sets_producer_fields_and_a_valid_crc() -> None:
    data = encode_batch([(b"k", b"v", 1000, ()), (None, b"w", 1001, ())], compression="lz4")
    stamped = stamp_batch(data, 4242, 7, 99, transactional=True)
    ((pos, header),) = list(iter_batch_headers(stamped))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, 99)
    assert header.is_transactional
    assert verify_crc(stamped, pos, header)
    assert stamped[61:] == data[61:]  # the records themselves are untouched
    plain = stamp_batch(stamped, 4242, 8, 0, transactional=False)
    ((pos, header),) = list(iter_batch_headers(plain))
    assert not header.is_transactional and header.producer_epoch == 8 and verify_crc(plain, pos, header)


def test_sequences_wrap_like_kafka() -> None:
    assert next_sequence(5, 3) == 8
    assert next_sequence(2**31 - 2, 5) == 3


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"enable_idempotence": True, "acks": 1}, "acks"),
        ({"transactional_id": "t", "acks": 0}, "acks"),
        (
            {"enable_idempotence": True, "max_in_flight_requests_per_connection": 6},
            "max_in_flight_requests_per_connection",
        ),
        ({"enable_idempotence": "yes"}, "enable_idempotence"),
        ({"transactional_id": ""}, "transactional_id"),
        ({"transactional_id": "t", "transaction_timeout_ms": 0}, "transaction_timeout_ms"),
    ],
)
def test_bad_idempotence_settings_name_the_setting(settings: dict[str, Any], setting: str) -> None:
    with pytest.raises(KafkaConfigError) as info:
        Producer(bootstrap_servers="localhost:9092", **settings)
    assert info.value.setting == setting


def test_idempotence_defaults_acks_to_all() -> None:
    assert Producer(enable_idempotence=True)._acks == -1
    assert Producer(transactional_id="t")._acks == -1
    assert Producer()._acks == 1


# -- end to end ---------------------------------------------------------------------------


async def read_all(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30
) -> dict[int, list[bytes]]:
    """Every record of ``topic`` (expecting ``count``), values by partition, in offset order."""
    consumer = consumer_for(bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = 0
        while seen < count and loop.time() < deadline:
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                out[tp.partition].extend(r.value for r in records)
                seen += len(records)
        # Anything beyond ``count`` (a duplicate) must show up too: read a little longer.
        for tp, records in (await consumer.getmany(timeout_ms=500)).items():
            out[tp.partition].extend(r.value for r in records)
        return out
    finally:
        await consumer.stop()


def expected(partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    return {p: [b"p%d-%d" % (p, i) for i in range(per_partition)] for p in range(partitions)}


async def produce_numbered(producer: Producer, topic: str, partitions: int, per_partition: int) -> list[Any]:
    """Send ``p<p>-<i>`` to every partition, round robin; returns the RecordMetadata in send order."""
    pending = []
    for i in range(per_partition):
        for p in range(partitions):
            pending.append(await producer.send(topic, b"p%d-%d" % (p, i), partition=p))
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the sender drain: many small requests in flight
    return [await future for future in pending]


async def test_idempotent_producer_delivers_exactly_once_in_order(broker: Any, topic: str) -> None:
    await setup_topic(broker.bootstrap_servers, topic, 3)
    async with Producer(
        bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True, max_batch_size=2048
    ) as producer:
        assert producer._identity is not None and producer._identity.producer_id >= 0
        sent = await produce_numbered(producer, topic, 3, 500)
        # Merged batches report each record's own offset: a fresh topic numbers them 0, 1, ...
        assert [(m.partition, m.offset) for m in sent] == [(p, i) for i in range(500) for p in range(3)]
        result = await (await producer.send_batch(topic, [b"bulk-%d" % i for i in range(300)], partition=0))
        assert len(result) == 300
    got = await read_all(broker.bootstrap_servers, topic, 3, 1800)
    want = expected(3, 500)
    want[0] += [b"bulk-%d" % i for i in range(300)]
    assert got == want


async def test_lost_produce_responses_cause_no_duplicates_or_reordering(broker: Any, topic: str) -> None:
    """The broker appends, the response is lost, the client retries: exactly once, in order."""
    await setup_topic(broker.bootstrap_servers, topic, 2)
    drops = {2, 3, 5, 8, 9, 13, 20, 21, 22}
    async with KafkaProxy(broker.bootstrap_servers, drop_produce=lambda n: n in drops) as proxy:
        async with Producer(
            bootstrap_servers=proxy.bootstrap_servers,
            enable_idempotence=True,
            max_batch_size=300,  # a few records per batch: many batches, several in flight
            max_request_size=1500,  # and few batches per request: many requests
            max_in_flight_requests_per_connection=5,
            retry_backoff_ms=20,
        ) as producer:
            await produce_numbered(producer, topic, 2, 1200)
        assert proxy.dropped >= 4, f"only {proxy.dropped} Produce responses were dropped"
    got = await read_all(broker.bootstrap_servers, topic, 2, 2400)
    assert got == expected(2, 1200)


async def test_pipelined_batches_stay_in_order_when_one_is_refused(broker: Any, topic: str) -> None:
    """Several batches of one partition in flight; one is refused with a retriable error
    (the proxy answers NOT_LEADER_OR_FOLLOWER in the broker's place), so the broker gets its
    successors with a gap and answers OUT_OF_ORDER_SEQUENCE_NUMBER: they are retried behind
    the refused one, which goes first.  Lost responses (connection cuts) are mixed in."""
    await setup_topic(broker.bootstrap_servers, topic, 1)
    refused = {3, 9, 10, 17, 30}
    async with KafkaProxy(
        broker.bootstrap_servers,
        reject_produce=lambda n: 6 if n in refused else 0,
        drop_produce=lambda n: n in (12, 25),
    ) as proxy:
        async with Producer(
            bootstrap_servers=proxy.bootstrap_servers,
            enable_idempotence=True,
            max_batch_size=300,
            max_request_size=1500,
            max_in_flight_requests_per_connection=5,
            retry_backoff_ms=20,
        ) as producer:
            await produce_numbered(producer, topic, 1, 2000)
        assert proxy.rejected == len(refused)
        assert proxy.dropped == 2
        assert proxy.max_outstanding_produce >= 3, "the partition never had several batches in flight"
    got = await read_all(broker.bootstrap_servers, topic, 1, 2000)
    assert got == expected(1, 2000)


async def test_unknown_producer_id_bumps_the_epoch_and_resends_in_order(broker: Any, topic: str) -> None:
    """KIP-360: the broker "lost" our state (the proxy answers UNKNOWN_PRODUCER_ID in its place);
    the producer gets a new epoch/id, renumbers and resends: no loss, no duplicates, no reordering.

    One request in flight: a broker that really lost the state would also refuse the batches
    pipelined behind the refused one, which the proxy (answering in its place) cannot imitate.
    """
    await setup_topic(broker.bootstrap_servers, topic, 2)
    async with KafkaProxy(
        broker.bootstrap_servers, reject_produce=lambda n: 59 if n in (4, 15) else 0
    ) as proxy:
        async with Producer(
            bootstrap_servers=proxy.bootstrap_servers,
            enable_idempotence=True,
            max_batch_size=300,
            max_request_size=1500,
            max_in_flight_requests_per_connection=1,
            retry_backoff_ms=20,
        ) as producer:
            identity = producer._identity
            assert identity is not None
            first = (identity.producer_id, identity.epoch)
            await produce_numbered(producer, topic, 2, 600)
            assert (identity.producer_id, identity.epoch) != first
        assert proxy.rejected == 2
    got = await read_all(broker.bootstrap_servers, topic, 2, 1200)
    assert got == expected(2, 600)
