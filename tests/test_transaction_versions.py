"""Transaction versions 1 and 2 (KIP-890) and recovery after a coordinator timeout (KIP-588).

The broker tests run against each broker twice: with the transaction version
the broker advertises ("advertised": 2 on Apache Kafka 4.3, whatever broker_min
finalizes) and with the client limited to version 1 ("v1"), which brokers that
finalize version 2 still accept.  Each asserts the version the producer used
and the epoch behaviour that goes with it: version 2 bumps the epoch at every
EndTxn, version 1 only on fencing or recovery.  One more test runs against a
Kafka formatted with ``transaction.version=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kafkakit import Producer
from kafkakit.errors import KafkaError, ProducerFencedError, TransactionStateError, UnsupportedVersionError
from kafkakit.net.connection import BrokerConnection
from kafkakit.producer.transactions import (
    TransactionState,
    choose_version,
    complete_transaction,
    supported_transaction_version,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

from tests.brokers import KafkaServer, missing_kafka_tools, new_topic_name, split_address
from tests.test_consumer import setup_topic
from tests.test_producer_idempotence import KafkaProxy
from tests.test_transactions import read_values

#: Enough for Kafka (cleanup every 1 s, see tests/brokers.py) and broker_min (every 1 s) to abort it.
_TIMEOUT_MS = 1000
_PAST_TIMEOUT = 3.5


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


@pytest.fixture(params=["advertised", "v1"])
def limit(request: pytest.FixtureRequest) -> int:
    """The highest transaction version the client may pick."""
    return 2 if request.param == "advertised" else 1


async def advertised_version(bootstrap: str) -> int:
    """The transaction version the broker finalizes (ApiVersions v3+ feature), 1 without it."""
    host, port = split_address(bootstrap)
    conn = BrokerConnection(host, port)
    await conn.connect()
    try:
        level = conn.finalized_features.get("transaction.version", 0)
        end_txn_max = conn.broker_api_versions.get(ApiKey.END_TXN, (0, 0))[1]
        return 2 if level >= 2 and end_txn_max >= 5 else 1
    finally:
        await conn.close()


async def started(bootstrap: str, limit: int, **kwargs: Any) -> Producer:
    """A started, initialised transactional producer limited to transaction version ``limit``."""
    kwargs.setdefault("transactional_id", new_topic_name("tv"))
    kwargs.setdefault("request_timeout_ms", 15000)
    kwargs.setdefault("delivery_timeout_ms", 30000)
    producer = Producer(bootstrap_servers=bootstrap, **kwargs)
    await producer.start()
    assert producer._txn is not None
    producer._txn.max_transaction_version = limit
    await producer.init_transactions()
    expected = min(limit, await advertised_version(bootstrap))
    assert producer.transaction_version == expected
    return producer


def producer_id_epoch(producer: Producer) -> tuple[int, int]:
    assert producer._identity is not None
    return producer._identity.producer_id, producer._identity.epoch


def test_version_choice_needs_the_feature_and_the_request_versions() -> None:
    conn = BrokerConnection("127.0.0.1", 9)  # never connected: only its negotiated ranges matter
    conn.broker_api_versions = {
        ApiKey.PRODUCE: (3, 13),
        ApiKey.END_TXN: (0, 5),
        ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    }
    assert supported_transaction_version(conn) == 1  # the feature is not finalized
    conn.finalized_features = {"transaction.version": 2}
    assert supported_transaction_version(conn) == 2
    assert [choose_version(conn, ApiKey.PRODUCE, v) for v in (1, 2)] == [11, 12]  # 13 needs topic ids
    assert [choose_version(conn, ApiKey.END_TXN, v) for v in (1, 2)] == [4, 5]
    assert [choose_version(conn, ApiKey.TXN_OFFSET_COMMIT, v) for v in (1, 2)] == [4, 5]
    conn.broker_api_versions[ApiKey.END_TXN] = (0, 4)
    assert supported_transaction_version(conn) == 1
    with pytest.raises(UnsupportedVersionError):
        choose_version(conn, ApiKey.END_TXN, 2)


async def test_epochs_and_ordering_follow_the_transaction_version(
    bootstrap: str, topic: str, limit: int
) -> None:
    await setup_topic(bootstrap, topic, 2)
    producer = await started(bootstrap, limit)
    try:
        version = producer.transaction_version
        assert version is not None
        for txn in range(3):
            before = producer_id_epoch(producer)
            async with producer.transaction():
                for i in range(50):
                    for p in range(2):
                        await producer.send(topic, b"c%d-p%d-%d" % (txn, p, i), partition=p)
            after = producer_id_epoch(producer)
            if version == 2:
                assert after == (before[0], before[1] + 1), f"EndTxn v5 bumps the epoch: {before} -> {after}"
            else:
                assert after == before
        # An aborted transaction bumps it too in version 2 (and its records never show).
        before = producer_id_epoch(producer)
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted", partition=0)
        await producer.abort_transaction()
        after = producer_id_epoch(producer)
        assert after == ((before[0], before[1] + 1) if version == 2 else before)
        async with producer.transaction():  # sequences restarted at 0 under the new epoch
            await producer.send(topic, b"last", partition=0)
    finally:
        await producer.stop()
    got = await read_values(bootstrap, topic, 301, "read_committed", partitions=2)
    for p in range(2):
        want = [b"c%d-p%d-%d" % (txn, p, i) for txn in range(3) for i in range(50)]
        assert [v for v in got if v.split(b"-")[1:2] == [b"p%d" % p]] == want
    assert b"last" in got and b"aborted" not in got


async def test_offsets_commit_with_each_version(bootstrap: str, topic: str, limit: int) -> None:
    # Version 2 sends TxnOffsetCommit v5 without AddOffsetsToTxn; the offsets apply on commit only.
    from kafkakit import Consumer

    await setup_topic(bootstrap, topic)
    output = new_topic_name("out")
    await setup_topic(bootstrap, output)
    group = new_topic_name("g")
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=bootstrap, acks="all") as feeder:
        for i in range(4):
            await feeder.send(topic, b"in-%d" % i, partition=0)
    producer = await started(bootstrap, limit)
    try:
        async with Consumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
        ) as consumer:
            consumed = 0
            for _ in range(150):
                consumed += sum(len(r) for r in (await consumer.getmany(timeout_ms=200)).values())
                if consumed >= 4:
                    break
            assert consumed == 4
            meta = consumer.group_metadata()
            producer.begin_transaction()
            await producer.send(output, b"aborted", partition=0)
            await producer.send_offsets_to_transaction({tp: 1}, meta)
            await producer.abort_transaction()
            assert await consumer.committed(tp) is None
            async with producer.transaction():
                await producer.send(output, b"committed", partition=0)
                await producer.send_offsets_to_transaction({tp: 4}, meta)
            for _ in range(50):
                if await consumer.committed(tp) == 4:
                    break
                await asyncio.sleep(0.1)
            assert await consumer.committed(tp) == 4
    finally:
        await producer.stop()
    assert await read_values(bootstrap, output, 1, "read_committed") == [b"committed"]


async def test_two_phase_handles_carry_their_version(bootstrap: str, topic: str, limit: int) -> None:
    await setup_topic(bootstrap, topic)
    producer = await started(bootstrap, limit)
    try:
        producer.begin_transaction()
        await producer.send(topic, b"prepared", partition=0)
        handle = await producer.prepare_transaction()
        assert handle.transaction_version == producer.transaction_version
        await complete_transaction(bootstrap, handle, commit=True)
        # A repeated commit (a retry whose first response was lost) is acknowledged again...
        await complete_transaction(bootstrap, handle, commit=True)
        # ...but completing it the other way must fail, never pass silently.
        with pytest.raises(KafkaError):
            await complete_transaction(bootstrap, handle, commit=False)
        producer.forget_prepared_transaction()
        async with producer.transaction():  # version 2: continues under the epoch the completer bumped
            await producer.send(topic, b"after", partition=0)
        if producer.transaction_version == 2:
            assert producer_id_epoch(producer)[1] >= handle.producer_epoch + 2
    finally:
        await producer.stop()
    assert await read_values(bootstrap, topic, 2, "read_committed") == [b"prepared", b"after"]


async def test_aborted_handle_cannot_be_committed(bootstrap: str, topic: str, limit: int) -> None:
    await setup_topic(bootstrap, topic)
    producer = await started(bootstrap, limit)
    try:
        producer.begin_transaction()
        await producer.send(topic, b"doomed", partition=0)
        handle = await producer.prepare_transaction()
        await complete_transaction(bootstrap, handle, commit=False)
        await complete_transaction(bootstrap, handle, commit=False)  # repeated: fine
        with pytest.raises(KafkaError):
            await complete_transaction(bootstrap, handle, commit=True)
        producer.forget_prepared_transaction()
        async with producer.transaction():
            await producer.send(topic, b"kept", partition=0)
    finally:
        await producer.stop()
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"kept"]


async def test_prepared_transaction_timed_out_cannot_be_committed(
    bootstrap: str, topic: str, limit: int
) -> None:
    await setup_topic(bootstrap, topic)
    producer = await started(bootstrap, limit, transaction_timeout_ms=_TIMEOUT_MS)
    try:
        producer.begin_transaction()
        await producer.send(topic, b"too-late", partition=0)
        handle = await producer.prepare_transaction()
        await asyncio.sleep(_PAST_TIMEOUT)  # the coordinator aborts it
        with pytest.raises(KafkaError):
            await complete_transaction(bootstrap, handle, commit=True)
    finally:
        await producer.stop()
    async with Producer(bootstrap_servers=bootstrap, acks="all") as plain:
        await plain.send_and_wait(topic, b"marker", partition=0)
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"marker"]


async def test_lost_end_txn_responses_are_retried(bootstrap: str, topic: str, limit: int) -> None:
    # The coordinator ended the transaction but the client never heard: the retry
    # (same epoch) must be acknowledged, and with version 2 return the bumped epoch.
    await setup_topic(bootstrap, topic)
    async with KafkaProxy(bootstrap, drop_end_txn=lambda n: n in (1, 3)) as proxy:
        producer = await started(proxy.bootstrap_servers, limit, retry_backoff_ms=20)
        try:
            version = producer.transaction_version
            for txn, commit in enumerate((True, False, True)):
                before = producer_id_epoch(producer)
                producer.begin_transaction()
                await producer.send_and_wait(topic, b"t%d" % txn, partition=0)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
                after = producer_id_epoch(producer)
                assert after == ((before[0], before[1] + 1) if version == 2 else before)
        finally:
            await producer.stop()
        assert proxy.dropped == 2
    assert await read_values(bootstrap, topic, 2, "read_committed") == [b"t0", b"t2"]


# -- KIP-588: a transaction the coordinator aborted on timeout is recoverable -----------------


@pytest.mark.parametrize("notice", ["commit", "send", "abort"])
async def test_recovers_after_the_coordinator_aborts_on_timeout(
    bootstrap: str, topic: str, limit: int, notice: str
) -> None:
    await setup_topic(bootstrap, topic)
    producer = await started(bootstrap, limit, transaction_timeout_ms=_TIMEOUT_MS)
    try:
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"timed-out", partition=0)
        before = producer_id_epoch(producer)
        await asyncio.sleep(_PAST_TIMEOUT)  # the coordinator aborts it and bumps the epoch
        if notice == "commit":
            with pytest.raises(TransactionStateError, match="aborted"):
                await producer.commit_transaction()
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        elif notice == "send":
            with pytest.raises(KafkaError):
                await producer.send_and_wait(topic, b"after-timeout", partition=0)
            with pytest.raises(TransactionStateError):
                await producer.commit_transaction()
        await producer.abort_transaction()  # not fenced: continues with a newer epoch
        assert producer.transaction_state is TransactionState.READY
        after = producer_id_epoch(producer)
        assert after[0] == before[0] and after[1] > before[1], (before, after)
        async with producer.transaction():
            for i in range(3):
                await producer.send(topic, b"next-%d" % i, partition=0)
    finally:
        await producer.stop()
    assert await read_values(bootstrap, topic, 3, "read_committed") == [b"next-%d" % i for i in range(3)]


async def test_fenced_after_a_timeout_by_a_newer_instance_stays_fatal(
    bootstrap: str, topic: str, limit: int
) -> None:
    await setup_topic(bootstrap, topic)
    transactional_id = new_topic_name("tvz")
    producer = await started(
        bootstrap, limit, transactional_id=transactional_id, transaction_timeout_ms=_TIMEOUT_MS
    )
    try:
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"zombie", partition=0)
        await asyncio.sleep(_PAST_TIMEOUT)
        successor = await started(bootstrap, limit, transactional_id=transactional_id)
        try:
            with pytest.raises(ProducerFencedError):
                await producer.abort_transaction()
            assert producer.transaction_state is TransactionState.FATAL
            with pytest.raises(ProducerFencedError):
                producer.begin_transaction()
            async with successor.transaction():
                await successor.send(topic, b"successor", partition=0)
        finally:
            await successor.stop()
    finally:
        await producer.stop()
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"successor"]


async def test_abort_after_a_produce_that_never_reached_the_broker(
    bootstrap: str, topic: str, limit: int
) -> None:
    # With version 2 the partition joins the transaction only when the broker gets the
    # Produce: here it never does, so the coordinator has nothing to abort.
    await setup_topic(bootstrap, topic)
    invalid_record = 87  # answered by the proxy in the broker's place; not retriable
    async with KafkaProxy(bootstrap, reject_produce=lambda n: invalid_record if n == 1 else 0) as proxy:
        producer = await started(proxy.bootstrap_servers, limit)
        try:
            producer.begin_transaction()
            with pytest.raises(KafkaError):
                await producer.send_and_wait(topic, b"rejected", partition=0)
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"accepted", partition=0)
        finally:
            await producer.stop()
        assert proxy.rejected == 1
    assert await read_values(bootstrap, topic, 1, "read_committed") == [b"accepted"]


@pytest.mark.parametrize("code", [59, 47], ids=["UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_EPOCH"])
async def test_abortable_producer_errors_recover_with_a_new_epoch(
    bootstrap: str, topic: str, limit: int, code: int
) -> None:
    # KIP-360: a transactional batch refused with UNKNOWN_PRODUCER_ID or INVALID_PRODUCER_EPOCH
    # (answered by the proxy in the broker's place) makes the transaction abortable, not fatal;
    # after abort_transaction() the producer goes on under a new epoch, numbering from 0.
    await setup_topic(bootstrap, topic, 2)
    armed: list[int] = []  # the next Produce request is refused while this holds a code
    async with KafkaProxy(bootstrap, reject_produce=lambda n: armed.pop() if armed else 0) as proxy:
        producer = await started(proxy.bootstrap_servers, limit, retry_backoff_ms=20)
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"a-0", partition=0)
                await producer.send_and_wait(topic, b"a-1", partition=1)
            before = producer_id_epoch(producer)
            producer.begin_transaction()
            armed.append(code)
            with pytest.raises(KafkaError):
                await producer.send_and_wait(topic, b"refused", partition=0)
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            await producer.abort_transaction()
            assert producer.transaction_state is TransactionState.READY
            after = producer_id_epoch(producer)
            assert after[0] == before[0] and after[1] > before[1], (before, after)
            async with producer.transaction():
                for i in range(20):
                    for p in range(2):
                        await producer.send(topic, b"b-%d-%d" % (p, i), partition=p)
        finally:
            await producer.stop()
        assert proxy.rejected == 1
    got = await read_values(bootstrap, topic, 42, "read_committed", partitions=2)
    assert b"refused" not in got
    for p in range(2):
        assert [v for v in got if v.startswith(b"b-%d-" % p)] == [b"b-%d-%d" % (p, i) for i in range(20)]


# -- a Kafka formatted with transaction version 1 ------------------------------------------


@pytest.fixture(scope="module")
def kafka_tv1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """Apache Kafka formatted with ``--feature transaction.version=1`` (its default is 2)."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    server = KafkaServer(tmp_path_factory.mktemp("kafka-tv1"), features={"transaction.version": 1})
    server.start()
    yield server
    server.stop()


async def test_kafka_finalizing_version_1_gets_version_1(kafka_tv1: KafkaServer, topic: str) -> None:
    bootstrap = kafka_tv1.bootstrap_servers
    assert await advertised_version(bootstrap) == 1
    await setup_topic(bootstrap, topic)
    producer = await started(bootstrap, 2)  # asserts transaction_version == 1
    try:
        epoch = producer_id_epoch(producer)
        async with producer.transaction():
            await producer.send(topic, b"v1-committed", partition=0)
        producer.begin_transaction()
        await producer.send(topic, b"v1-prepared", partition=0)
        handle = await producer.prepare_transaction()
        assert handle.transaction_version == 1
        for _ in range(2):
            await complete_transaction(bootstrap, handle, commit=True)
        producer.forget_prepared_transaction()
        assert producer_id_epoch(producer) == epoch  # version 1: EndTxn keeps the epoch
    finally:
        await producer.stop()
    assert await read_values(bootstrap, topic, 2, "read_committed") == [b"v1-committed", b"v1-prepared"]
