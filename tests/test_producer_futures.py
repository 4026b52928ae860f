"""The futures of ``Producer.send()`` behave as asyncio futures under every asyncio helper.

They are not ``asyncio.Future`` objects (one per record would cost too much), but
``asyncio.isfuture`` accepts them, so gather/wait/as_completed/shield use them
directly, and cancelling one cancels only it, never the batch it shares.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from kafkakit import Consumer, Producer, RecordMetadata, TopicPartition
from kafkakit.errors import KafkaError
from kafkakit.producer import producer as producer_module
from kafkakit.producer.record_future import FUTURES_REUSABLE, RecordFuture

from tests.brokers import BrokerMinServer


@pytest.fixture
async def producer(broker_min: BrokerMinServer) -> Producer:
    async with Producer(bootstrap_servers=broker_min.bootstrap_servers, linger_ms=20) as producer:
        yield producer  # type: ignore[misc]


async def _count(broker: BrokerMinServer, topic: str) -> int:
    async with Consumer(bootstrap_servers=broker.bootstrap_servers) as consumer:
        tp = TopicPartition(topic, 0)
        return (await consumer.end_offsets([tp]))[tp]


async def test_send_futures_are_asyncio_futures_under_gather(producer: Producer, topic: str) -> None:
    futures = [await producer.send(topic, f"{i}".encode(), partition=0) for i in range(500)]
    assert all(asyncio.isfuture(f) for f in futures)
    results = await asyncio.gather(*futures)
    assert [r.offset for r in results] == list(range(500))
    assert all(isinstance(r, RecordMetadata) and r.topic == topic for r in results)
    assert all(f.done() and not f.cancelled() and f.exception() is None for f in futures)
    assert futures[3].result() == results[3]


async def test_wait_as_completed_shield_ensure_future(producer: Producer, topic: str) -> None:
    futures = [await producer.send(topic, b"x", partition=0) for _ in range(20)]
    done, pending = await asyncio.wait(futures)
    assert len(done) == 20 and not pending
    futures = [await producer.send(topic, b"y", partition=0) for _ in range(20)]
    offsets = sorted([(await f).offset for f in asyncio.as_completed(futures)])
    assert offsets == list(range(20, 40))
    future = await producer.send(topic, b"z", partition=0)
    assert (await asyncio.shield(future)).offset == 40
    future = await producer.send(topic, b"z", partition=0)
    assert asyncio.ensure_future(future) is future  # no Task wrapped around it
    assert (await future).offset == 41


async def test_cancelling_one_future_leaves_the_batch_and_its_record_alone(
    producer: Producer, topic: str, broker_min: BrokerMinServer
) -> None:
    first = await producer.send(topic, b"a", partition=0)
    second = await producer.send(topic, b"b", partition=0)  # same batch as `first`
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(first, 0.001)  # times out inside the 20 ms linger and cancels `first`
    assert first.cancelled() and first.done()
    with pytest.raises(asyncio.CancelledError):
        first.result()
    assert (await second).offset == 1  # the shared batch was not cancelled
    await producer.flush()
    assert await _count(broker_min, topic) == 2  # the cancelled future's record was still delivered


async def test_cancelling_a_task_awaiting_a_future(producer: Producer, topic: str) -> None:
    future = await producer.send(topic, b"a", partition=0)
    other = await producer.send(topic, b"b", partition=0)
    task = asyncio.create_task(_await(future))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert future.cancelled()
    assert (await other).offset == 1


async def _await(future: object) -> object:
    return await future  # type: ignore[misc]


async def test_gather_cancel_cancels_the_children(producer: Producer, topic: str) -> None:
    futures = [await producer.send(topic, b"a", partition=0) for _ in range(3)]
    gathered = asyncio.gather(*futures)
    gathered.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathered
    assert all(f.cancelled() for f in futures)
    assert not futures[0].cancel()  # already done


async def test_callbacks_run_once_in_their_context_and_can_be_removed(producer: Producer, topic: str) -> None:
    calls: list[tuple[str, object]] = []
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="none")

    def record(name: str) -> object:
        return lambda f: calls.append((name, marker.get()))

    future = await producer.send(topic, b"a", partition=0)
    keep, drop = record("keep"), record("drop")
    context = contextvars.copy_context()
    context.run(marker.set, "ctx")
    future.add_done_callback(keep, context=context)
    future.add_done_callback(drop)
    assert future.remove_done_callback(drop) == 1
    await future
    await asyncio.sleep(0)
    future.add_done_callback(record("late"))  # already done: scheduled soon
    await asyncio.sleep(0)
    assert calls == [("keep", "ctx"), ("late", "none")]


async def test_delivery_errors_reach_every_helper(broker_min: BrokerMinServer, topic: str) -> None:
    big = b"x" * (2 << 20)  # allowed by this producer, larger than the broker's message.max.bytes
    producer = Producer(bootstrap_servers=broker_min.bootstrap_servers, max_request_size=8 << 20, max_batch_size=8 << 20)
    async with producer:
        await _delivery_errors(producer, topic, big)


async def _delivery_errors(producer: Producer, topic: str, big: bytes) -> None:
    failing = await producer.send(topic, big, partition=0)
    with pytest.raises(KafkaError):
        await asyncio.gather(failing)
    assert isinstance(failing.exception(), KafkaError)
    failing = await producer.send(topic, big, partition=0)
    results = await asyncio.gather(failing, return_exceptions=True)
    assert isinstance(results[0], KafkaError)
    ok = await producer.send(topic, b"small", partition=0)
    assert isinstance((await asyncio.gather(ok, return_exceptions=True))[0], RecordMetadata)


async def test_send_builds_its_future_like_the_constructor(producer: Producer, topic: str) -> None:
    """send() inlines RecordFuture.of (speed): every slot must still be set alike."""
    from kafkakit.producer.record_future import RecordFuture

    sent = await producer.send(topic, b"v", partition=0, timestamp_ms=1234)
    built = RecordFuture.of(sent._batch, sent._delta, 1234)
    for name in RecordFuture.__slots__:
        assert getattr(sent, name) == getattr(built, name), name
    assert (await sent).timestamp == 1234


async def test_records_of_mixed_shapes_in_one_batch_round_trip(
    producer: Producer, topic: str, broker_min: BrokerMinServer
) -> None:
    """Keys, headers and odd values among the columns of one batch come back as sent."""
    sent = []
    for i in range(200):  # past the uniform encoder's minimum, but not uniform
        key = None if i % 3 else f"k{i}".encode()
        headers = [("h", str(i).encode())] if i % 7 == 0 else None
        value = None if i % 11 == 0 else b"v" * (i % 5)
        sent.append((key, value, headers))
        await producer.send(topic, value, key=key, partition=0, headers=headers)
    await producer.flush()
    async with Consumer(bootstrap_servers=broker_min.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        got = []
        while len(got) < 200:
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                got.extend((r.key, r.value, list(r.headers) or None) for r in records)
    assert got == [(k, v, list(h) if h else None) for k, v, h in sent]


async def test_gathering_a_large_batch_keeps_the_collector_on(producer: Producer, topic: str) -> None:
    """A batch completing with thousands of gathered futures runs their callbacks with the collector
    paused (consumer-style GC policy); it must come back enabled, with every result right."""
    import gc

    futures = [await producer.send(topic, b"%d" % i, partition=0) for i in range(3000)]
    results = await asyncio.gather(*futures)
    assert gc.isenabled()
    assert [r.offset for r in results] == list(range(3000))
    gc.disable()
    try:  # an application that disabled the collector keeps it disabled
        more = await asyncio.gather(*[await producer.send(topic, b"x", partition=0) for _ in range(2000)])
        assert not gc.isenabled() and more[-1].offset == 4999
    finally:
        gc.enable()


class _CountedFuture(RecordFuture):
    """RecordFuture that counts the futures send() creates (instead of reusing one)."""

    __slots__ = ()
    created = 0

    def __new__(cls) -> _CountedFuture:
        _CountedFuture.created += 1
        return super().__new__(cls)


@pytest.fixture
def counted_futures(monkeypatch: pytest.MonkeyPatch) -> type[_CountedFuture]:
    monkeypatch.setattr(producer_module, "RecordFuture", _CountedFuture)
    _CountedFuture.created = 0
    return _CountedFuture


@pytest.mark.skipif(not FUTURES_REUSABLE, reason="this interpreter's reference counts cannot prove a future unused")
async def test_send_reuses_a_future_only_when_nothing_holds_it(
    producer: Producer, topic: str, counted_futures: type[_CountedFuture], broker_min: BrokerMinServer
) -> None:
    """send() reuses the future of the send before last when the application dropped it
    (``last = await send(...)`` keeps one); futures it keeps, awaits, gathers or gave a
    callback are never reused, and every one reports its own record."""
    last = None
    for i in range(1000):
        last = await producer.send(topic, b"%d" % i, partition=0)
    assert last is not None and (await last).offset == 999
    assert counted_futures.created <= 3  # the first two sends, at most one more

    counted_futures.created = 0
    kept = [await producer.send(topic, b"k%d" % i, partition=0) for i in range(300)]
    assert len({id(f) for f in kept}) == 300  # all alive, so all distinct objects
    assert counted_futures.created >= 298  # only the futures of the last loop could be reused

    reported: list[int] = []
    called = await producer.send(topic, b"called", partition=0)
    called.add_done_callback(lambda f: reported.append(f.result().offset))
    del called  # only the batch's callback list holds it now
    awaited = asyncio.ensure_future(producer.send_and_wait(topic, b"awaited", partition=0))
    await asyncio.sleep(0)  # the task sends, then waits on its future (which only the task holds)
    for i in range(50):
        await producer.send(topic, b"after%d" % i, partition=0)
    results = await asyncio.gather(*kept)
    assert [r.offset for r in results] == list(range(1000, 1300))
    assert (await awaited).offset == 1301
    await producer.flush()
    await asyncio.sleep(0)  # done callbacks run soon after the batch completes
    assert reported == [1300]
    got = await _values(broker_min, topic, 1352)
    assert got[1300:1302] == [b"called", b"awaited"] and got[-1] == b"after49"


async def test_send_creates_a_future_per_record_when_reuse_is_off(
    topic: str, counted_futures: type[_CountedFuture], monkeypatch: pytest.MonkeyPatch, broker_min: BrokerMinServer
) -> None:
    """Without FUTURES_REUSABLE (CPython 3.14+, free-threaded or another interpreter) every send builds its own."""
    monkeypatch.setattr(producer_module, "FUTURES_REUSABLE", False)
    async with Producer(bootstrap_servers=broker_min.bootstrap_servers) as fresh:
        for i in range(200):
            await fresh.send(topic, b"%d" % i, partition=0)
        last = await fresh.send(topic, b"last", partition=0)
        assert (await last).offset == 200
    assert counted_futures.created == 201


async def _values(broker: BrokerMinServer, topic: str, count: int) -> list[bytes | None]:
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes | None] = []
        while len(got) < count:
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                got.extend(r.value for r in records)
        return got
