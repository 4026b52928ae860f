"""The transactional producer end to end, against Apache Kafka and broker_min.

Committed transactions are visible to read_committed consumers and aborted ones
never; read_uncommitted sees both; a zombie with the same transactional id is
fenced; consumer offsets sent in a transaction apply only when it commits; the
two-phase API lets another process commit a prepared transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from typing import Any

import pytest
from kafkakit import Consumer, Producer
from kafkakit.errors import CommitFailedError, ProducerFencedError, TransactionStateError
from kafkakit.producer.transactions import TransactionHandle, TransactionState, complete_transaction
from kafkakit.structs import TopicPartition

from tests.brokers import new_topic_name
from tests.test_consumer import consumer_for, setup_topic
from tests.test_producer_idempotence import KafkaProxy


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


def txn_producer(bootstrap: str, **kwargs: Any) -> Producer:
    kwargs.setdefault("transactional_id", new_topic_name("txn"))
    kwargs.setdefault("request_timeout_ms", 15000)
    kwargs.setdefault("delivery_timeout_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, **kwargs)


async def read_values(
    bootstrap: str, topic: str, count: int, isolation_level: str, partitions: int = 1, timeout: float = 20
) -> list[bytes]:
    """Exactly ``count`` values of ``topic`` (then checks nothing more arrives)."""
    async with consumer_for(bootstrap, isolation_level=isolation_level) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"{isolation_level}: got {out}, wanted {count} values"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(r.value for r in records)
        extra = await consumer.getmany(timeout_ms=500)
        assert extra == {}, f"{isolation_level}: unexpected records {extra}"
        return out


# -- pure checks -------------------------------------------------------------------------


def test_transaction_handle_round_trips_through_json() -> None:
    handle = TransactionHandle("tid", 1234, 5, 1, "127.0.0.1", 9092)
    assert TransactionHandle.from_json(handle.to_json()) == handle
    with pytest.raises(ValueError):
        TransactionHandle.from_json("[1, 2]")


async def test_transactional_calls_need_a_transactional_id() -> None:
    producer = Producer(bootstrap_servers="localhost:1")
    assert producer.transaction_state is None
    with pytest.raises(Exception, match="transactional_id"):
        await producer.init_transactions()


# -- against a broker ------------------------------------------------------------------------


async def test_read_committed_sees_committed_transactions_only(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with txn_producer(bootstrap) as producer:
        with pytest.raises(TransactionStateError):
            await producer.send(topic, b"x")  # not initialised
        await producer.init_transactions()
        with pytest.raises(TransactionStateError):
            await producer.send(topic, b"x")  # no transaction begun
        producer.begin_transaction()
        for value in (b"c0", b"c1"):
            await producer.send(topic, value, partition=0)
        await producer.commit_transaction()
        producer.begin_transaction()
        for value in (b"a0", b"a1"):
            await producer.send(topic, value, partition=0)
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"c2", partition=0)
        assert producer.transaction_state is TransactionState.READY
    assert await read_values(bootstrap, topic, 3, "read_committed") == [b"c0", b"c1", b"c2"]
    assert await read_values(bootstrap, topic, 5, "read_uncommitted") == [b"c0", b"c1", b"a0", b"a1", b"c2"]


async def test_read_committed_drops_interleaved_aborts_in_first_offset_order(bootstrap: str, topic: str) -> None:
    """Aborted transactions are matched in first-offset order, not producer-id order.

    The producer with the lower id aborts the later transaction: a consumer that
    walked the aborted list by producer id handed the earlier transaction's
    records to the application.
    """
    await setup_topic(bootstrap, topic)
    async with txn_producer(bootstrap) as low, txn_producer(bootstrap) as high, txn_producer(bootstrap) as clean:
        await low.init_transactions()
        await high.init_transactions()
        await clean.init_transactions()
        assert low._identity is not None and high._identity is not None
        assert low._identity.producer_id < high._identity.producer_id
        high.begin_transaction()
        await (await high.send(topic, b"high-aborted", partition=0))
        low.begin_transaction()
        await (await low.send(topic, b"low-aborted", partition=0))
        await high.abort_transaction()
        await low.abort_transaction()
        async with clean.transaction():
            await clean.send(topic, b"committed", partition=0)
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"committed"]
    assert sorted(await read_values(bootstrap, topic, 3, "read_uncommitted")) == [
        b"committed",
        b"high-aborted",
        b"low-aborted",
    ]


async def test_transaction_context_aborts_on_exception(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    async with txn_producer(bootstrap) as producer:
        await producer.init_transactions()
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                await producer.send(topic, b"lost-0", partition=0)
                await producer.send(topic, b"lost-1", partition=1)
                await producer.flush()
                raise RuntimeError("boom")
        assert producer.transaction_state is TransactionState.READY
        async with producer.transaction():
            result = await producer.send_batch(topic, [b"kept-%d" % i for i in range(100)], partition=1)
        assert len(await result) == 100
    assert await read_values(bootstrap, topic, 100, "read_committed", partitions=2) == [
        b"kept-%d" % i for i in range(100)
    ]


async def test_zombie_producer_is_fenced(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    transactional_id = new_topic_name("zombie")
    async with txn_producer(bootstrap, transactional_id=transactional_id) as zombie:
        await zombie.init_transactions()
        zombie.begin_transaction()
        await zombie.send_and_wait(topic, b"from-zombie", partition=0)
        async with txn_producer(bootstrap, transactional_id=transactional_id) as successor:
            await successor.init_transactions()  # aborts the zombie's open transaction
            with pytest.raises(ProducerFencedError):
                await zombie.commit_transaction()
            assert zombie.transaction_state is TransactionState.FATAL
            with pytest.raises(ProducerFencedError):
                zombie.begin_transaction()  # fatal for good
            with pytest.raises(ProducerFencedError):
                await zombie.send(topic, b"again")
            async with successor.transaction():
                await successor.send(topic, b"from-successor", partition=0)
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"from-successor"]


async def committed_eventually(consumer: Consumer, tp: TopicPartition, want: int | None) -> int | None:
    """The committed offset, polled briefly: the broker applies it with the commit marker."""
    deadline = time.monotonic() + 10
    while True:
        got = await consumer.committed(tp)
        if got == want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


async def test_send_offsets_to_transaction_commits_offsets_only_on_commit(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    output = new_topic_name("out")
    await setup_topic(bootstrap, output)
    group = new_topic_name("g")
    tp = TopicPartition(topic, 0)
    async with txn_producer(bootstrap) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(10):
                await producer.send(topic, b"in-%d" % i, partition=0)
        async with Consumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
        ) as consumer:
            deadline = time.monotonic() + 30
            consumed: list[bytes] = []
            while len(consumed) < 10:
                assert time.monotonic() < deadline, "the group consumer got no records"
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    consumed.extend(r.value for r in records)
            producer.begin_transaction()
            await producer.send(output, b"out-aborted", partition=0)
            await producer.send_offsets_to_transaction({tp: 3}, consumer.group_metadata())
            await producer.abort_transaction()
            await asyncio.sleep(0.5)  # give the coordinator time to (wrongly) apply them
            assert await consumer.committed(tp) is None
            async with producer.transaction():
                await producer.send(output, b"out-committed", partition=0)
                await producer.send_offsets_to_transaction({tp: 10}, consumer.group_metadata())
            assert await committed_eventually(consumer, tp, 10) == 10
            # KIP-447: offsets from a consumer generation that is no longer current are refused.
            current = consumer.group_metadata()
            stale = dataclasses.replace(current, generation_id=current.generation_id + 7)
            producer.begin_transaction()
            with pytest.raises(CommitFailedError):
                await producer.send_offsets_to_transaction({tp: 2}, stale)
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            with pytest.raises(TransactionStateError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert await consumer.committed(tp) == 10
    assert await read_values(bootstrap, output, 1, "read_committed") == [b"out-committed"]


async def test_prepared_transaction_is_committed_by_another_process(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    async with txn_producer(bootstrap) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            await producer.send(topic, b"two-phase-%d" % i, partition=0)
        handle = await producer.prepare_transaction()
        assert handle.producer_id >= 0 and handle.transaction_version == producer.transaction_version
        with pytest.raises(TransactionStateError):
            await producer.send(topic, b"late")  # prepared: nothing more may join
        code = (
            "import asyncio, sys\n"
            "from kafkakit.producer.transactions import TransactionHandle, complete_transaction\n"
            "handle = TransactionHandle.from_json(sys.argv[2])\n"
            "asyncio.run(complete_transaction(sys.argv[1], handle, commit=True))\n"
        )
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, bootstrap, handle.to_json()
        )
        assert await asyncio.wait_for(process.wait(), 60) == 0
        producer.forget_prepared_transaction()
        # The same producer goes on with a transaction that a second completer aborts.
        producer.begin_transaction()
        await producer.send(topic, b"aborted-elsewhere", partition=0)
        handle = await producer.prepare_transaction()
        await complete_transaction(bootstrap, handle, commit=False)
        producer.forget_prepared_transaction()
    assert await read_values(bootstrap, topic, 5, "read_committed") == [b"two-phase-%d" % i for i in range(5)]


async def test_complete_transaction_after_a_newer_instance_is_fenced(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    transactional_id = new_topic_name("handoff")
    async with txn_producer(bootstrap, transactional_id=transactional_id) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, b"orphan", partition=0)
        handle = await producer.prepare_transaction()
    async with txn_producer(bootstrap, transactional_id=transactional_id) as successor:
        await successor.init_transactions()  # aborts the prepared transaction
    with pytest.raises(ProducerFencedError):
        await complete_transaction(bootstrap, handle, commit=True)


async def test_lost_produce_responses_inside_transactions_leave_no_duplicates(
    bootstrap: str, topic: str
) -> None:
    await setup_topic(bootstrap, topic, 2)
    drops = {2, 3, 5, 6, 9, 11, 17}
    async with KafkaProxy(bootstrap, drop_produce=lambda n: n in drops) as proxy:
        async with txn_producer(
            proxy.bootstrap_servers, max_batch_size=300, max_request_size=1500, retry_backoff_ms=20
        ) as producer:
            await producer.init_transactions()
            for txn in range(4):
                async with producer.transaction():
                    for i in range(100):
                        for p in range(2):
                            await producer.send(topic, b"t%d-p%d-%d" % (txn, p, i), partition=p)
                        if i % 20 == 0:
                            await asyncio.sleep(0)
        assert proxy.dropped >= 3, f"only {proxy.dropped} Produce responses were dropped"
    got = await read_values(bootstrap, topic, 800, "read_committed", partitions=2)
    for p in range(2):
        want = [b"t%d-p%d-%d" % (txn, p, i) for txn in range(4) for i in range(100)]
        assert [v for v in got if v.split(b"-")[1] == b"p%d" % p] == want
