"""KIP-848's consumer group protocol (``Consumer(group_protocol="consumer")``), end to end.

Against every broker kind: Apache Kafka 4.3.1 speaks it out of the box, broker_min has its own
KIP-848 coordinator; both fixtures set the consumer-group heartbeat interval to 500 ms and the
session timeout to 6 s (tests/brokers.py, tests/conftest.py). Members are real ``kafkakit.Consumer`` objects polling in background tasks
(tests/test_consumer_groups.py's ``Member``), with a confluent-kafka member in the mixed group.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from kafkakit import Admin, Producer
from kafkakit.consumer import Consumer
from kafkakit.errors import GroupProtocolUnsupportedError, KafkaConfigError, KafkaError
from kafkakit.structs import TopicPartition

from tests.brokers import KafkaServer, missing_kafka_tools
from tests.test_consumer_groups import (
    Member,
    RecordingListener,
    all_partitions,
    setup_topic,
    wait_for,
    write,
)


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


def group_name() -> str:
    return "kip848-" + uuid.uuid4().hex[:8]


def consumer(bootstrap: str, group: str, *topics: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("fetch_max_wait_ms", 100)
    kwargs.setdefault("enable_auto_commit", False)
    return Consumer(*topics, bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer", **kwargs)


def sizes(members: list[Member]) -> list[int]:
    return sorted(len(m.assignment()) for m in members)


def settled(members: list[Member], expected: set[TopicPartition], split: list[int]) -> bool:
    owned = [m.assignment() for m in members]
    return (
        set().union(*owned) == expected
        and sum(len(o) for o in owned) == len(expected)
        and sizes(members) == split
        and all(m.group.state.value == "stable" for m in members)
    )


# -- settings ------------------------------------------------------------------------


def test_group_protocol_settings_are_checked() -> None:
    with pytest.raises(KafkaConfigError, match="group_protocol"):
        Consumer(group_id="g", group_protocol="eager")
    for setting, value in (
        ("partition_assignment_strategy", "range"),
        ("session_timeout_ms", 10000),
        ("heartbeat_interval_ms", 1000),
    ):
        with pytest.raises(KafkaConfigError, match=setting) as info:
            Consumer(group_id="g", group_protocol="consumer", **{setting: value})
        assert info.value.setting == setting
    with pytest.raises(KafkaConfigError, match="group_remote_assignor"):
        Consumer(group_id="g", group_protocol="consumer", group_remote_assignor="sticky")
    with pytest.raises(KafkaConfigError, match="group_remote_assignor"):
        Consumer(group_id="g", group_remote_assignor="range")  # classic assigns on the client
    # The classic defaults are unchanged, and explicit classic settings still work there.
    Consumer(group_id="g", session_timeout_ms=10000, heartbeat_interval_ms=1000)
    group = Consumer(group_id="g", group_protocol="consumer", group_remote_assignor="range")._group
    assert group is not None and group.group_protocol == "consumer"


# -- membership ------------------------------------------------------------------------


async def test_three_members_split_six_partitions_and_admin_describes_them(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 6)
    group = group_name()
    members = [await Member(consumer(bootstrap, group, topic)).start() for _ in range(3)]
    try:
        await wait_for(lambda: settled(members, all_partitions(topic), [2, 2, 2]), 20, "a 2/2/2 split")
        epochs = {m.group.generation_id for m in members}
        assert min(epochs) > 0
        ids = {m.group.member_id for m in members}
        assert len(ids) == 3 and all(len(i) == 22 for i in ids)  # client-generated (KIP-1082)
        async with Admin(bootstrap_servers=bootstrap) as admin:
            listed = await admin.list_groups(types=["consumer"])
            assert [g.group_type for g in listed if g.group_id == group] == ["consumer"]
            (described,) = await admin.describe_groups([group])
        assert described.group_type == "consumer" and described.protocol_type == "consumer"
        assert described.state == "Stable" and described.group_epoch is not None
        by_id = {d.member_id: d for d in described.members}
        assert set(by_id) == ids
        for m in members:
            d = by_id[m.group.member_id]
            assert set(d.assignment) == m.assignment() == set(d.target_assignment or ())
            assert d.member_epoch == m.group.generation_id
    finally:
        for m in members:
            await m.stop()
    assert all(m.error is None for m in members)


async def test_member_leaves_or_is_killed_and_only_its_partitions_move(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 6)
    group = group_name()
    listeners = [RecordingListener() for _ in range(3)]
    members = []
    for listener in listeners:
        c = consumer(bootstrap, group)
        c.subscribe([topic], listener=listener)
        members.append(await Member(c).start())
    try:
        await wait_for(lambda: settled(members, all_partitions(topic), [2, 2, 2]), 20, "a 2/2/2 split")
        kept = [m.assignment() for m in members[1:]]
        for listener in listeners[1:]:
            listener.events.clear()
        await members[0].stop()  # leaves with epoch -1: its two partitions move at once
        await wait_for(lambda: settled(members[1:], all_partitions(topic), [3, 3]), 10, "a 3/3 split")
        for m, before, listener in zip(members[1:], kept, listeners[1:], strict=True):
            assert before <= m.assignment()  # nothing moved away from the others
            assert listener.partitions("revoked") == [] and listener.partitions("lost") == []
        # The others consumed all along: records written now reach them.
        stamp = time.monotonic()
        await write(bootstrap, topic, 6, 60)
        await wait_for(lambda: sum(len(m.records) for m in members[1:]) >= 60, 10, "records after the leave")
        assert all(m.arrivals and max(max(t) for t in m.arrivals.values()) >= stamp for m in members[1:])
        # A killed member (no leave) is removed after the session timeout (6 s here).
        survivor = members[1]
        await members[2].crash()
        await wait_for(lambda: survivor.assignment() == all_partitions(topic), 15, "the survivor takes all")
        assert listeners[1].partitions("revoked") == []
    finally:
        for m in members[1:2]:
            await m.stop()
    assert all(m.error is None for m in members)


async def test_static_member_restart_keeps_its_partitions(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 4)
    group = group_name()
    other_listener = RecordingListener()
    other_consumer = consumer(bootstrap, group, group_instance_id="static-b")
    other_consumer.subscribe([topic], listener=other_listener)
    other = await Member(other_consumer).start()
    first = await Member(consumer(bootstrap, group, topic, group_instance_id="static-a")).start()
    try:
        await wait_for(lambda: settled([first, other], all_partitions(topic, 4), [2, 2]), 20, "a 2/2 split")
        before, other_before = first.assignment(), other.assignment()
        other_listener.events.clear()
        await first.stop()  # epoch -2: the broker keeps the partitions for the instance id
        restarted = await Member(consumer(bootstrap, group, topic, group_instance_id="static-a")).start()
        try:
            await wait_for(lambda: restarted.assignment() == before, 10, "the same partitions back")
            await asyncio.sleep(1.5)  # three heartbeats: nothing else moves
            assert other.assignment() == other_before
            assert other_listener.events == []
            assert restarted.group.member_id != first.group.member_id
        finally:
            await restarted.stop()
    finally:
        await other.stop()


async def test_unsubscribe_gives_the_partitions_up_and_subscribe_rejoins(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 4)
    group = group_name()
    listener = RecordingListener()
    c = consumer(bootstrap, group)
    c.subscribe([topic], listener=listener)
    first = await Member(c).start()
    other = await Member(consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(lambda: settled([first, other], all_partitions(topic, 4), [2, 2]), 20, "a 2/2 split")
        mine = first.assignment()
        listener.events.clear()
        c.unsubscribe()  # on_partitions_revoked, then a leave heartbeat (epoch -1)
        assert c.assignment() == set()
        await wait_for(lambda: other.assignment() == all_partitions(topic, 4), 10, "the other takes all")
        assert listener.partitions("revoked") == [mine]
        c.subscribe([topic], listener=listener)  # joins again (epoch 0, same member id)
        await wait_for(lambda: settled([first, other], all_partitions(topic, 4), [2, 2]), 20, "a new split")
    finally:
        await first.stop()
        await other.stop()
    assert first.error is None and other.error is None


async def test_poll_timeout_leaves_the_group_and_the_next_poll_rejoins(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 4)
    group = group_name()
    listener = RecordingListener()
    other = await Member(consumer(bootstrap, group, topic)).start()
    c = consumer(bootstrap, group, max_poll_interval_ms=1500)
    c.subscribe([topic], listener=listener)

    async def poll_until(condition: Any, what: str) -> None:
        deadline = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await c.getmany(timeout_ms=100)

    try:
        async with c:
            await poll_until(lambda: sorted([len(c.assignment()), len(other.assignment())]) == [2, 2], "2/2")
            listener.events.clear()
            await asyncio.sleep(2.5)  # no poll for longer than max_poll_interval_ms: the member leaves
            await wait_for(lambda: other.assignment() == all_partitions(topic, 4), 10, "the other takes all")
            assert [kind for kind, _ in listener.events] == ["lost"]
            await poll_until(lambda: sorted([len(c.assignment()), len(other.assignment())]) == [2, 2], "rejoin")
    finally:
        await other.stop()
    assert other.error is None


async def test_same_instance_id_while_the_first_is_active_is_a_fatal_error(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    group = group_name()
    first = await Member(consumer(bootstrap, group, topic, group_instance_id="twin")).start()
    try:
        await wait_for(lambda: len(first.assignment()) == 2, 20, "the first member's assignment")
        async with consumer(bootstrap, group, topic, group_instance_id="twin") as second:
            with pytest.raises(KafkaError, match="UNRELEASED_INSTANCE_ID"):
                for _ in range(100):
                    await second.getmany(timeout_ms=100)
    finally:
        await first.stop()


async def test_regex_subscription_picks_up_a_new_topic(bootstrap: str, topic_factory: Any) -> None:
    prefix = topic_factory()
    first, later = f"{prefix}-a", f"{prefix}-b"
    await setup_topic(bootstrap, first, 2)
    listener = RecordingListener()
    c = consumer(bootstrap, group_name())
    c.subscribe(pattern=f"{prefix}-.*", listener=listener)  # evaluated by the broker (SubscribedTopicRegex)
    member = await Member(c).start()
    try:
        await wait_for(lambda: member.assignment() == all_partitions(first, 2), 20, "the first topic")
        await setup_topic(bootstrap, later, 2)
        await write(bootstrap, later, 2, 10)
        expected = all_partitions(first, 2) | all_partitions(later, 2)
        await wait_for(lambda: member.assignment() == expected, 30, "the new topic")
        await wait_for(lambda: sum(tp.topic == later for tp, _ in member.records) == 10, 10, "its records")
    finally:
        await member.stop()
    assert member.error is None


async def test_every_record_consumed_once_with_commit_after_process(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 6)
    group = group_name()
    total = 3000

    async def start_member() -> Member:
        listener = RecordingListener()
        c = consumer(bootstrap, group, max_poll_records=50)
        c.subscribe([topic], listener=listener)
        member = Member(c, commit_after_process=True)
        listener.member = member  # commits what it processed of the partitions it gives up
        return await member.start()

    members = [await start_member(), await start_member()]
    try:
        await write(bootstrap, topic, 6, total // 2)
        members.append(await start_member())  # joins mid-stream: partitions move to it
        await write(bootstrap, topic, 6, total // 2, start=total // 2)
        await asyncio.sleep(0.5)
        await members[0].stop()  # leaves mid-stream: its partitions move on
        await wait_for(lambda: sum(len(m.records) for m in members) >= total, 30, "every record")
        await asyncio.sleep(0.5)
    finally:
        for m in members[1:]:
            await m.stop()
    seen = Counter(rec for m in members for rec in m.records)
    assert len(seen) == total
    assert [rec for rec, n in seen.items() if n > 1] == []
    assert all(m.error is None for m in members)


async def test_fenced_member_loses_its_partitions_and_rejoins(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    listener = RecordingListener()
    c = consumer(bootstrap, group_name())
    c.subscribe([topic], listener=listener)
    member = await Member(c).start()
    try:
        await wait_for(lambda: member.assignment() == all_partitions(topic, 2), 20, "the assignment")
        membership = member.group._membership
        membership._set_epoch(membership.member_epoch + 100)  # the broker answers FENCED_MEMBER_EPOCH
        membership.request_rejoin("test")
        await wait_for(lambda: listener.partitions("lost") != [], 10, "on_partitions_lost")
        assert listener.partitions("lost") == [all_partitions(topic, 2)]
        await wait_for(lambda: member.assignment() == all_partitions(topic, 2), 10, "the partitions back")
        assert member.group.generation_id > 0
    finally:
        await member.stop()
    assert member.error is None


async def test_broker_side_regex_error_is_fatal_for_getmany(kafka_broker: Any, topic: str) -> None:
    """Apache Kafka only: the client compiles a pattern with Python's re first, so the broker can
    refuse only a pattern re accepts and RE2/J does not (a lookaround); broker_min uses re itself.
    (tests/test_broker_consumer_groups.py checks INVALID_REGULAR_EXPRESSION on both brokers.)"""
    async with consumer(kafka_broker.bootstrap_servers, group_name()) as c:
        c.subscribe(pattern="(?=x)" + topic)  # the broker answers INVALID_REGULAR_EXPRESSION
        with pytest.raises(KafkaError, match="INVALID_REGULAR_EXPRESSION"):
            for _ in range(100):
                await c.getmany(timeout_ms=100)
        with pytest.raises(KafkaError, match="INVALID_REGULAR_EXPRESSION"):
            await c.getmany(timeout_ms=100)  # and again: the membership is over


# -- offsets ---------------------------------------------------------------------------


async def test_commits_and_transactional_offsets_carry_the_member_epoch(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1)
    await write(bootstrap, topic, 1, 10)
    group = group_name()
    tp = TopicPartition(topic, 0)
    async with consumer(bootstrap, group, topic) as c:
        records: list[Any] = []
        while len(records) < 10:
            records.extend(r for batch in (await c.getmany(timeout_ms=200)).values() for r in batch)
        await c.commit({tp: 4})  # OffsetCommit v9 with the member id and epoch
        assert await c.committed(tp) == 4
        metadata = c.group_metadata()
        assert metadata.generation_id > 0 and metadata.member_id
        async with Producer(bootstrap_servers=bootstrap, transactional_id=f"txn-{group}") as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send_offsets_to_transaction({tp: 10}, metadata)
        assert await c.committed(tp) == 10


# -- interoperability ------------------------------------------------------------------


async def test_mixed_group_with_a_confluent_kafka_member(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 6)
    group = group_name()
    confluent_assignment: set[TopicPartition] = set()
    stop = threading.Event()

    def confluent_member() -> None:
        c = ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        c.subscribe([topic])
        try:
            while not stop.is_set():
                c.poll(0.1)
                confluent_assignment.clear()
                confluent_assignment.update(TopicPartition(p.topic, p.partition) for p in c.assignment())
        finally:
            c.close()

    thread = threading.Thread(target=confluent_member, daemon=True)
    thread.start()
    member = await Member(consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(
            lambda: len(member.assignment()) == 3
            and member.assignment() | set(confluent_assignment) == all_partitions(topic),
            30,
            "a 3/3 split between kafkakit and confluent-kafka",
        )
        async with Admin(bootstrap_servers=bootstrap) as admin:
            (described,) = await admin.describe_groups([group])
        assert {len(m.assignment) for m in described.members} == {3}
        assert {m.client_id for m in described.members} >= {"kafkakit"}
    finally:
        await member.stop()
        stop.set()
        await asyncio.to_thread(thread.join, 30)
    assert member.error is None


async def test_classic_member_joins_a_consumer_group(bootstrap: str, topic: str) -> None:
    """KIP-848's mixed groups: a classic-protocol member (JoinGroup/SyncGroup) joins the group the
    consumer-protocol member created, and the broker assigns both."""
    await setup_topic(bootstrap, topic, 4)
    group = group_name()
    modern = await Member(consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(lambda: modern.assignment() == all_partitions(topic, 4), 20, "the first member's assignment")
        classic = await Member(
            Consumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            )
        ).start()
        try:
            await wait_for(
                lambda: len(modern.assignment()) == 2 and modern.assignment() | classic.assignment() == all_partitions(topic, 4),
                30,
                "a 2/2 split between a consumer-protocol and a classic member",
            )
        finally:
            await classic.stop()
        await wait_for(lambda: modern.assignment() == all_partitions(topic, 4), 15, "all back after the classic leaves")
    finally:
        await modern.stop()
    assert modern.error is None and classic.error is None


# -- a broker without the protocol -------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_without_kip848(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Apache Kafka formatted with group.version=0: no KIP-848 consumer groups."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    server = KafkaServer(tmp_path_factory.mktemp("kafka-group-version-0"), features={"group.version": 0})
    server.start()
    yield server
    server.stop()


async def test_broker_without_the_protocol_says_to_use_classic(kafka_without_kip848: Any, topic: str) -> None:
    bootstrap = kafka_without_kip848.bootstrap_servers
    async with consumer(bootstrap, group_name(), topic) as c:
        with pytest.raises(GroupProtocolUnsupportedError, match='group_protocol="classic"'):
            for _ in range(100):
                await c.getmany(timeout_ms=100)
