"""kafkakit.ShareConsumer (KIP-932 share groups) against broker_min and Apache Kafka 4.3.1.

Each test uses its own topic and share group; group configs (``share.auto.offset.reset``,
``share.record.lock.duration.ms``, ``share.delivery.count.limit``) are set through
``Admin.incremental_alter_configs(resource_type="group")`` as with Kafka's tools. The Kafka
fixture (tests/brokers.py) heartbeats share members every second and allows 1 s locks.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
from kafkakit import (
    AcknowledgeType,
    Admin,
    NewTopic,
    Producer,
    ShareConsumer,
    ShareGroupsNotSupportedError,
    TopicPartition,
)
from kafkakit.broker.local_cluster import LocalCluster
from kafkakit.errors import IllegalStateError, KafkaError

from tests.brokers import RunningBroker, new_topic_name
from tests.security_env import SecureBrokerMin, client_config


async def _setup(bootstrap: str, group: str, *, partitions: int = 1, **configs: str) -> str:
    """A new topic, and ``group``'s configs (share.auto.offset.reset=earliest plus ``configs``)."""
    topic = new_topic_name("share")
    changes = {"share.auto.offset.reset": ("set", "earliest")}
    changes.update({name.replace("_", "."): ("set", value) for name, value in configs.items()})
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
        await admin.incremental_alter_configs(group, changes, resource_type="group")  # type: ignore[arg-type]
    return topic


async def _produce(bootstrap: str, topic: str, values: list[bytes], *, batch: int = 1000) -> None:
    """``values`` in batches of ``batch`` records (each batch flushed before the next)."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for start in range(0, len(values), batch):
            for value in values[start : start + batch]:
                await producer.send(topic, value, partition=0)
            await producer.flush()


def _flat(records: dict[TopicPartition, list[Any]]) -> list[Any]:
    return [r for batch in records.values() for r in batch]


async def _poll_until(consumer: ShareConsumer, wanted: int, *, timeout: float = 20.0, ack: Any = None) -> list[Any]:
    """Records from ``consumer`` until ``wanted`` arrived (``ack(record)`` acknowledges each in explicit mode)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < wanted and time.monotonic() < deadline:
        for record in _flat(await consumer.getmany(timeout_ms=500)):
            got.append(record)
            if ack is not None:
                consumer.acknowledge(record, ack(record))
    return got


def _all_delivered(offset: Any, end: int) -> bool:
    return offset is not None and (offset.start_offset == end or offset.lag == 0)


def _consumer(bootstrap: str, group: str, topic: str, **settings: Any) -> ShareConsumer:
    return ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **settings)


async def test_four_consumers_on_one_partition_all_receive(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-four")
    topic = await _setup(bootstrap, group)
    consumers = [_consumer(bootstrap, group, topic, max_poll_records=5) for _ in range(4)]
    for consumer in consumers:
        await consumer.start()
    try:
        # Everyone joined (and got the partition) before the records exist.
        deadline = time.monotonic() + 20
        while not all(c.assignment() for c in consumers) and time.monotonic() < deadline:
            await asyncio.gather(*(c.getmany(timeout_ms=200) for c in consumers))
        assert all(c.assignment() == {TopicPartition(topic, 0)} for c in consumers)
        total = 200
        await _produce(bootstrap, topic, [b"job-%d" % i for i in range(total)], batch=5)
        received: dict[int, list[int]] = {i: [] for i in range(4)}
        done = asyncio.Event()

        async def work(index: int, consumer: ShareConsumer) -> None:
            end = time.monotonic() + 30
            while not done.is_set() and time.monotonic() < end:
                records = _flat(await consumer.getmany(timeout_ms=200))
                received[index].extend(r.offset for r in records)
                if records:
                    await asyncio.sleep(0.02)  # "processing": the others get their turn
                if sum(map(len, received.values())) >= total:
                    done.set()

        await asyncio.gather(*(work(i, c) for i, c in enumerate(consumers)))
        every = [offset for offsets in received.values() for offset in offsets]
        assert sorted(every) == list(range(total))  # each record to exactly one member
        assert all(received[i] for i in range(4)), {i: len(o) for i, o in received.items()}
    finally:
        await asyncio.gather(*(c.stop() for c in consumers))


async def test_release_redelivers_and_reject_archives(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-release")
    topic = await _setup(bootstrap, group)
    await _produce(bootstrap, topic, [b"release-me", b"reject-me", b"accept-me"])
    results: list[Any] = []
    async with _consumer(
        bootstrap, group, topic, share_acknowledgement_mode="explicit", acknowledgement_commit_callback=results.append
    ) as consumer:
        kinds = {b"release-me": AcknowledgeType.RELEASE, b"reject-me": AcknowledgeType.REJECT}
        first = await _poll_until(consumer, 3, ack=lambda r: kinds.get(r.value, AcknowledgeType.ACCEPT))
        assert [(r.value, r.delivery_count) for r in first] == [
            (b"release-me", 1),
            (b"reject-me", 1),
            (b"accept-me", 1),
        ]
        again = await _poll_until(consumer, 1, ack=lambda r: AcknowledgeType.ACCEPT)
        assert [(r.value, r.offset, r.delivery_count) for r in again] == [(b"release-me", 0, 2)]
        committed = await consumer.commit_sync()
        assert committed[TopicPartition(topic, 0)].offsets == (0,)
        assert committed[TopicPartition(topic, 0)].error is None
        # The rejected record is never delivered again, nor anything else.
        assert _flat(await consumer.getmany(timeout_ms=1500)) == []
    # The callback saw every acknowledgement answered, without errors.
    acked = sorted(o for result in results for r in result.values() for o in r.offsets)
    assert acked == [0, 0, 1, 2] and all(r.error is None for result in results for r in result.values())


async def test_explicit_mode_requires_every_record_acknowledged(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-explicit")
    topic = await _setup(bootstrap, group)
    await _produce(bootstrap, topic, [b"a", b"b"])
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as consumer:
        records = await _poll_until(consumer, 2)
        consumer.acknowledge(records[0])
        with pytest.raises(IllegalStateError, match="acknowledge every record"):
            await consumer.getmany(timeout_ms=100)
        with pytest.raises(IllegalStateError, match="not held"):
            consumer.acknowledge(records[0])  # already acknowledged
        consumer.acknowledge(records[1], AcknowledgeType.ACCEPT)
        assert _flat(await consumer.getmany(timeout_ms=500)) == []
    async with _consumer(bootstrap, group + "-implicit", topic) as implicit:
        with pytest.raises(IllegalStateError, match="explicit"):
            implicit.acknowledge(records[0])


async def test_stopped_consumer_releases_its_records(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-stop")
    topic = await _setup(bootstrap, group)
    await _produce(bootstrap, topic, [b"x%d" % i for i in range(5)])
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as first:
        held = await _poll_until(first, 5)
        assert {r.delivery_count for r in held} == {1}
    # stop() acknowledged nothing: closing the share session released the records.
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as second:
        again = await _poll_until(second, 5, ack=lambda r: AcknowledgeType.ACCEPT)
    assert sorted(r.offset for r in again) == [r.offset for r in held]
    assert {r.delivery_count for r in again} == {2}


async def test_stop_releases_records_acquired_by_a_fetch_in_flight(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-inflight")
    topic = await _setup(bootstrap, group)
    first = _consumer(bootstrap, group, topic, fetch_max_wait_ms=5000)
    await first.start()
    deadline = time.monotonic() + 20
    while not first.assignment() and time.monotonic() < deadline:
        assert _flat(await first.getmany(timeout_ms=200)) == []
    assert _flat(await first.getmany(timeout_ms=100)) == []  # leaves a ShareFetch long-polling
    await _produce(bootstrap, topic, [b"f0", b"f1"])
    started = time.monotonic()
    await first.stop()  # never handed out: released, not held until the 30 s lock times out
    assert time.monotonic() - started < 7  # the fetch's answer, not its 5 s wait plus a margin
    async with _consumer(bootstrap, group, topic) as second:
        again = await _poll_until(second, 2, timeout=10)
    assert sorted(r.value for r in again) == [b"f0", b"f1"]


async def test_records_of_a_partition_no_longer_assigned_can_still_be_acknowledged(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-moved")
    topic = await _setup(bootstrap, group)
    other = new_topic_name("share")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(other, 1, 1)])
    await _produce(bootstrap, topic, [b"m0", b"m1"])
    results: list[Any] = []
    async with _consumer(
        bootstrap, group, topic, share_acknowledgement_mode="explicit", acknowledgement_commit_callback=results.append
    ) as consumer:
        held = await _poll_until(consumer, 2)
        consumer.subscribe([other])
        deadline = time.monotonic() + 20
        while consumer.assignment() != {TopicPartition(other, 0)} and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for record in held:
            consumer.acknowledge(record, AcknowledgeType.ACCEPT)
        assert _flat(await consumer.getmany(timeout_ms=1000)) == []  # sends them (ShareAcknowledge)
    answered = [r for result in results for r in result.values() if r.partition.topic == topic]
    assert [(r.offsets, r.error) for r in answered] == [((0, 1), None)]
    async with _consumer(bootstrap, group, topic) as later:  # accepted: never delivered again
        deadline = time.monotonic() + 20
        while not later.assignment() and time.monotonic() < deadline:
            assert _flat(await later.getmany(timeout_ms=200)) == []
        assert later.assignment() and _flat(await later.getmany(timeout_ms=1000)) == []


_KILLED_WORKER = """
import asyncio, sys
from kafkakit import ShareConsumer

async def main(bootstrap, group, topic):
    consumer = ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             share_acknowledgement_mode="explicit")
    await consumer.start()
    got = 0
    while got < 3:
        got += sum(len(b) for b in (await consumer.getmany(timeout_ms=500)).values())
    print("acquired", got, flush=True)
    await asyncio.sleep(60)  # killed here, holding its records

asyncio.run(main(*sys.argv[1:]))
"""


async def test_killed_consumer_records_return_after_the_lock_timeout(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-killed")
    topic = await _setup(bootstrap, group, share_record_lock_duration_ms="2000")
    await _produce(bootstrap, topic, [b"k0", b"k1", b"k2"])
    worker = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WORKER, bootstrap, group, topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert worker.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 30)
        assert line.strip() == "acquired 3"
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    killed_at = time.monotonic()
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as survivor:
        again = await _poll_until(survivor, 3, ack=lambda r: AcknowledgeType.ACCEPT)
    assert sorted(r.value for r in again) == [b"k0", b"k1", b"k2"]
    assert {r.delivery_count for r in again} == {2}
    assert time.monotonic() - killed_at < 15  # the 2 s lock, not the 45 s session timeout


async def test_delivery_count_limit_archives_a_poison_record(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-poison")
    topic = await _setup(bootstrap, group, share_delivery_count_limit="3")
    await _produce(bootstrap, topic, [b"poison", b"fine"])
    deliveries: Counter[bytes] = Counter()
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as consumer:
        deadline = time.monotonic() + 20
        quiet_since = float("inf")  # until the first delivery
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 1.5:
            records = _flat(await consumer.getmany(timeout_ms=300))
            if records:
                quiet_since = time.monotonic()
            for record in records:
                deliveries[record.value] += 1
                assert record.delivery_count == deliveries[record.value]
                poison = record.value == b"poison"
                consumer.acknowledge(record, AcknowledgeType.RELEASE if poison else AcknowledgeType.ACCEPT)
    assert deliveries == {b"poison": 3, b"fine": 1}


async def test_renew_keeps_a_slow_record_locked(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-renew")
    topic = await _setup(bootstrap, group, share_record_lock_duration_ms="1500")
    await _produce(bootstrap, topic, [b"slow", b"too-slow"])
    async with _consumer(bootstrap, group, topic, share_acknowledgement_mode="explicit") as consumer:
        slow, too_slow = await _poll_until(consumer, 2)
        for _ in range(3):  # 3 s of work on a 1.5 s lock, renewed every second
            await asyncio.sleep(1.0)
            consumer.acknowledge(slow, AcknowledgeType.RENEW)
            renewed = await consumer.commit_sync()
            assert renewed[TopicPartition(topic, 0)].error is None
        consumer.acknowledge(slow, AcknowledgeType.ACCEPT)
        accepted = (await consumer.commit_sync())[TopicPartition(topic, 0)]
        consumer.acknowledge(too_slow, AcknowledgeType.ACCEPT)  # its lock expired meanwhile
        refused = (await consumer.commit_sync())[TopicPartition(topic, 0)]
    assert (accepted.offsets, accepted.error) == ((0,), None)
    assert refused.offsets == (1,) and type(refused.error).__name__ == "InvalidRecordStateError"


async def test_async_for_and_commit_async(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-iter")
    topic = await _setup(bootstrap, group)
    await _produce(bootstrap, topic, [b"i%d" % i for i in range(10)])
    results: list[Any] = []
    async with _consumer(
        bootstrap, group, topic, share_acknowledgement_mode="explicit", acknowledgement_commit_callback=results.append
    ) as consumer:
        seen = []
        async for record in consumer:
            consumer.acknowledge(record)
            seen.append(record.value)
            if len(seen) == 10:
                break
        answered = await consumer.commit_async()
    assert seen == [b"i%d" % i for i in range(10)]
    assert sorted(answered[TopicPartition(topic, 0)].offsets) == list(range(10))
    assert results and results[-1][TopicPartition(topic, 0)].error is None


async def test_admin_describe_list_delete_and_offsets(broker: RunningBroker) -> None:
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-admin")
    topic = await _setup(bootstrap, group)
    await _produce(bootstrap, topic, [b"o%d" % i for i in range(6)])
    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap_servers=bootstrap) as admin:
        async with _consumer(bootstrap, group, topic, client_id="admin-test") as consumer:
            assert len(await _poll_until(consumer, 6)) == 6
            await consumer.commit_sync()  # implicit mode: accepts the six
            (described,) = await admin.describe_share_groups([group])
            assert described.state == "Stable"
            (member,) = described.members
            assert member.member_id == consumer.member_id and member.client_id == "admin-test"
            assert member.assignment == (tp,)
            assert group in {g.group_id for g in await admin.list_share_groups()}
            assert group not in {g.group_id for g in await admin.list_groups() if g.protocol_type == "consumer"}
            # Every record is delivered: Kafka 4.3 reports that as lag 0 (its start offset may stay).
            deadline = time.monotonic() + 10
            while not _all_delivered((await admin.describe_share_group_offsets(group)).get(tp), 6):
                assert time.monotonic() < deadline, await admin.describe_share_group_offsets(group)
                await asyncio.sleep(0.2)
        (empty,) = await admin.describe_share_groups([group])
        assert empty.state == "Empty" and empty.members == ()
        # An empty group's start offset can move back: records 2.. are delivered again.
        await admin.alter_share_group_offsets(group, {tp: 2})
        assert (await admin.describe_share_group_offsets(group, [tp]))[tp].start_offset == 2
        async with _consumer(bootstrap, group, topic) as consumer:
            again = await _poll_until(consumer, 4)
            assert [r.offset for r in again] == [2, 3, 4, 5]
        await admin.delete_share_group_offsets(group, [topic])
        assert tp not in await admin.describe_share_group_offsets(group)
        await admin.delete_share_groups([group])
        assert group not in {g.group_id for g in await admin.list_share_groups()}
        (gone,) = await admin.describe_share_groups([group])
        assert gone.state == "Dead"


async def test_confluent_kafka_share_consumer_shares_the_group(broker: RunningBroker) -> None:
    """A librdkafka share consumer and a kafkakit one in one group split the records between them."""
    ck = pytest.importorskip("confluent_kafka")
    if not hasattr(ck, "ShareConsumer"):
        pytest.skip(f"confluent-kafka {ck.version()[0]} has no ShareConsumer")
    bootstrap = broker.bootstrap_servers
    group = new_topic_name("sg-interop")
    topic = await _setup(bootstrap, group)
    theirs = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    theirs.subscribe([topic])
    ours = _consumer(bootstrap, group, topic, max_poll_records=5)
    await ours.start()
    try:
        # Both members joined before the records exist.
        deadline = time.monotonic() + 20
        while not ours.assignment() and time.monotonic() < deadline:
            await ours.getmany(timeout_ms=200)
            await asyncio.to_thread(theirs.poll, 0.2)
        total = 100
        await _produce(bootstrap, topic, [b"m%d" % i for i in range(total)], batch=5)
        got_ours: list[int] = []
        got_theirs: list[int] = []

        def poll_theirs() -> None:
            for message in theirs.poll(0.3) or []:
                if message.error() is None:
                    got_theirs.append(message.offset())

        deadline = time.monotonic() + 30
        while len(got_ours) + len(got_theirs) < total and time.monotonic() < deadline:
            got_ours.extend(r.offset for r in _flat(await ours.getmany(timeout_ms=200)))
            await asyncio.to_thread(poll_theirs)
        assert sorted(got_ours + got_theirs) == list(range(total))
        assert got_ours and got_theirs
    finally:
        await ours.stop()
        await asyncio.to_thread(theirs.close)


async def test_broker_without_share_groups_gets_a_typed_error(tmp_path: Any) -> None:
    """broker_min in cluster mode answers share-group requests with UNSUPPORTED_VERSION, as Apache
    Kafka does with ``share.version=0`` (checked by hand: the same errors)."""
    async with LocalCluster(1, tmp_path / "cluster") as cluster:
        bootstrap = cluster.bootstrap_servers
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic("no-share", 1, 1)])
            with pytest.raises(ShareGroupsNotSupportedError, match="does not support share groups"):
                await admin.describe_share_groups(["g"])
        async with ShareConsumer("no-share", bootstrap_servers=bootstrap, group_id="g") as consumer:
            with pytest.raises(ShareGroupsNotSupportedError, match="does not support share groups"):
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    await consumer.getmany(timeout_ms=200)


async def test_share_consumer_over_sasl_ssl(secure_broker_min: SecureBrokerMin) -> None:
    """The share consumer takes Consumer's security settings (here SCRAM over TLS), coordinator included."""
    config = client_config(secure_broker_min, "SASL_SSL", "SCRAM-SHA-256", user="admin")
    group = new_topic_name("sg-secure")
    topic = new_topic_name("share")
    async with Admin(**config) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.incremental_alter_configs(
            group, {"share.auto.offset.reset": ("set", "earliest")}, resource_type="group"
        )
    async with Producer(**config) as producer:
        await (await producer.send(topic, b"secret", partition=0))
    async with ShareConsumer(topic, group_id=group, **config) as consumer:
        (record,) = await _poll_until(consumer, 1)
    assert (record.value, record.delivery_count) == (b"secret", 1)


def test_share_consumer_settings_are_checked() -> None:
    with pytest.raises(KafkaError, match="group_id"):
        ShareConsumer("t", group_id="")
    with pytest.raises(KafkaError, match="share_acknowledgement_mode"):
        ShareConsumer("t", group_id="g", share_acknowledgement_mode="manual")
