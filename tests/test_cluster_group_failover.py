"""A classic group's coordinator fails over on a 3-node broker_min cluster, and the group carries on.

As in Apache Kafka, the node that takes over a ``__consumer_offsets`` partition brings its
groups back from their last GroupMetadataValue: Stable, with the members, generation,
protocol, leader and assignments of the last completed generation, and every member's
session armed afresh.  So when the group coordinator is killed, the members of a stable
group find the new coordinator and go on heartbeating and committing with their generation:
no member id is lost, no rebalance runs, no partition is revoked.  (Before, the group came
back Empty and every member got UNKNOWN_MEMBER_ID and rejoined.)

Shown with two kafkakit consumers (generation, member ids and rebalance callbacks unchanged;
raw Heartbeat and OffsetCommit with the old generation accepted by the new coordinator) and
with two confluent-kafka (librdkafka) consumers (member ids unchanged, no rebalance callback,
a synchronous commit accepted).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from kafkakit import Admin, Consumer, ConsumerRebalanceListener, NewTopic, TopicPartition
from kafkakit.broker import LocalCluster
from kio.schema.errors import ErrorCode

from tests.brokers import new_topic_name
from tests.raw_protocol import RawClient, req, sub

pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="module")]

PARTITIONS = 4
FIND_COORDINATOR, HEARTBEAT, OFFSET_COMMIT, DESCRIBE_GROUPS = 10, 12, 8, 15
#: Longer than a failover (a dead node is fenced after 4 s here), so sessions outlive it.
SESSION_MS = 30_000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(3, tmp_path_factory.mktemp("group-failover"), config={"min.insync.replicas": "2"}) as c:
        yield c


async def _wait_for(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


async def _topic(cluster: LocalCluster) -> str:
    topic = new_topic_name("failover")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    return topic


async def _raw(address: str, payload: Any) -> Any:
    client = await RawClient.connect(address)
    try:
        return await client.call(payload)
    finally:
        client.close()


async def _coordinator(cluster: LocalCluster, group: str, ask: list[int]) -> int | None:
    """The group's coordinator as one of the nodes ``ask`` names it (None while there is none)."""
    for node in ask:
        with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
            found = await _raw(cluster.address(node), req(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[group]))
            for c in found.coordinators:
                if c.error_code == ErrorCode.none:
                    return int(c.node_id)
    return None


async def _kill_coordinator(cluster: LocalCluster, group: str) -> tuple[int, int]:
    """Kill the group's coordinator; (the killed node, the new coordinator) once one is named."""
    old = await _coordinator(cluster, group, cluster.node_ids)
    assert old is not None
    await cluster.kill(old)
    survivors = [n for n in cluster.node_ids if n != old]
    new: int | None = None

    async def moved() -> bool:
        nonlocal new
        new = await _coordinator(cluster, group, survivors)
        return new is not None and new != old

    await _wait_for(moved, 60, f"a new coordinator of {group}")
    assert new is not None
    return old, new


async def _described(cluster: LocalCluster, node: int, group: str) -> Any:
    """The group as ``node`` describes it (it may still be loading: then error_code says so)."""
    answer = await _raw(cluster.address(node), req(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False))
    return answer.groups[0]


async def _loaded(cluster: LocalCluster, node: int, group: str) -> Any:
    described: Any = None

    async def loaded() -> bool:
        nonlocal described
        with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
            described = await _described(cluster, node, group)
            return bool(described.error_code == ErrorCode.none)
        return False

    await _wait_for(loaded, 30, f"node {node} to load {group}")
    return described


async def _heal(cluster: LocalCluster, node: int) -> None:
    await cluster.start_node(node)


# ---- kafkakit --------------------------------------------------------------------------------


class _Counting(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(f"revoked {sorted(revoked)}")

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(f"assigned {sorted(assigned)}")

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(f"lost {sorted(lost)}")


async def _poll(consumer: Consumer, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await consumer.getmany(timeout_ms=200)


async def test_kafkakit_members_keep_their_generation_across_a_coordinator_failover(cluster: LocalCluster) -> None:
    topic = await _topic(cluster)
    group = new_topic_name("g-failover")
    settings: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap_servers, "group_id": group, "auto_offset_reset": "earliest",
        "enable_auto_commit": False, "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 500,
        "request_timeout_ms": 10_000,
    }  # fmt: skip
    listeners = [_Counting(), _Counting()]
    stop = asyncio.Event()
    async with Consumer(client_id="m0", **settings) as first, Consumer(client_id="m1", **settings) as second:
        consumers = [first, second]
        for consumer, listener in zip(consumers, listeners, strict=True):
            consumer.subscribe([topic], listener=listener)
        polls = [asyncio.create_task(_poll(c, stop)) for c in consumers]
        killed: int | None = None
        try:

            async def stable() -> bool:
                owned = [c.assignment() for c in consumers]
                generations = {c.group_metadata().generation_id for c in consumers}
                return all(owned) and len(owned[0] | owned[1]) == PARTITIONS and len(generations) == 1

            await _wait_for(stable, 60, "both members to share the partitions")
            await asyncio.sleep(1.5)  # nothing more to settle (a cooperative second round would show)
            assert await stable()
            before = [c.group_metadata() for c in consumers]
            owned = [c.assignment() for c in consumers]
            events = [list(listener.events) for listener in listeners]
            for consumer in consumers:
                await consumer.commit({tp: 1 for tp in consumer.assignment()})

            killed, coordinator = await _kill_coordinator(cluster, group)
            described = await _loaded(cluster, coordinator, group)

            # The old generation is the current one there: Heartbeat and OffsetCommit succeed.
            address = cluster.address(coordinator)
            for meta in before:
                beat = await _raw(address, req(HEARTBEAT, 4, group_id=group, generation_id=meta.generation_id,
                                               member_id=meta.member_id, group_instance_id=None))  # fmt: skip
                assert beat.error_code == ErrorCode.none, f"Heartbeat of {meta.member_id}: {beat.error_code!r}"
                partition = sub(OFFSET_COMMIT, 8, "OffsetCommitRequestPartition", partition_index=0,
                                committed_offset=2, committed_leader_epoch=-1, committed_metadata=None)  # fmt: skip
                commit = await _raw(address, req(
                    OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=meta.generation_id,
                    member_id=meta.member_id, group_instance_id=None,
                    topics=[sub(OFFSET_COMMIT, 8, "OffsetCommitRequestTopic", name=topic, partitions=[partition])],
                ))  # fmt: skip
                errors = [p.error_code for t in commit.topics for p in t.partitions]
                assert errors == [ErrorCode.none], f"OffsetCommit of {meta.member_id}: {errors!r}"
            # The new coordinator loaded the group Stable with both members.
            assert described.group_state == "Stable"
            assert {m.member_id for m in described.members} == {m.member_id for m in before}

            # The consumers themselves commit through the new coordinator, and keep heartbeating
            # with their generation for a while (several heartbeat intervals): no rebalance.
            for consumer in consumers:
                await consumer.commit({tp: 3 for tp in consumer.assignment()})
            await asyncio.sleep(3)
            for consumer in consumers:
                await consumer.commit({tp: 4 for tp in consumer.assignment()})
            assert [c.group_metadata() for c in consumers] == before
            assert [c.assignment() for c in consumers] == owned
            assert [list(listener.events) for listener in listeners] == events
            assert (await _described(cluster, coordinator, group)).group_state == "Stable"
        finally:
            stop.set()
            await asyncio.gather(*polls, return_exceptions=True)
            if killed is not None:
                await _heal(cluster, killed)


# ---- confluent-kafka (librdkafka) --------------------------------------------------------------


class _ConfluentMember:
    """A confluent-kafka consumer polled on its own thread; commits run on that thread too."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        from confluent_kafka import Consumer as ConfluentConsumer

        self.consumer = ConfluentConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        })  # fmt: skip
        self.events: list[str] = []
        self.owned: set[int] = set()
        self.member_id = ""
        self._stop = threading.Event()
        self._commits: list[tuple[int, threading.Event, list[BaseException | None]]] = []
        self._lock = threading.Lock()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        self.topic = topic
        self._thread = threading.Thread(target=self._run, name=f"confluent-{name}", daemon=True)
        self._thread.start()

    def _assigned(self, _consumer: Any, partitions: list[Any]) -> None:
        self.events.append(f"assigned {sorted(p.partition for p in partitions)}")
        self.owned = {p.partition for p in partitions}

    def _revoked(self, _consumer: Any, partitions: list[Any]) -> None:
        self.events.append(f"revoked {sorted(p.partition for p in partitions)}")
        self.owned = set()

    def _lost(self, _consumer: Any, partitions: list[Any]) -> None:
        self.events.append(f"lost {sorted(p.partition for p in partitions)}")
        self.owned = set()

    def _run(self) -> None:
        from confluent_kafka import TopicPartition as ConfluentPartition

        while not self._stop.is_set():
            self.consumer.poll(0.1)
            self.member_id = self.consumer.memberid() or ""
            with self._lock:
                pending, self._commits = self._commits, []
            for offset, done, outcome in pending:
                try:
                    offsets = [ConfluentPartition(self.topic, p, offset) for p in sorted(self.owned)]
                    self.consumer.commit(offsets=offsets, asynchronous=False)
                    outcome.append(None)
                except BaseException as exc:  # the test reports it
                    outcome.append(exc)
                done.set()
        self.consumer.close()

    async def commit(self, offset: int) -> None:
        """Commit ``offset`` for every owned partition, synchronously on the polling thread."""
        done, outcome = threading.Event(), []
        with self._lock:
            self._commits.append((offset, done, outcome))
        assert await asyncio.to_thread(done.wait, 60), "the commit did not finish"
        if outcome[0] is not None:
            raise AssertionError(f"commit failed: {outcome[0]!r}")

    async def close(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)


async def test_confluent_kafka_members_are_not_rebalanced_by_a_coordinator_failover(cluster: LocalCluster) -> None:
    pytest.importorskip("confluent_kafka")
    topic = await _topic(cluster)
    group = new_topic_name("g-failover-ck")
    members = [_ConfluentMember(cluster.bootstrap_servers, topic, group, f"ck{i}") for i in range(2)]
    killed: int | None = None
    try:

        async def stable() -> bool:
            owned = [m.owned for m in members]
            if not all(owned) or len(owned[0] | owned[1]) != PARTITIONS:
                return False
            coordinator = await _coordinator(cluster, group, cluster.node_ids)
            if coordinator is None:
                return False
            described = await _described(cluster, coordinator, group)
            ids = {m.member_id for m in described.members}
            return bool(described.group_state == "Stable" and ids == {m.member_id for m in members})

        await _wait_for(stable, 60, "both confluent members to share the partitions")
        await asyncio.sleep(1.5)
        assert await stable()
        ids = [m.member_id for m in members]
        owned = [set(m.owned) for m in members]
        events = [list(m.events) for m in members]
        for member in members:
            await member.commit(1)

        killed, coordinator = await _kill_coordinator(cluster, group)
        described = await _loaded(cluster, coordinator, group)
        for member in members:
            await member.commit(2)
        await asyncio.sleep(3)
        for member in members:
            await member.commit(3)
        assert [list(m.events) for m in members] == events
        assert [m.member_id for m in members] == ids
        assert [m.owned for m in members] == owned
        assert described.group_state == "Stable"
        assert {m.member_id for m in described.members} == set(ids)
        after = await _described(cluster, coordinator, group)
        assert (after.group_state, {m.member_id for m in after.members}) == ("Stable", set(ids))
    finally:
        await asyncio.gather(*(m.close() for m in members), return_exceptions=True)
        if killed is not None:
            await _heal(cluster, killed)
