"""KIP-848 consumer groups (ConsumerGroupHeartbeat/Describe): the same tests on broker_min and Apache Kafka.

Members are driven by raw ConsumerGroupHeartbeat requests (tests/raw_protocol.py), which lets a
test act as a well-behaved client that revokes at once, check the revoke-before-assign
invariant after every answer, and not wait for heartbeat intervals.  confluent-kafka's KIP-848
consumer (``group.protocol=consumer``) and classic consumer check the split, mixed groups and the
online upgrade/downgrade.  broker_min only: restart, session timeout, cluster-mode failover, and
Apache Kafka's own record serde reading what broker_min wrote.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, NewTopic
from kafkakit.broker import LocalCluster
from kio.schema.errors import ErrorCode

from tests.brokers import BrokerMinServer, ensure_kafka_jars, missing_kafka_tools, new_topic_name
from tests.raw_protocol import RawClient, req, sub

HEARTBEAT = 68
DESCRIBE = 69
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
LIST_GROUPS = 16
JOIN_GROUP = 11
FIND_COORDINATOR = 10


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


async def create_topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics])


_NOT_READY = (
    ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
)  # fmt: skip


async def connect(broker: Any, group: str) -> Any:
    """A raw connection to the broker that coordinates ``group`` (Kafka creates ``__consumer_offsets`` on
    the first FindCoordinator and loads it a moment later)."""
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap_servers
    deadline = time.monotonic() + 30
    while True:
        finder = await RawClient.connect(bootstrap)
        found = await finder.call(req(FIND_COORDINATOR, 3, key=group, key_type=0))
        finder.close()
        if found.error_code != ErrorCode.none:
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.2)
            continue
        try:
            client = await RawClient.connect(f"{found.host}:{found.port}")
        except OSError:  # a coordinator that just died, until the metadata says so
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
            continue
        [described] = (await describe(client, group)).groups
        if described.error_code not in _NOT_READY:
            return client
        client.close()
        assert time.monotonic() < deadline, described
        await asyncio.sleep(0.2)


class Member:
    """A KIP-848 member over one raw connection that revokes and takes partitions at once."""

    def __init__(
        self,
        client: Any,
        group: str,
        topics: list[str] | None = None,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
        member_id: str | None = None,
    ) -> None:
        self.client, self.group = client, group
        self.topics, self.regex, self.instance_id, self.assignor = topics, regex, instance_id, assignor
        self.member_id = member_id or str(uuid.uuid4())
        self.rebalance_timeout_ms = 30_000
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}

    def owned_pairs(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}

    async def heartbeat(self, epoch: int | None = None) -> Any:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        owned = tuple(
            sub(HEARTBEAT, 1, "TopicPartitions", topic_id=t, partitions=tuple(sorted(ps)))
            for t, ps in self.owned.items() if ps
        )  # fmt: skip
        response = await self.client.call(
            req(HEARTBEAT, 1, group_id=self.group, member_id=self.member_id, member_epoch=epoch,
                instance_id=self.instance_id, rebalance_timeout=ms(self.rebalance_timeout_ms if joining else -1),
                subscribed_topic_names=tuple(self.topics) if joining and self.topics else None,
                subscribed_topic_regex=self.regex if joining else None,
                server_assignor=self.assignor if joining else None,
                topic_partitions=() if joining else owned)
        )  # fmt: skip
        if response.error_code == ErrorCode.none and epoch >= 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = {t.topic_id: set(t.partitions) for t in response.assignment.topic_partitions}
        return response

    async def leave(self, epoch: int = -1) -> Any:
        response = await self.heartbeat(epoch)
        assert response.error_code == ErrorCode.none, response
        assert response.member_epoch == epoch
        self.owned = {}
        return response


def assert_exclusive(members: list[Member]) -> None:
    """Revoke before assign: no partition is owned by two members at any time."""
    seen: set[tuple[uuid.UUID, int]] = set()
    for m in members:
        mine = m.owned_pairs()
        assert not mine & seen, f"partitions owned twice: {mine & seen}"
        seen |= mine


async def converge(members: list[Member], sizes: list[int], total: int, timeout: float = 30.0) -> None:
    """Heartbeat round-robin until each member owns its expected count (in order) and epochs agree."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            response = await m.heartbeat()
            assert response.error_code == ErrorCode.none, response
            assert_exclusive(members)
        counts = [len(m.owned_pairs()) for m in members]
        if sorted(counts) == sorted(sizes) and sum(counts) == total and len({m.epoch for m in members}) == 1:
            # One more round: nobody's assignment changes any more.
            before = [m.owned_pairs() for m in members]
            for m in members:
                await m.heartbeat()
            if [m.owned_pairs() for m in members] == before:
                return
        assert time.monotonic() < deadline, f"no convergence: {counts} epochs {[m.epoch for m in members]}"
        await asyncio.sleep(0.2)


async def describe(client: Any, *groups: str) -> Any:
    return await client.call(req(DESCRIBE, 0, group_ids=groups, include_authorized_operations=False))


# ---------------------------------------------------------------------------------------- tests


async def test_three_members_split_six_partitions_and_a_leaver_moves_them(broker: Any) -> None:
    topic, group = new_topic_name("cg-split"), new_topic_name("cg-split-group")
    await create_topics(broker.bootstrap_servers, (topic, 6))
    client = await connect(broker, group)
    try:
        members = [Member(client, group, [topic]) for _ in range(3)]
        for m in members:
            response = await m.heartbeat()
            assert response.error_code == ErrorCode.none and response.member_id == m.member_id
            assert response.heartbeat_interval.total_seconds() > 0
            assert_exclusive(members)
        await converge(members, [2, 2, 2], 6)
        [described] = (await describe(client, group)).groups
        assert described.error_code == ErrorCode.none and described.group_state == "Stable"
        assert described.group_epoch == described.assignment_epoch == members[0].epoch
        assert described.assignor_name == "uniform"
        assert {d.member_id: d.member_epoch for d in described.members} == {m.member_id: m.epoch for m in members}
        for d in described.members:
            [assigned] = d.assignment.topic_partitions
            assert assigned.topic_name == topic and len(assigned.partitions) == 2
        listed = await client.call(req(LIST_GROUPS, 5, states_filter=(), types_filter=()))
        mine = [g for g in listed.groups if g.group_id == group]
        assert [(g.group_type, g.protocol_type, g.group_state) for g in mine] == [("consumer", "consumer", "Stable")]

        kept = [members[0].owned_pairs(), members[1].owned_pairs()]
        await members[2].leave()
        await converge(members[:2], [3, 3], 6)
        for before, m in zip(kept, members[:2], strict=True):
            assert before <= m.owned_pairs()  # sticky: the survivors only gained
    finally:
        client.close()


async def test_revocation_comes_before_assignment(broker: Any) -> None:
    topic, group = new_topic_name("cg-revoke"), new_topic_name("cg-revoke-group")
    await create_topics(broker.bootstrap_servers, (topic, 4))
    client = await connect(broker, group)
    try:
        first = Member(client, group, [topic])
        await first.heartbeat()
        await converge([first], [4], 4)
        second = Member(client, group, [topic])
        epoch = first.epoch
        deadline = time.monotonic() + 10
        while len(first.owned_pairs()) == 4:  # Kafka 4.3 computes target assignments at most once a second
            assert time.monotonic() < deadline
            response = await second.heartbeat()
            # The newcomer gets nothing while the first member still owns everything.
            assert response.error_code == ErrorCode.none and not second.owned_pairs()
            await first.heartbeat()
            await asyncio.sleep(0.1)
        # The first member is told to give two partitions up and keeps its epoch until it has.
        assert len(first.owned_pairs()) == 2 and first.epoch == epoch
        await second.heartbeat()
        assert not second.owned_pairs()  # not before the first member confirms the revocation
        assert_exclusive([first, second])
        await converge([first, second], [2, 2], 4)
        assert first.epoch == second.epoch > epoch
    finally:
        client.close()


async def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout(broker: Any) -> None:
    topic, group = new_topic_name("cg-stuck"), new_topic_name("cg-stuck-group")
    await create_topics(broker.bootstrap_servers, (topic, 2))
    client = await connect(broker, group)
    try:
        stuck = Member(client, group, [topic])
        stuck.rebalance_timeout_ms = 1000
        await stuck.heartbeat()
        await converge([stuck], [2], 2)
        held = dict(stuck.owned)
        other = Member(client, group, [topic])
        await other.heartbeat()
        deadline = time.monotonic() + 20
        while True:  # the stuck member keeps heartbeating but never gives a partition up
            response = await stuck.heartbeat()
            stuck.owned = dict(held)
            if response.error_code != ErrorCode.none:
                break
            await other.heartbeat()
            assert not other.owned_pairs() and time.monotonic() < deadline
            await asyncio.sleep(0.2)
        assert response.error_code == ErrorCode.unknown_member_id
        await converge([other], [2], 2)
    finally:
        client.close()


async def test_static_member_restart_keeps_its_partitions(broker: Any) -> None:
    topic, group = new_topic_name("cg-static"), new_topic_name("cg-static-group")
    await create_topics(broker.bootstrap_servers, (topic, 4))
    client = await connect(broker, group)
    try:
        a = Member(client, group, [topic], instance_id="instance-a")
        b = Member(client, group, [topic], instance_id="instance-b")
        await a.heartbeat()
        await b.heartbeat()
        await converge([a, b], [2, 2], 4)
        twin = await Member(client, group, [topic], instance_id="instance-a").heartbeat()
        assert twin.error_code == ErrorCode.unreleased_instance_id
        owned, epoch_b = a.owned_pairs(), b.epoch
        await a.leave(-2)  # a static member's temporary leave keeps its assignment
        restarted = Member(client, group, [topic], instance_id="instance-a")
        response = await restarted.heartbeat()
        assert response.error_code == ErrorCode.none
        assert restarted.owned_pairs() == owned and restarted.epoch == epoch_b
        stale = await a.heartbeat()
        assert stale.error_code in (ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id)
        await b.heartbeat()
        assert b.epoch == epoch_b and len(b.owned_pairs()) == 2  # the other member never noticed
    finally:
        client.close()


async def test_a_regex_neither_engine_compiles_is_invalid_regular_expression(broker: Any) -> None:
    """An unclosed group: refused by RE2/J (Kafka) and Python's re (broker_min) alike."""
    group = new_topic_name("cg-bad-regex")
    client = await connect(broker, group)
    try:
        response = await Member(client, group, regex="(cg-unclosed").heartbeat()
        assert response.error_code == ErrorCode.invalid_regular_expression, response
    finally:
        client.close()


async def test_regex_subscription_picks_up_a_new_topic(broker: Any) -> None:
    prefix = new_topic_name("cg-regex")
    first, later, other = f"{prefix}-a", f"{prefix}-b", new_topic_name("cg-other")
    await create_topics(broker.bootstrap_servers, (first, 2), (other, 2))
    group = new_topic_name("cg-regex-group")
    client = await connect(broker, group)
    try:
        member = Member(client, group, regex=f"{prefix}-.*")
        await member.heartbeat()
        await converge([member], [2], 2)
        await create_topics(broker.bootstrap_servers, (later, 3))
        await converge([member], [5], 5, timeout=40)
        [described] = (await describe(client, group)).groups
        [d] = described.members
        assert d.subscribed_topic_regex == f"{prefix}-.*"
        assert sorted(t.topic_name for t in d.assignment.topic_partitions) == [first, later]
    finally:
        client.close()


async def test_offsets_are_committed_and_fetched_with_member_epochs(broker: Any) -> None:
    topic, group = new_topic_name("cg-offsets"), new_topic_name("cg-offsets-group")
    await create_topics(broker.bootstrap_servers, (topic, 2))
    client = await connect(broker, group)
    try:
        member = Member(client, group, [topic])
        await member.heartbeat()
        await converge([member], [2], 2)

        async def commit(epoch: int, member_id: str, version: int = 9) -> list[ErrorCode]:
            partition = sub(OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=0,
                            committed_offset=42, committed_leader_epoch=-1, committed_metadata="m")  # fmt: skip
            response = await client.call(
                req(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                    group_instance_id=None, topics=(sub(OFFSET_COMMIT, version, "OffsetCommitRequestTopic",
                                                        name=topic, partitions=(partition,)),))
            )  # fmt: skip
            return [p.error_code for t in response.topics for p in t.partitions]

        async def fetch(epoch: int, member_id: str | None) -> Any:
            group_req = sub(OFFSET_FETCH, 9, "OffsetFetchRequestGroup", group_id=group, member_id=member_id,
                            member_epoch=epoch, topics=(sub(OFFSET_FETCH, 9, "OffsetFetchRequestTopics", name=topic,
                                                            partition_indexes=(0, 1)),))  # fmt: skip
            [answer] = (await client.call(req(OFFSET_FETCH, 9, groups=(group_req,), require_stable=False))).groups
            return answer

        assert await commit(member.epoch, member.member_id) == [ErrorCode.none]
        assert await commit(member.epoch - 1, member.member_id) == [ErrorCode.stale_member_epoch]
        assert await commit(member.epoch, "nobody") == [ErrorCode.unknown_member_id]
        assert await commit(-1, "") == [ErrorCode.unknown_member_id]  # the group is not empty
        assert await commit(member.epoch, member.member_id, version=8) == [ErrorCode.unsupported_version]
        answer = await fetch(member.epoch, member.member_id)
        assert answer.error_code == ErrorCode.none
        assert [(p.partition_index, p.committed_offset, p.metadata) for t in answer.topics for p in t.partitions] == [
            (0, 42, "m"), (1, -1, ""),
        ]  # fmt: skip
        assert (await fetch(member.epoch + 5, member.member_id)).error_code == ErrorCode.stale_member_epoch
        assert (await fetch(member.epoch, "nobody")).error_code == ErrorCode.unknown_member_id
        assert (await fetch(-1, None)).error_code == ErrorCode.none  # an admin's fetch
        await member.leave()
        assert await commit(-1, "") == [ErrorCode.none]  # empty now: an admin may commit
        [deleted] = (await client.call(req(42, 2, groups_names=(group,)))).results
        assert deleted.error_code == ErrorCode.none
        [gone] = (await describe(client, group)).groups
        assert gone.error_code == ErrorCode.group_id_not_found
        assert (await fetch(-1, None)).topics[0].partitions[0].committed_offset == -1
    finally:
        client.close()


async def test_heartbeat_errors_match_kafka(broker: Any) -> None:
    topic, group = new_topic_name("cg-errors"), new_topic_name("cg-errors-group")
    await create_topics(broker.bootstrap_servers, (topic, 1))
    client = await connect(broker, group)
    try:
        async def raw(**fields: Any) -> Any:
            values = dict(group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout=ms(30_000),
                          subscribed_topic_names=(topic,), topic_partitions=())  # fmt: skip
            values.update(fields)
            return await client.call(req(HEARTBEAT, 1, **values))

        assert (await raw(subscribed_topic_names=None)).error_code == ErrorCode.invalid_request
        assert (await raw(topic_partitions=None)).error_code == ErrorCode.invalid_request
        assert (await raw(rebalance_timeout=ms(-1))).error_code == ErrorCode.invalid_request
        assert (await raw(member_id="")).error_code == ErrorCode.invalid_request
        assert (await raw(member_epoch=-3)).error_code == ErrorCode.invalid_request
        assert (await raw(server_assignor="nope")).error_code == ErrorCode.unsupported_assignor
        assert (await raw(member_epoch=5)).error_code == ErrorCode.group_id_not_found
        member = Member(client, group, [topic])
        await member.heartbeat()
        assert (await member.heartbeat(member.epoch + 1)).error_code == ErrorCode.fenced_member_epoch
        assert (await raw(member_epoch=1, topic_partitions=None)).error_code == ErrorCode.unknown_member_id
        unknown = new_topic_name("cg-no-such-group")
        [described] = (await describe(client, unknown)).groups
        assert described.error_code == ErrorCode.group_id_not_found
    finally:
        client.close()


async def test_range_assignor_gives_contiguous_ranges(broker: Any) -> None:
    topic, group = new_topic_name("cg-range"), new_topic_name("cg-range-group")
    await create_topics(broker.bootstrap_servers, (topic, 4))
    client = await connect(broker, group)
    try:
        members = [Member(client, group, [topic], assignor="range") for _ in range(2)]
        for m in members:
            await m.heartbeat()
        await converge(members, [2, 2], 4)
        ranges = sorted(sorted(p for _, p in m.owned_pairs()) for m in members)
        assert ranges == [[0, 1], [2, 3]]
        [described] = (await describe(client, group)).groups
        assert described.assignor_name == "range"
    finally:
        client.close()


def test_confluent_kafka_consumers_share_partitions(broker: Any) -> None:
    ck = pytest.importorskip("confluent_kafka")
    topic, group = new_topic_name("cg-ck"), new_topic_name("cg-ck-group")
    asyncio.run(create_topics(broker.bootstrap_servers, (topic, 6)))
    config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest"}  # fmt: skip
    consumers = [ck.Consumer(config) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.monotonic() + 40
        while True:
            for c in consumers:
                c.poll(0.05)
            counts = [len(c.assignment()) for c in consumers]
            if counts == [2, 2, 2]:
                break
            assert time.monotonic() < deadline, counts
        assigned = [tp.partition for c in consumers for tp in c.assignment()]
        assert sorted(assigned) == list(range(6))
    finally:
        for c in consumers:
            c.close()


def test_classic_and_consumer_protocol_members_share_a_group(broker: Any) -> None:
    """A mixed group: a classic confluent-kafka consumer joins a KIP-848 group, then leaves."""
    ck = pytest.importorskip("confluent_kafka")
    topic, group = new_topic_name("cg-mixed"), new_topic_name("cg-mixed-group")
    asyncio.run(create_topics(broker.bootstrap_servers, (topic, 4)))
    base = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    modern = ck.Consumer({**base, "group.protocol": "consumer"})
    classic = ck.Consumer({**base, "group.protocol": "classic", "session.timeout.ms": 10_000,
                           "heartbeat.interval.ms": 200})  # fmt: skip
    consumers = [modern, classic]
    try:
        modern.subscribe([topic])
        deadline = time.monotonic() + 20
        while len(modern.assignment()) != 4:
            modern.poll(0.05)
            assert time.monotonic() < deadline
        classic.subscribe([topic])
        deadline = time.monotonic() + 40
        while True:
            for c in consumers:
                c.poll(0.05)
            counts = [len(c.assignment()) for c in consumers]
            if counts == [2, 2]:
                break
            assert time.monotonic() < deadline, counts
        assert sorted(tp.partition for c in consumers for tp in c.assignment()) == [0, 1, 2, 3]
        described = asyncio.run(_describe_once(broker.bootstrap_servers, group))
        assert sorted(m.member_type for m in described.members) == [0, 1]  # classic, consumer
        classic.close()
        consumers.remove(classic)
        deadline = time.monotonic() + 20
        while len(modern.assignment()) != 4:
            modern.poll(0.05)
            assert time.monotonic() < deadline
    finally:
        for c in consumers:
            c.close()


def test_a_classic_group_is_upgraded_and_downgraded_online(broker: Any) -> None:
    """Kafka's default migration policy: a KIP-848 member joining a classic group converts it to a consumer
    group; when it leaves, the classic member left is in a classic group again and gets every partition."""
    ck = pytest.importorskip("confluent_kafka")
    topic, group = new_topic_name("cg-migrate"), new_topic_name("cg-migrate-group")
    asyncio.run(create_topics(broker.bootstrap_servers, (topic, 4)))
    base = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    classic = ck.Consumer({**base, "group.protocol": "classic", "session.timeout.ms": 10_000,
                           "heartbeat.interval.ms": 200})  # fmt: skip
    modern = ck.Consumer({**base, "group.protocol": "consumer"})
    consumers = [classic, modern]

    def poll_until(done: Any, timeout: float = 40) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for c in consumers:
                c.poll(0.05)
            assert time.monotonic() < deadline, [len(c.assignment()) for c in consumers]

    def group_type() -> str:
        return asyncio.run(_listed_type(broker.bootstrap_servers, group))

    try:
        classic.subscribe([topic])
        consumers.remove(modern)
        poll_until(lambda: len(classic.assignment()) == 4)
        assert group_type() == "classic"
        consumers.append(modern)
        modern.subscribe([topic])
        poll_until(lambda: [len(c.assignment()) for c in consumers] == [2, 2])
        assert group_type() == "consumer"
        modern.close()
        consumers.remove(modern)
        poll_until(lambda: len(classic.assignment()) == 4)
        assert group_type() == "classic"
    finally:
        for c in consumers:
            c.close()


async def _listed_type(bootstrap: str, group: str) -> str:
    client = await connect(bootstrap, group)
    try:
        listed = await client.call(req(LIST_GROUPS, 5, states_filter=(), types_filter=()))
        [found] = [g.group_type for g in listed.groups if g.group_id == group]
        return str(found)
    finally:
        client.close()


def test_transactional_offsets_carry_the_member_epoch(broker: Any) -> None:
    """send_offsets_to_transaction with a KIP-848 consumer's group metadata (TxnOffsetCommit with its epoch)."""
    ck = pytest.importorskip("confluent_kafka")
    topic, group = new_topic_name("cg-txn"), new_topic_name("cg-txn-group")
    asyncio.run(create_topics(broker.bootstrap_servers, (topic, 1)))
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": new_topic_name("cg-tid")})
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                            "group.protocol": "consumer", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})  # fmt: skip
    try:
        seeder = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(3):
            seeder.produce(topic, f"v{i}".encode())
        assert seeder.flush(10) == 0
        producer.init_transactions(30)
        consumer.subscribe([topic])
        seen: list[Any] = []
        deadline = time.monotonic() + 30
        while len(seen) < 3:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.append(message)
            assert time.monotonic() < deadline
        producer.begin_transaction()
        last = seen[-1]
        offsets = [ck.TopicPartition(topic, last.partition(), last.offset() + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        [committed] = consumer.committed([ck.TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 3
    finally:
        consumer.close()


async def _describe_once(bootstrap: str, group: str) -> Any:
    client = await connect(bootstrap, group)
    try:
        return (await client.call(req(DESCRIBE, 1, group_ids=(group,), include_authorized_operations=False))).groups[0]
    finally:
        client.close()


async def test_broker_min_restart_keeps_groups_and_assignments(tmp_path: Path) -> None:
    server = BrokerMinServer(tmp_path / "data")
    await asyncio.to_thread(server.start)
    topic, group = new_topic_name("cg-restart"), new_topic_name("cg-restart-group")
    try:
        await create_topics(server.bootstrap_servers, (topic, 4))
        client = await connect(server, group)
        a = Member(client, group, [topic], instance_id="restart-a")
        b = Member(client, group, [topic])
        await a.heartbeat()
        await b.heartbeat()
        await converge([a, b], [2, 2], 4)
        before = (await describe(client, group)).groups[0]
        client.close()
    finally:
        await asyncio.to_thread(server.stop)
    server = BrokerMinServer(tmp_path / "data")
    await asyncio.to_thread(server.start)
    try:
        client = await connect(server, group)
        after = (await describe(client, group)).groups[0]
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
            before.group_state, before.group_epoch, before.assignment_epoch,
        )  # fmt: skip
        assert sorted(after.members, key=lambda m: m.member_id) == sorted(before.members, key=lambda m: m.member_id)
        for m in (a, b):
            m.client = client
            response = await m.heartbeat()  # the epochs survived: no fencing, no reassignment
            assert response.error_code == ErrorCode.none and response.member_epoch == m.epoch
        await converge([a, b], [2, 2], 4)
        client.close()
    finally:
        await asyncio.to_thread(server.stop)


async def test_broker_min_session_timeout_fences_a_silent_member(tmp_path: Path) -> None:
    server = BrokerMinServer(tmp_path / "data", group_consumer_session_timeout_ms=500)
    await asyncio.to_thread(server.start)
    topic, group = new_topic_name("cg-session"), new_topic_name("cg-session-group")
    try:
        await create_topics(server.bootstrap_servers, (topic, 2))
        client = await connect(server, group)
        a, b = Member(client, group, [topic]), Member(client, group, [topic])
        await a.heartbeat()
        await b.heartbeat()
        await converge([a, b], [1, 1], 2)
        # A classic member may join (Kafka's MEMBER_ID_REQUIRED first), but only with protocol type consumer.
        for protocol_type, expected in (("consumer", ErrorCode.member_id_required),
                                        ("connect", ErrorCode.inconsistent_group_protocol)):  # fmt: skip
            join = await client.call(
                req(JOIN_GROUP, 7, group_id=group, session_timeout=ms(10_000), rebalance_timeout=ms(10_000),
                    member_id="", group_instance_id=None, protocol_type=protocol_type, reason=None,
                    protocols=(sub(JOIN_GROUP, 7, "JoinGroupRequestProtocol", name="range", metadata=b""),))
            )  # fmt: skip
            assert join.error_code == expected
        deadline = time.monotonic() + 10
        while len(b.owned_pairs()) < 2:  # only b heartbeats: a's session expires
            assert time.monotonic() < deadline
            await b.heartbeat()
            await asyncio.sleep(0.1)
        assert (await a.heartbeat()).error_code == ErrorCode.unknown_member_id
        client.close()
    finally:
        await asyncio.to_thread(server.stop)


@pytest.mark.slow
async def test_cluster_mode_the_next_coordinator_keeps_the_group(tmp_path: Path) -> None:
    topic, group = new_topic_name("cg-cluster"), new_topic_name("cg-cluster-group")
    async with LocalCluster(3, tmp_path / "cluster") as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 4, 3)])
        client = await connect(cluster.bootstrap_servers, group)
        members = [Member(client, group, [topic]) for _ in range(2)]
        for m in members:
            await m.heartbeat()
        await converge(members, [2, 2], 4)
        before = (await describe(client, group)).groups[0]
        finder = await RawClient.connect(cluster.bootstrap_servers)
        coordinator = (await finder.call(req(FIND_COORDINATOR, 3, key=group, key_type=0))).node_id
        finder.close()
        client.close()
        await cluster.kill(coordinator)
        survivor = next(n for n in cluster.node_ids if n != coordinator)
        client = await connect(cluster.address(survivor), group)
        after = (await describe(client, group)).groups[0]
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
            before.group_epoch, before.assignment_epoch, before.group_state,
        )  # fmt: skip
        for m in members:
            m.client = client
            response = await m.heartbeat()
            assert response.error_code == ErrorCode.none and response.member_epoch == before.group_epoch
        client.close()


_DECODE_JAVA = """
import java.io.File;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

public class Decode {
    public static void main(String[] args) throws Exception {
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        for (RecordBatch batch : FileRecords.open(new File(args[0])).batches()) {
            if (batch.isControlBatch()) continue;
            for (org.apache.kafka.common.record.internal.Record r : batch) {
                try {
                    System.out.println("OK " + serde.deserialize(r.key(), r.hasValue() ? r.value() : null));
                } catch (Exception e) {
                    System.out.println("FAIL " + e);
                }
            }
        }
    }
}
"""


async def test_apache_kafka_reads_the_records_broker_min_writes(tmp_path: Path) -> None:
    """Kafka's own record serde decodes every consumer group record broker_min appended."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    server = BrokerMinServer(tmp_path / "data")
    await asyncio.to_thread(server.start)
    topic, group = new_topic_name("cg-serde"), new_topic_name("cg-serde-group")
    try:
        await create_topics(server.bootstrap_servers, (topic, 2))
        client = await connect(server, group)
        a, b = Member(client, group, [topic], instance_id="serde-a"), Member(client, group, [topic], regex="cg-serde.*")
        await a.heartbeat()
        await b.heartbeat()
        await converge([a, b], [1, 1], 2)
        # A classic member joins too (its ClassicMemberMetadata is a tagged field of its record).
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)
        member_id = ""
        for _ in range(2):
            join = await client.call(
                req(JOIN_GROUP, 7, group_id=group, session_timeout=ms(10_000), rebalance_timeout=ms(10_000),
                    member_id=member_id, group_instance_id=None, protocol_type="consumer", reason=None,
                    protocols=(sub(JOIN_GROUP, 7, "JoinGroupRequestProtocol", name="range", metadata=subscription),))
            )  # fmt: skip
            member_id = join.member_id
        assert join.error_code == ErrorCode.none and join.generation_id > 0
        await a.leave(-2)
        await b.leave()
        client.close()
    finally:
        await asyncio.to_thread(server.stop)
    source = tmp_path / "Decode.java"
    source.write_text(_DECODE_JAVA)
    segment = next((tmp_path / "data").glob("__consumer_offsets-*/*.log"))
    lib = await asyncio.to_thread(ensure_kafka_jars)
    decoded = await asyncio.to_thread(
        subprocess.run, ["java", "-cp", f"{lib}/*", str(source), str(segment)], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    lines = decoded.stdout.splitlines()
    assert lines and all(line.startswith("OK ") for line in lines), decoded.stdout + decoded.stderr
    text = decoded.stdout
    for name in ("ConsumerGroupMetadataKey", "ConsumerGroupPartitionMetadataKey", "ConsumerGroupMemberMetadataKey",
                 "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMemberKey",
                 "ConsumerGroupCurrentMemberAssignmentKey", "subscribedTopicRegex='cg-serde.*'", "memberEpoch=-2",
                 "classicMemberMetadata=ClassicMemberMetadata(sessionTimeoutMs=10000, supportedProtocols=[ClassicProtocol(name='range'"):
        assert name in text, name
