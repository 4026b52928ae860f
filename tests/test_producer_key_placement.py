"""Keyed records of new keys are parked and placed together (kafkakit.producer.key_placement).

Placed in one vectorised pass, they must still land where Java puts them, keep their
order among every other record sent to their partition, and their futures must act
as if the record had gone straight to its batch. Real brokers; records are read back
with confluent-kafka's consumer.
"""

from __future__ import annotations

import asyncio
import collections
import random

import pytest
from kafkakit.errors import KafkaError, TransactionAbortedError
from kafkakit.producer import Producer, partition_for_key
from kafkakit.producer.accumulator import Accumulator
from kafkakit.producer.key_placement import GROUPED_RECORDS_PER_PARTITION

from tests.brokers import BrokerMinProcess, RunningBroker, new_topic_name
from tests.test_producer import consume, create_topic, producer_for
from tests.test_transactions import read_values


def _parked(producer: Producer, topic: str) -> int:
    state = producer._topics.get(topic)
    return 0 if state is None or state.unplaced is None else len(state.unplaced)


async def test_new_keys_land_where_java_puts_them_in_send_order(broker: RunningBroker, topic: str) -> None:
    """Thousands of new keys, small batches (a partition's records fill several), some
    headers and some keys sent twice: each record on Java's partition, in send order."""
    await create_topic(broker.bootstrap_servers, topic, 6)
    rng = random.Random(7)
    sent: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = []
    async with producer_for(broker, max_batch_size=2048, linger_ms=20) as producer:
        await producer.partitions_for(topic)
        futures = []
        for i in range(3000):
            key = f"user-{rng.randrange(2500)}-{'x' * rng.randrange(12)}".encode()  # mixed lengths
            headers = [("i", str(i).encode())] if i % 7 == 0 else []
            value = f"v{i}".encode()
            futures.append(await producer.send(topic, value, key=key, headers=headers))
            sent.append((key, value, headers))
        assert _parked(producer, topic) > 0  # the sender has not run: they wait for placement
        metadata = [await f for f in futures]
    for (key, _, _), meta in zip(sent, metadata, strict=True):
        assert meta.partition == partition_for_key(key, 6)
    by_partition: dict[int, list[int]] = collections.defaultdict(list)
    for meta in metadata:
        by_partition[meta.partition].append(meta.offset)
    assert all(offsets == sorted(offsets) and len(set(offsets)) == len(offsets) for offsets in by_partition.values())
    records = {(r.partition, r.offset): r for r in await consume(broker.bootstrap_servers, topic, 3000, list(range(6)))}
    for (key, value, headers), meta in zip(sent, metadata, strict=True):
        record = records[(meta.partition, meta.offset)]
        assert (record.key, record.value, list(record.headers)) == (key, value, headers)


async def test_keys_that_never_repeat_are_not_remembered_and_repeating_ones_are(broker: RunningBroker, topic: str) -> None:
    """A new key per record (an id) wastes the key cache: once a large window of placed keys
    shows none remembered or repeated, they are remembered only one window in REMEMBER_ONE_IN;
    keys that repeat are remembered at once and go straight to their batches again."""
    from kafkakit.producer.topic_state import REMEMBER_ONE_IN, SAMPLED_WINDOW

    await create_topic(broker.bootstrap_servers, topic, 4)
    async with producer_for(broker, linger_ms=5) as producer:
        await (await producer.send(topic, b"warm-up", partition=0))

        def remembered() -> dict[bytes, object]:
            return producer._topics[topic].remembered  # type: ignore[return-value]

        async def window(keys: list[bytes]) -> None:  # parked while the loop runs, placed when it yields
            futures = [await producer.send(topic, b"v", key=key) for key in keys]
            assert _parked(producer, topic) == len(keys)
            for key, meta in zip(keys, await asyncio.gather(*futures), strict=True):
                assert meta.partition == partition_for_key(key, 4)

        await window([b"first-%d" % i for i in range(SAMPLED_WINDOW)])
        assert len(remembered()) == SAMPLED_WINDOW  # nothing to compare with yet
        for n in range(1, REMEMBER_ONE_IN):
            await window([b"id-%d-%d" % (n, i) for i in range(SAMPLED_WINDOW)])
            assert b"id-%d-0" % n not in remembered()
        await window([b"id-last-%d" % i for i in range(SAMPLED_WINDOW)])
        assert b"id-last-0" in remembered()  # one window in REMEMBER_ONE_IN all the same

        await window([b"hot-%d" % (i % 16) for i in range(SAMPLED_WINDOW)])  # repeats within the sample
        assert b"hot-0" in remembered()
        futures = [await producer.send(topic, b"again", key=b"hot-%d" % (i % 16)) for i in range(100)]
        assert _parked(producer, topic) == 0  # remembered: straight to their batches
        assert {meta.partition for meta in await asyncio.gather(*futures)} <= set(range(4))
        producer._topics[topic].unrepeated = 1
        # Remembered keys parked behind a new one (while records are parked, every key parks):
        await window([b"new"] + [b"first-%d" % i for i in range(SAMPLED_WINDOW)])
        assert producer._topics[topic].unrepeated == 0  # the sample found them: repeats again


@pytest.mark.parametrize("sender_runs", [False, True], ids=["parked-until-another-send", "sender-places"])
async def test_parked_records_keep_their_place_among_other_sends(
    broker: RunningBroker, topic: str, sender_runs: bool
) -> None:
    """New keys, remembered keys, keyless records and explicit partitions interleaved on
    one topic: every partition holds its records in the order they were sent (idempotent,
    so that a retry of a batch sent before the new topic's leader was ready cannot
    reorder them, as it may without idempotence)."""
    await create_topic(broker.bootstrap_servers, topic, 3)
    rng = random.Random(11)
    async with producer_for(broker, linger_ms=5, acks="all", enable_idempotence=True) as producer:
        await producer.partitions_for(topic)
        futures = []
        for i in range(1200):
            shape = rng.randrange(4)
            value = str(i).encode()
            if shape == 0:
                futures.append(await producer.send(topic, value, key=f"new-{i}".encode()))
            elif shape == 1:
                futures.append(await producer.send(topic, value, key=f"old-{i % 5}".encode()))
            elif shape == 2:
                futures.append(await producer.send(topic, value))
            else:
                futures.append(await producer.send(topic, value, partition=i % 3))
            if sender_runs and i % 50 == 0:
                await asyncio.sleep(0.002)
        metadata = [await f for f in futures]
    sent_order: dict[int, list[int]] = collections.defaultdict(list)
    for i, meta in enumerate(metadata):
        sent_order[meta.partition].append(i)
    records = await consume(broker.bootstrap_servers, topic, 1200, [0, 1, 2])
    for partition in range(3):
        stored = [int(r.value or b"") for r in records if r.partition == partition]
        assert stored == sent_order[partition], f"partition {partition} out of send order"


async def test_parked_futures_act_like_the_futures_of_placed_records(broker: RunningBroker, topic: str) -> None:
    """Callbacks added while parked run once delivered, a cancelled future leaves its record
    to be delivered, and gather works on parked futures."""
    await create_topic(broker.bootstrap_servers, topic, 4)
    async with producer_for(broker) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"v", key=f"k{i}".encode()) for i in range(100)]
        assert not any(f.done() for f in futures) and _parked(producer, topic) == 100
        called = []
        futures[3].add_done_callback(lambda f: called.append(f.result().partition))
        assert futures[5].cancel()
        gathered = await asyncio.gather(*(f for i, f in enumerate(futures) if i != 5))
        await producer.flush()
    assert [m.partition for m in gathered] == [partition_for_key(f"k{i}".encode(), 4) for i in range(100) if i != 5]
    assert called == [partition_for_key(b"k3", 4)]
    assert futures[5].cancelled()
    keys = {r.key for r in await consume(broker.bootstrap_servers, topic, 100, [0, 1, 2, 3])}
    assert b"k5" in keys and len(keys) == 100


async def test_dropped_parked_futures_are_reused_and_nothing_is_lost(broker: RunningBroker, topic: str) -> None:
    """A send whose future the application dropped hands it to a later record: every
    record is still delivered once, and all buffer memory comes back."""
    await create_topic(broker.bootstrap_servers, topic, 5)
    async with producer_for(broker) as producer:
        await producer.partitions_for(topic)
        kept = []
        for i in range(2000):
            future = await producer.send(topic, str(i).encode(), key=f"key-{i}".encode())
            if i % 100 == 0:
                kept.append((i, future))  # the rest are dropped at once
        unplaced = producer._topics[topic].unplaced
        assert unplaced is not None and None in unplaced.futures  # some were reused
        await producer.flush()
        assert producer._acc.free == producer._acc.buffer_memory
        for i, future in kept:
            assert (await future).partition == partition_for_key(f"key-{i}".encode(), 5)
    values = sorted(int(r.value or b"") for r in await consume(broker.bootstrap_servers, topic, 2000, list(range(5))))
    assert values == list(range(2000))


async def test_enough_records_per_partition_are_placed_a_partition_at_a_time(broker: RunningBroker, topic: str) -> None:
    """Both placements (one by one, a partition's slice at a time) agree with Java and keep order."""
    await create_topic(broker.bootstrap_servers, topic, 2)
    async with producer_for(broker, max_batch_size=1024) as producer:
        await producer.partitions_for(topic)
        few = [await producer.send(topic, b"a", key=f"few-{i}".encode()) for i in range(GROUPED_RECORDS_PER_PARTITION)]
        await producer.flush()  # 16 records on 2 partitions: one by one
        many = [await producer.send(topic, b"b" * 50, key=f"many-{i}".encode()) for i in range(400)]
        metadata = [await f for f in few + many]
    keys = [f"few-{i}" for i in range(16)] + [f"many-{i}" for i in range(400)]
    assert [m.partition for m in metadata] == [partition_for_key(k.encode(), 2) for k in keys]
    for partition in (0, 1):
        offsets = [m.offset for m in metadata if m.partition == partition]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # consecutive, in send order


async def test_an_aborted_transaction_fails_parked_records(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 3)
    async with Producer(
        bootstrap_servers=broker.bootstrap_servers, transactional_id=new_topic_name("park"), request_timeout_ms=15000
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        aborted = [await producer.send(topic, b"aborted", key=f"a{i}".encode()) for i in range(50)]
        assert _parked(producer, topic) == 50
        await producer.abort_transaction()
        for future in aborted:
            with pytest.raises(TransactionAbortedError):
                await future
        producer.begin_transaction()
        committed = [await producer.send(topic, b"committed", key=f"c{i}".encode()) for i in range(50)]
        await producer.commit_transaction()
        assert all(f.done() and f.exception() is None for f in committed)
    values = await read_values(broker.bootstrap_servers, topic, 50, "read_committed", partitions=3)
    assert values == [b"committed"] * 50


async def test_a_failed_placement_fails_its_records_and_returns_their_memory(
    broker: RunningBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A placement that raises (here: no memory for a new batch) fails the records not yet
    placed with a KafkaError, gives their memory back, and the producer goes on."""
    await create_topic(broker.bootstrap_servers, topic, 2)
    async with producer_for(broker) as producer:
        await producer.partitions_for(topic)
        futures = [await producer.send(topic, b"v", key=f"k{i}".encode()) for i in range(40)]
        real_new_batch = Accumulator.new_batch
        opened = []

        def new_batch_then_fail(acc: Accumulator, pq: object) -> object:
            if opened:
                raise MemoryError("no room for a batch")
            opened.append(pq)
            return real_new_batch(acc, pq)  # type: ignore[arg-type]

        monkeypatch.setattr(Accumulator, "new_batch", new_batch_then_fail)
        with pytest.raises(MemoryError):
            producer._acc.place_unplaced()
        monkeypatch.undo()
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        delivered = [o for o in outcomes if not isinstance(o, BaseException)]
        assert failed and delivered and all(isinstance(o, KafkaError) for o in failed)
        assert {m.partition for m in delivered} == {opened[0].tp.partition}  # type: ignore[attr-defined]
        assert producer._acc.free == producer._acc.buffer_memory
        after = await producer.send_and_wait(topic, b"after", key=b"another")
    assert after.partition == partition_for_key(b"another", 2)


async def test_records_sent_by_send_batch_queue_behind_parked_ones(broker: RunningBroker, topic: str) -> None:
    """Idempotent: a new topic's first Produce may get NOT_LEADER_OR_FOLLOWER from Kafka, and
    without idempotence a retried batch may land behind a younger one already in flight (as
    Kafka documents for max_in_flight > 1), which this test then took for a queueing error."""
    await create_topic(broker.bootstrap_servers, topic, 3)
    keys = [f"k{i % 40}".encode() for i in range(120)]
    async with producer_for(broker, acks="all") as producer:
        await producer.partitions_for(topic)
        parked = [await producer.send(topic, b"first", key=key) for key in keys]
        assert _parked(producer, topic) == 120
        bulk = await (await producer.send_batch(topic, [b"second"] * 120, keys=keys))
        first = [await f for f in parked]
    for before, after in zip(first, bulk, strict=True):
        assert before.partition == after.partition and before.offset < after.offset


async def test_stop_delivers_parked_records(broker: RunningBroker, topic: str) -> None:
    await create_topic(broker.bootstrap_servers, topic, 4)
    producer = producer_for(broker)
    await producer.start()
    await producer.partitions_for(topic)
    futures = [await producer.send(topic, b"v", key=f"k{i}".encode()) for i in range(300)]
    assert _parked(producer, topic) == 300
    await producer.stop()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(await consume(broker.bootstrap_servers, topic, 300, [0, 1, 2, 3])) == 300


async def test_forgetting_topic_metadata_places_parked_records_first(broker: RunningBroker, topic: str) -> None:
    """A metadata update rebuilds topic states: records parked under the old state are placed
    before any record sent under the new one (keyless ones here, on the same partitions)."""
    await create_topic(broker.bootstrap_servers, topic, 2)
    async with producer_for(broker, linger_ms=5) as producer:
        await producer.partitions_for(topic)
        parked = [await producer.send(topic, b"parked", key=f"k{i}".encode()) for i in range(50)]
        producer._forget_topics()  # what the sender calls after a metadata refresh
        assert _parked(producer, topic) == 0 and topic not in producer._topics
        later = [await producer.send(topic, b"later", partition=p) for p in (0, 1)]
        placed = [await f for f in parked]
        after = [await f for f in later]
    for meta in after:
        assert all(p.offset < meta.offset for p in placed if p.partition == meta.partition)


async def test_a_trickle_of_new_keys_parks_and_places_one_at_a_time(broker: RunningBroker, topic: str) -> None:
    """Each record awaited before the next (the sender places it alone): records whose future
    had a callback while parked and records whose future had none alternate, so emptied
    parking lots are reused and dropped in turn."""
    await create_topic(broker.bootstrap_servers, topic, 3)
    called: list[int] = []
    async with producer_for(broker) as producer:
        await producer.partitions_for(topic)
        metadata = []
        for i in range(30):
            future = await producer.send(topic, str(i).encode(), key=f"trickle-{i}".encode())
            if i % 3 == 0:
                future.add_done_callback(lambda f, i=i: called.append(i))
                metadata.append(await future)
            else:
                await asyncio.sleep(0.01)  # the sender places and sends it; nothing waits on the future
                await producer.flush()
                metadata.append(await future)
    assert [m.partition for m in metadata] == [partition_for_key(f"trickle-{i}".encode(), 3) for i in range(30)]
    assert sorted(called) == list(range(0, 30, 3))


async def test_parked_records_survive_a_broker_crash_exactly_once(broker_min_process: BrokerMinProcess) -> None:
    """Keyed records parked and placed while the broker is down (kill -9), then restarted:
    every record is delivered once, on Java's partition, in send order per partition."""
    topic = new_topic_name("parked-crash")
    await create_topic(broker_min_process.bootstrap_servers, topic, 3)
    settings = {"request_timeout_ms": 3000, "delivery_timeout_ms": 60_000, "retry_backoff_ms": 50}
    async with Producer(
        bootstrap_servers=broker_min_process.bootstrap_servers, acks="all", enable_idempotence=True, **settings
    ) as producer:
        before = [await producer.send(topic, b"before", key=f"b{i}".encode()) for i in range(100)]
        await asyncio.gather(*before)
        broker_min_process.kill()
        during = [await producer.send(topic, f"{i}".encode(), key=f"d{i}".encode()) for i in range(300)]
        await asyncio.sleep(0.5)  # the sender places them and fails to reach the broker
        assert _parked(producer, topic) == 0 and not any(f.done() for f in during)
        await asyncio.to_thread(broker_min_process.restart)
        metadata = [await f for f in during]
    assert [m.partition for m in metadata] == [partition_for_key(f"d{i}".encode(), 3) for i in range(300)]
    records = await consume(broker_min_process.bootstrap_servers, topic, 400, [0, 1, 2])
    assert len({(r.partition, r.offset) for r in records}) == 400
    for partition in range(3):
        stored = [int(r.value) for r in records if r.partition == partition and r.value != b"before"]  # type: ignore[arg-type]
        assert stored == [i for i, m in enumerate(metadata) if m.partition == partition]
