"""Producer pieces that need no broker: settings validation, the accumulator, result objects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafkakit.errors import (
    IllegalStateError,
    KafkaConfigError,
    KafkaTimeoutError,
    ProducerClosed,
)
from kafkakit.producer import Producer, RecordFuture
from kafkakit.producer.accumulator import RECORD_MEMORY_OVERHEAD, Accumulator, ProducerBatch
from kafkakit.structs import RecordMetadata

BOOTSTRAP = "127.0.0.1:9"  # never contacted by these tests


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("bootstrap_servers", ""),
        ("bootstrap_servers", "host:notaport"),
        ("client_id", ""),
        ("acks", 2),
        ("acks", "some"),
        ("acks", True),
        ("linger_ms", -1),
        ("linger_ms", 1.5),
        ("max_batch_size", 0),
        ("max_request_size", 0),
        ("buffer_memory", 0),
        ("compression_type", "brotli"),
        ("request_timeout_ms", 0),
        ("delivery_timeout_ms", 1000),  # below linger_ms + request_timeout_ms
        ("retry_backoff_ms", -5),
        ("metadata_max_age_ms", "soon"),
        ("key_serializer", "not callable"),
        ("value_serializer", 42),
        ("partitioner", object()),
        ("enable_idempotence", "yes"),
        ("transactional_id", ""),
        ("max_in_flight_requests_per_connection", 0),
    ],
)
def test_bad_setting_raises_config_error_naming_it(setting: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"bootstrap_servers": BOOTSTRAP, setting: value}
    with pytest.raises(KafkaConfigError) as info:
        Producer(**kwargs)
    assert info.value.setting == setting
    assert setting in str(info.value)


@pytest.mark.parametrize("codec", [None, "none", "gzip", "snappy", "lz4", "zstd", "LZ4"])
def test_every_codec_name_is_accepted(codec: str | None) -> None:
    Producer(bootstrap_servers=BOOTSTRAP, compression_type=codec)


@pytest.mark.parametrize("acks", [0, 1, -1, "all"])
def test_acks_values(acks: int | str) -> None:
    Producer(bootstrap_servers=BOOTSTRAP, acks=acks)


async def test_send_before_start_and_after_stop() -> None:
    producer = Producer(bootstrap_servers=BOOTSTRAP)
    with pytest.raises(IllegalStateError, match="start"):
        await producer.send("t", b"v")
    with pytest.raises(IllegalStateError):
        await producer.send_batch("t", [b"v"])
    await producer.stop()
    with pytest.raises(ProducerClosed):
        await producer.send("t", b"v")
    with pytest.raises(ProducerClosed):
        await producer.start()


# -- accumulator --------------------------------------------------------------------


def _accumulator(**kwargs: Any) -> Accumulator:
    settings: dict[str, Any] = {"max_batch_size": 1000, "linger_ms": 0, "buffer_memory": 10_000}
    settings.update(kwargs)
    return Accumulator(**settings)


async def test_batches_close_at_max_batch_size() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    for _ in range(10):
        acc.append(pq, None, b"x" * 200, 0, (), 214)
    sizes = [len(b.values) for b in pq.batches]
    assert sizes == [4, 4, 2]  # 61-byte header + 4 * 214 fits in 1000, a fifth does not
    assert all(b.size <= 1000 for b in pq.batches)


async def test_oversized_record_gets_a_batch_of_its_own() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    acc.append(pq, None, b"x", 0, (), 15)
    acc.append(pq, None, b"x" * 5000, 0, (), 5014)
    acc.append(pq, None, b"x", 0, (), 15)
    assert [len(b.values) for b in pq.batches] == [1, 1, 1]


async def test_linger_decides_readiness() -> None:
    acc = _accumulator(linger_ms=50)
    pq = acc.queue("t", 0)
    acc.append(pq, None, b"x", 0, (), 15)
    head = pq.batches[0]
    assert not acc.is_ready(pq, head.created + 0.01)
    assert acc.is_ready(pq, head.created + 0.051)
    acc.flushing += 1
    assert acc.is_ready(pq, head.created)


async def test_requeue_keeps_partition_order() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    for _ in range(12):
        acc.append(pq, None, b"x" * 200, 0, (), 214)
    first, second = acc.take(pq), acc.take(pq)
    # Failures may be handled in any order; the queue must come back in creation order.
    acc.requeue(pq, second)
    acc.requeue(pq, first)
    assert [b.seq for b in pq.batches] == [0, 1, 2]
    assert pq.in_flight == 0


async def test_buffer_memory_reservations_wait_in_order() -> None:
    acc = _accumulator(buffer_memory=1000)
    await acc.reserve(800)
    first = asyncio.ensure_future(acc.reserve(300))
    second = asyncio.ensure_future(acc.reserve(100))
    await asyncio.sleep(0)
    assert not first.done() and not second.done()  # FIFO: the small one may not overtake
    assert acc.memory_wanted
    acc.release(500)
    await asyncio.sleep(0)
    assert first.done() and second.done()
    assert acc.buffered == 700


async def test_a_waiting_reservation_holds_back_later_ones_until_it_leaves() -> None:
    """While a reservation waits, even one that would fit waits behind it (the hot path's single
    ``free`` comparison sees the gate); the waiter's cancellation or grant opens the way again."""
    acc = _accumulator(buffer_memory=1000)
    await acc.reserve(900)
    assert (acc.buffered, acc.has_room(100), acc.has_room(101)) == (900, True, False)
    big = asyncio.ensure_future(acc.reserve(500))
    await asyncio.sleep(0)
    assert acc.buffered == 900 and not acc.has_room(1)  # gated: nothing jumps the queue
    small = asyncio.ensure_future(acc.reserve(50))
    await asyncio.sleep(0)
    assert not small.done()
    big.cancel()
    await asyncio.sleep(0)
    acc.release(0)  # the head was cancelled: the next waiter is granted, then the gate opens
    await asyncio.sleep(0)
    assert small.done() and acc.buffered == 950 and acc.has_room(50) and not acc.has_room(51)
    acc.release(950)
    assert acc.buffered == 0 and acc.free == 1000 and not acc.memory_wanted


async def test_a_split_batch_reports_each_records_offset_from_its_part() -> None:
    """A grown batch refused as too large goes back as parts of up to max_batch_size, in its
    place; each record's offset comes from its own part, wherever the broker put that part."""
    acc = _accumulator(buffer_memory=100_000)
    acc.batch_limit = 50_000  # the producer's limit when not idempotent: batches grow
    pq = acc.queue("t", 0)
    futures = []
    for i in range(12):
        key = b"k%d" % i if i % 2 else None
        headers = [("h", b"v")] if i % 3 == 0 else []
        size = 14 + 200 + (len(key) if key else 0) + (8 if headers else 0)
        await acc.reserve(size + RECORD_MEMORY_OVERHEAD)  # as Producer.send does
        futures.append(acc.append(pq, key, b"x" * 200, 1000 + i, headers, size))
    await acc.reserve(15 + RECORD_MEMORY_OVERHEAD)
    later = acc.append(acc.queue("t", 0), None, b"y", 2000, (), 15)  # joins the same open batch
    batch = acc.take(pq)
    assert len(batch.values) == 13 and acc.split(pq, batch)
    parts = list(pq.batches)
    assert [len(p.values) for p in parts] == [4, 4, 5] and all(p.size <= 1000 for p in parts)
    keyed = [[index for index, key in enumerate(p.keys or ()) if key is not None] for p in parts]
    assert keyed == [[1, 3], [1, 3], [1, 3]] and [p.unkeyed for p in parts] == [2, 2, 2]  # re-indexed per part
    assert [list(p.headers or {}) for p in parts] == [[0, 3], [2], [1]]
    held = acc.buffered
    for base, part in zip([500, 40, 900], parts, strict=True):  # anywhere in the log
        acc.complete_group(pq, [acc.take(pq)], base, -1, 0)
        assert acc.buffered == held or part is parts[-1]  # the batch's memory goes with its last part
    assert acc.buffered == 0
    assert [(await f).offset for f in futures] == [500, 501, 502, 503, 40, 41, 42, 43, 900, 901, 902, 903]
    assert (await later).offset == 904 and (await futures[5]).timestamp == 1005


async def test_a_failed_part_fails_every_record_of_the_split_batch() -> None:
    acc = _accumulator()
    acc.batch_limit = 50_000
    pq = acc.queue("t", 0)
    await acc.reserve(6 * (314 + RECORD_MEMORY_OVERHEAD))
    futures = [acc.append(pq, None, b"x" * 300, 0, (), 314) for _ in range(6)]
    acc.split(pq, acc.take(pq))
    first, second = acc.take(pq), acc.take(pq)
    acc.complete_group(pq, [first], 0, -1, 0)
    acc.fail(pq, second, KafkaTimeoutError("gone"))
    assert all(f.done() for f in futures) and acc.buffered == 0
    with pytest.raises(KafkaTimeoutError):
        await futures[0]  # its own part was written, but the batch's records fail together


async def test_a_retried_part_goes_back_ahead_of_the_later_parts() -> None:
    """A part of a split batch put back for a retry is sent before the parts after it (the
    parts share the batch's number in the queue), so max_in_flight=1 keeps the order."""
    acc = _accumulator()
    acc.batch_limit = 50_000
    pq = acc.queue("t", 0)
    await acc.reserve(6 * (314 + RECORD_MEMORY_OVERHEAD))
    for _ in range(6):
        acc.append(pq, None, b"x" * 300, 0, (), 314)
    acc.split(pq, acc.take(pq))
    parts = list(pq.batches)
    first = acc.take(pq)
    acc.requeue(pq, first)  # a retriable error
    assert list(pq.batches) == parts


async def test_a_batch_within_max_batch_size_is_not_split() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    acc.append(pq, None, b"x" * 300, 0, (), 314)
    acc.append(pq, None, b"x" * 300, 0, (), 314)
    batch = acc.take(pq)
    assert not acc.split(pq, batch) and not pq.batches


async def test_completed_batch_releases_memory_and_resolves_records() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 3)
    await acc.reserve(30 + 2 * RECORD_MEMORY_OVERHEAD)
    f1 = acc.append(pq, b"k", b"a", 1000, (), 15)
    f2 = acc.append(pq, None, b"b", 1001, (), 15)
    batch = acc.take(pq)
    assert batch.record_count == 2
    acc.complete(pq, batch, (40, -1, 7))
    assert acc.buffered == 0
    assert await f1 == RecordMetadata("t", 3, 40, 1000, 0, 7)
    assert (await f2).offset == 41
    assert f2.result().timestamp == 1001


async def test_log_append_time_replaces_create_time() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    future = acc.append(pq, None, b"a", 1000, (), 15)
    acc.complete(pq, acc.take(pq), (5, 99_999, 0))
    metadata = await future
    assert (metadata.timestamp, metadata.timestamp_type) == (99_999, 1)


async def test_record_future_reports_failure() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    future = acc.append(pq, None, b"a", 0, (), 15)
    seen: list[RecordFuture] = []
    future.add_done_callback(seen.append)
    assert not future.done()
    acc.fail(pq, acc.take(pq), KafkaTimeoutError("gone"))
    await asyncio.sleep(0)
    assert seen == [future]
    assert isinstance(future.exception(), KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError, match="gone"):
        await future


async def test_expired_batches_fail_with_timeout() -> None:
    acc = _accumulator()
    pq = acc.queue("t", 0)
    future = acc.append(pq, None, b"a", 0, (), 15)
    batch: ProducerBatch = pq.batches[0]
    acc.expire(pq, batch.created + 0.5, 1.0)
    assert not future.done()
    acc.expire(pq, batch.created + 1.0, 1.0)
    with pytest.raises(KafkaTimeoutError, match="t-0"):
        await future
    assert not pq.batches and pq.open is None
