"""KIP-932 share groups on broker_min and Apache Kafka 4.3.1: the same tests against both.

The members here speak the protocol by hand (tests/raw_protocol.py): ShareGroupHeartbeat to
join and get an assignment, ShareFetch with share sessions to acquire records and carry
acknowledgements, ShareAcknowledge for the rest, so that delivery counts, acquisition locks
and acknowledgement errors are checked exactly.  A last test runs Apache Kafka's own
KafkaShareConsumer (tests/java/ShareGroupConsumers.java) against each broker.

Group configs (``share.auto.offset.reset``, ``share.record.lock.duration.ms``,
``share.delivery.count.limit``) are set with IncrementalAlterConfigs on the GROUP resource, as
with Kafka; the Kafka fixture allows lock durations down to 1 s
(``group.share.min.record.lock.duration.ms``).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, NewTopic, Producer, TopicPartition
from kafkakit.broker.coordinators import share_coordinator
from kafkakit.broker.handlers.base import make, nested
from kafkakit.protocol import request_class
from kio.schema.errors import ErrorCode

from tests.brokers import BrokerMinServer, ensure_kafka_jars, missing_kafka_tools
from tests.raw_protocol import RawClient, req, sub

HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
DESCRIBE_OFFSETS, LIST_GROUPS, INCREMENTAL_ALTER_CONFIGS = 90, 16, 44
GROUP_RESOURCE = 32
ACCEPT, RELEASE, REJECT = 1, 2, 3
JAVA_CONSUMERS = Path(__file__).parent / "java" / "ShareGroupConsumers.java"


async def _topic_with_records(bootstrap: str, topic: str, count: int) -> uuid.UUID:
    """Create a 1-partition topic holding ``count`` records (one batch each); its topic id."""
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for i in range(count):
            await (await producer.send(topic, b"v%d" % i, partition=0))
    client = await RawClient.connect(bootstrap)
    try:
        metadata = await client.call(
            req(3, 12, topics=(sub(3, 12, "MetadataRequestTopic", name=topic, topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)  # fmt: skip
        )
    finally:
        client.close()
    topic_id: uuid.UUID = metadata.topics[0].topic_id
    return topic_id


async def _group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Set share group configs (``share_record_lock_duration_ms="1000"`` -> share.record.lock.duration.ms)."""
    client = await RawClient.connect(bootstrap)
    try:
        entries = tuple(
            sub(INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig", name=k.replace("_", "."), config_operation=0, value=v)
            for k, v in configs.items()
        )
        resource = sub(INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource", resource_type=GROUP_RESOURCE,
                       resource_name=group, configs=entries)  # fmt: skip
        response = await client.call(req(INCREMENTAL_ALTER_CONFIGS, 1, resources=(resource,), validate_only=False))
    finally:
        client.close()
    assert [r.error_code for r in response.responses] == [ErrorCode.none], response


class Member:
    """One share group member over its own connection."""

    def __init__(self, client: RawClient, group: str, topic: str, topic_id: uuid.UUID) -> None:
        self.client, self.group, self.topic, self.topic_id = client, group, topic, topic_id
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.session_epoch = 0

    @classmethod
    async def join(cls, bootstrap: str, group: str, topic: str, topic_id: uuid.UUID) -> Member:
        member = cls(await RawClient.connect(bootstrap), group, topic, topic_id)
        member.client.timeout = 15.0
        deadline = time.monotonic() + 20
        while True:  # Kafka creates __consumer_offsets on the first FindCoordinator
            found = await member.client.call(req(10, 4, key_type=0, coordinator_keys=(group,)))
            if found.coordinators[0].error_code == ErrorCode.none:
                break
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.2)
        while True:
            response = await member.heartbeat(subscribe=True)
            if response.error_code == ErrorCode.none and response.assignment is not None:
                parts = [tp.partitions for tp in response.assignment.topic_partitions if tp.topic_id == topic_id]
                if parts and 0 in parts[0]:
                    return member
            assert time.monotonic() < deadline, response
            await asyncio.sleep(0.2)

    async def heartbeat(self, *, subscribe: bool = False, leave: bool = False) -> Any:
        response = await self.client.call(
            req(HEARTBEAT, 1, group_id=self.group, member_id=self.member_id, member_epoch=-1 if leave else self.epoch,
                rack_id=None, subscribed_topic_names=(self.topic,) if subscribe or self.epoch == 0 else None)  # fmt: skip
        )
        if response.error_code == ErrorCode.none and not leave:
            self.epoch = response.member_epoch
        return response

    def _acks(self, api_key: int, version: int, owner: str, acks: list[tuple[int, int, int]]) -> tuple[Any, ...]:
        batch = nested(request_class(api_key, version), "AcknowledgementBatch")
        return tuple(make(batch, first_offset=f, last_offset=la, acknowledge_types=(t,)) for f, la, t in acks)

    async def fetch(
        self, acks: list[tuple[int, int, int]] = (), max_records: int = 100, max_wait_ms: int = 500  # type: ignore[assignment]
    ) -> list[tuple[int, int]]:
        """One ShareFetch (carrying ``acks``): the acquired (offset, delivery count) pairs."""
        partition = sub(SHARE_FETCH, 1, "FetchPartition", partition_index=0,
                        acknowledgement_batches=self._acks(SHARE_FETCH, 1, "FetchPartition", list(acks)))  # fmt: skip
        response = await self.client.call(
            req(SHARE_FETCH, 1, group_id=self.group, member_id=self.member_id, share_session_epoch=self.session_epoch,
                max_wait=_ms(max_wait_ms), min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                topics=(sub(SHARE_FETCH, 1, "FetchTopic", topic_id=self.topic_id, partitions=(partition,)),),
                forgotten_topics_data=())  # fmt: skip
        )
        assert response.error_code == ErrorCode.none, response
        self.session_epoch += 1
        got = []
        for topic in response.responses:
            for p in topic.partitions:
                assert p.error_code == ErrorCode.none, p
                assert p.acknowledge_error_code == 0, p
                for r in p.acquired_records:
                    got.extend((o, r.delivery_count) for o in range(r.first_offset, r.last_offset + 1))
        return got

    async def fetch_until(self, want: int, *, timeout: float = 20.0, acks: list[tuple[int, int, int]] = (),  # type: ignore[assignment]
                          max_records: int = 100) -> list[tuple[int, int]]:  # fmt: skip
        """Fetch until at least ``want`` records are acquired (Kafka initializes share-partitions
        asynchronously, so the first fetches may find nothing)."""
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + timeout
        pending = list(acks)
        while len(got) < want and time.monotonic() < deadline:
            got += await self.fetch(pending, max_records=max_records - len(got))
            pending = []
        return got

    async def acknowledge(self, acks: list[tuple[int, int, int]]) -> ErrorCode:
        partition = sub(SHARE_ACKNOWLEDGE, 1, "AcknowledgePartition", partition_index=0,
                        acknowledgement_batches=self._acks(SHARE_ACKNOWLEDGE, 1, "AcknowledgePartition", acks))  # fmt: skip
        response = await self.client.call(
            req(SHARE_ACKNOWLEDGE, 1, group_id=self.group, member_id=self.member_id,
                share_session_epoch=self.session_epoch,
                topics=(sub(SHARE_ACKNOWLEDGE, 1, "AcknowledgeTopic", topic_id=self.topic_id, partitions=(partition,)),))  # fmt: skip
        )
        assert response.error_code == ErrorCode.none, response
        self.session_epoch += 1
        codes = [p.error_code for t in response.responses for p in t.partitions]
        return codes[0] if codes else ErrorCode.none

    async def close(self, *, leave: bool = True) -> None:
        if leave:
            await self.heartbeat(leave=True)
        self.client.close()


def _ms(value: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=value)


async def _start_offset(bootstrap: str, group: str, topic: str) -> int:
    client = await RawClient.connect(bootstrap)
    try:
        response = await client.call(
            req(DESCRIBE_OFFSETS, 1, groups=(sub(DESCRIBE_OFFSETS, 1, "DescribeShareGroupOffsetsRequestGroup",
                group_id=group, topics=(sub(DESCRIBE_OFFSETS, 1, "DescribeShareGroupOffsetsRequestTopic",
                                            topic_name=topic, partitions=(0,)),)),))  # fmt: skip
        )
    finally:
        client.close()
    start: int = response.groups[0].topics[0].partitions[0].start_offset
    return start


# ---------------------------------------------------------------------------------------------------- tests


async def test_four_members_of_one_partition_all_receive_records(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    topic_id = await _topic_with_records(bootstrap, topic, 40)
    members = [await Member.join(bootstrap, group, topic, topic_id) for _ in range(4)]
    try:
        seen: dict[int, list[int]] = {i: [] for i in range(4)}
        deadline = time.monotonic() + 30
        pending: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(4)}
        while sum(len(v) for v in seen.values()) < 40 and time.monotonic() < deadline:
            for i, member in enumerate(members):  # each takes a few records in turn
                got = await member.fetch(pending[i], max_records=3, max_wait_ms=200)
                pending[i] = [(o, o, ACCEPT) for o, _ in got]
                seen[i] += [o for o, _ in got]
        offsets = sorted(o for v in seen.values() for o in v)
        assert offsets == list(range(40))  # every record once
        assert all(seen.values()), seen  # every member got some
        for i, member in enumerate(members):
            assert await member.acknowledge(pending[i]) == ErrorCode.none
        await _settled_start(broker, group, topic, 40)
    finally:
        for member in members:
            await member.close()


async def test_released_record_is_redelivered_and_rejected_one_never(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    topic_id = await _topic_with_records(bootstrap, topic, 3)
    member = await Member.join(bootstrap, group, topic, topic_id)
    try:
        first = await member.fetch_until(3)
        assert first == [(0, 1), (1, 1), (2, 1)]
        # 0 accepted, 1 released (comes back with delivery count 2), 2 rejected (never again).
        again = await member.fetch_until(1, acks=[(0, 0, ACCEPT), (1, 1, RELEASE), (2, 2, REJECT)])
        assert again == [(1, 2)]
        assert await member.fetch(max_wait_ms=300) == []
        # Acknowledging a record this member does not hold is refused.
        assert await member.acknowledge([(2, 2, ACCEPT)]) == ErrorCode.invalid_record_state
        assert await member.acknowledge([(1, 1, ACCEPT)]) == ErrorCode.none
        await _settled_start(broker, group, topic, 3)
    finally:
        await member.close()


async def test_lock_timeout_redelivers_a_crashed_members_records(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    topic_id = await _topic_with_records(bootstrap, topic, 5)
    crashed = await Member.join(bootstrap, group, topic, topic_id)
    survivor = await Member.join(bootstrap, group, topic, topic_id)
    try:
        before_acquiring = time.monotonic()
        taken = await crashed.fetch_until(5)
        assert [o for o, _ in taken] == list(range(5))
        # Hung, not gone: no acknowledgement, no leave, and its connection stays open (Apache
        # Kafka releases a member's records at once when its connection closes).
        redelivered = await survivor.fetch_until(5, timeout=15)
        assert sorted(redelivered) == [(o, 2) for o in range(5)]
        # Only once the 1 s locks expired; they were taken after before_acquiring.
        assert time.monotonic() - before_acquiring >= 0.9
        await survivor.acknowledge([(0, 4, ACCEPT)])
    finally:
        crashed.client.close()
        await survivor.close()


async def test_delivery_count_limit_archives_a_poison_record(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    topic_id = await _topic_with_records(bootstrap, topic, 2)
    member = await Member.join(bootstrap, group, topic, topic_id)
    try:
        counts = []
        got = await member.fetch_until(2)
        assert got == [(0, 1), (1, 1)]
        acks = [(0, 0, RELEASE), (1, 1, ACCEPT)]  # record 0 is poison: always released
        for _ in range(5):
            got = await member.fetch_until(1, acks=acks, timeout=3)
            counts += [c for o, c in got if o == 0]
            acks = [(0, 0, RELEASE)] if got else []
            if not got:
                break
        assert counts == [2, 3]  # delivered 3 times in all, then archived
        await _settled_start(broker, group, topic, 2)
    finally:
        await member.close()


async def test_alter_and_list_share_group(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    topic_id = await _topic_with_records(bootstrap, topic, 4)
    member = await Member.join(bootstrap, group, topic, topic_id)  # latest by default: nothing to read
    assert await member.fetch(max_wait_ms=300) == []
    client = await RawClient.connect(bootstrap)
    try:
        listed = await client.call(req(LIST_GROUPS, 5, states_filter=(), types_filter=("share",)))
        assert (group, "share") in [(g.group_id, g.group_type) for g in listed.groups]
        # broker_min persists where a share-partition starts at once; Kafka only with its first
        # acknowledgement (-1 until then).
        assert await _start_offset(bootstrap, group, topic) in ((4,) if broker.kind == "broker_min" else (4, -1))
        await member.close()
        request = req(91, 0, group_id=group, topics=(sub(91, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=topic,
                      partitions=(sub(91, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=0, start_offset=1),)),))  # fmt: skip
        altered = await _eventually_ok(client, request)
        assert [p.error_code for t in altered.responses for p in t.partitions] == [ErrorCode.none]
        assert await _start_offset(bootstrap, group, topic) == 1
        again = await Member.join(bootstrap, group, topic, topic_id)
        try:
            assert [o for o, _ in await again.fetch_until(3)] == [1, 2, 3]
        finally:
            await again.close()
        deleted = await _eventually_ok(client, req(42, 2, groups_names=(group,)), lambda r: r.results[0].error_code)
        assert deleted.results[0].error_code == ErrorCode.none
        listed = await client.call(req(LIST_GROUPS, 5, states_filter=(), types_filter=("share",)))
        assert group not in [g.group_id for g in listed.groups]
    finally:
        client.close()


async def test_no_record_lost_across_broker_min_restart(
    tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Share state comes back from ``__share_group_state``; a snapshot every 2 updates also prunes
    the records below it, and the replay still finds everything."""
    monkeypatch.setattr(share_coordinator, "SNAPSHOT_EVERY", 2)
    group = f"{topic}-g"
    server = BrokerMinServer(tmp_path / "data")
    server.start()
    try:
        bootstrap = server.bootstrap_servers
        await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
        topic_id = await _topic_with_records(bootstrap, topic, 10)
        member = await Member.join(bootstrap, group, topic, topic_id)
        got = await member.fetch_until(10)
        # 0-3 accepted, 4 rejected, 5 released; 6-9 still held when the broker stops.
        for acks in ([(0, 1, ACCEPT)], [(2, 3, ACCEPT)], [(4, 4, REJECT)], [(5, 5, RELEASE)]):
            assert await member.acknowledge(acks) == ErrorCode.none
        assert len(got) == 10
        member.client.close()
        async with Admin(bootstrap_servers=bootstrap) as admin:
            state = TopicPartition("__share_group_state", 0)
            assert (await admin.list_offsets({state: "earliest"}))[state].offset > 0  # pruned
    finally:
        server.stop()
    server = BrokerMinServer(tmp_path / "data")
    server.start()
    try:
        bootstrap = server.bootstrap_servers
        assert await _start_offset(bootstrap, group, topic) == 5
        member = await Member.join(bootstrap, group, topic, topic_id)
        got = await member.fetch_until(5)
        # Released 5 keeps its delivery count; 6-9 were never acknowledged, so they come back.
        assert sorted(o for o, _ in got) == [5, 6, 7, 8, 9]
        assert dict(got)[5] == 2
        await member.acknowledge([(5, 9, ACCEPT)])
        assert await _start_offset(bootstrap, group, topic) == 10
        await member.close()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def java_share_consumers(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/java/ShareGroupConsumers.java compiled once (javac takes seconds): a class path."""
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    out = tmp_path_factory.mktemp("share-java")
    subprocess.run(["javac", "-cp", f"{lib}/*", "-d", str(out), str(JAVA_CONSUMERS)], check=True, timeout=180)
    return f"{out}:{lib}/*"


async def test_java_share_consumers_split_one_partition(broker: Any, topic: str, java_share_consumers: str) -> None:
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    await _topic_with_records(bootstrap, topic, 200)
    proc = await asyncio.create_subprocess_exec(
        "java", "-cp", java_share_consumers, "ShareGroupConsumers", bootstrap, group, topic, "4", "200",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out = (await asyncio.wait_for(proc.communicate(), 120))[0].decode()
    assert proc.returncode == 0, out[-3000:]
    counts = [int(line.split()[2]) for line in out.splitlines() if line.startswith("CONSUMER ")]
    assert len(counts) == 4 and all(counts), out[-3000:]
    assert "DISTINCT 200" in out, out[-3000:]
    await _settled_start(broker, group, topic, 200)


async def _settled_start(broker: Any, group: str, topic: str, want: int) -> None:
    """The share-partition start offset reaches ``want`` once everything below is acknowledged.

    Apache Kafka persists a share-partition's start offset one state write late (the write that
    moves it carries the previous value), so DescribeShareGroupOffsets may lag there; it is
    checked exactly on broker_min and as a lower bound on Kafka.
    """
    if broker.kind == "broker_min":
        await _eventually(lambda: _start_offset(broker.bootstrap_servers, group, topic), want)
    else:
        assert 0 <= await _start_offset(broker.bootstrap_servers, group, topic) <= want


async def _eventually(probe: Any, want: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got == want or time.monotonic() > deadline:
            assert got == want
            return
        await asyncio.sleep(0.2)


async def _eventually_ok(client: RawClient, request: Any, error: Any = None, timeout: float = 15.0) -> Any:
    """Kafka may still see the member that just left for a moment (NON_EMPTY_GROUP)."""
    error = error or (lambda response: response.error_code)
    deadline = time.monotonic() + timeout
    while True:
        response = await client.call(request)
        if error(response) == ErrorCode.none or time.monotonic() > deadline:
            assert error(response) == ErrorCode.none, response
            return response
        await asyncio.sleep(0.3)


async def test_confluent_share_consumer_release_and_redelivery(broker: Any, topic: str) -> None:
    """librdkafka's share consumer (confluent-kafka 2.16, explicit mode): a RELEASEd record comes
    back with delivery_count 2; the rest are accepted once."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not hasattr(confluent_kafka, "ShareConsumer"):
        pytest.skip("this confluent-kafka has no ShareConsumer")
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    await _topic_with_records(bootstrap, topic, 10)

    def consume() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        consumer = confluent_kafka.ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
        )
        first: list[tuple[int, int]] = []
        again: list[tuple[int, int]] = []
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 40
            while len(first) < 10 and time.monotonic() < deadline:
                for message in consumer.poll(0.5):
                    if message.error() is None:
                        first.append((message.offset(), message.delivery_count()))
                        kind = (confluent_kafka.AcknowledgeType.RELEASE if message.offset() == 0
                                else confluent_kafka.AcknowledgeType.ACCEPT)  # fmt: skip
                        consumer.acknowledge(message, kind)
                consumer.commit_sync()
            while not again and time.monotonic() < deadline:
                for message in consumer.poll(0.5):
                    if message.error() is None:
                        again.append((message.offset(), message.delivery_count()))
                        consumer.acknowledge(message)
            consumer.commit_sync()
        finally:
            consumer.close()
        return first, again

    first, again = await asyncio.to_thread(consume)
    assert sorted(first) == [(o, 1) for o in range(10)]
    assert again == [(0, 2)]
    await _settled_start(broker, group, topic, 10)


async def test_timed_out_member_leaves_and_its_records_return(broker_min: Any, topic: str) -> None:
    """broker_min only (Kafka's minimum share session timeout is 45 s): a member that stops
    heartbeating is removed after ``share.session.timeout.ms`` (ShareGroupDescribe no longer lists
    it) and its records are released at once, long before their 30 s locks expire."""
    bootstrap = broker_min.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_session_timeout_ms="1000")
    topic_id = await _topic_with_records(bootstrap, topic, 3)
    gone = await Member.join(bootstrap, group, topic, topic_id)
    stays = await Member.join(bootstrap, group, topic, topic_id)
    try:
        assert len(await gone.fetch_until(3)) == 3
        gone.client.close()
        for _ in range(3):  # the other member keeps its session alive
            await asyncio.sleep(0.45)
            assert (await stays.heartbeat()).error_code == ErrorCode.none
        client = await RawClient.connect(bootstrap)
        try:
            described = await client.call(req(77, 1, group_ids=(group,), include_authorized_operations=False))
        finally:
            client.close()
        (described_group,) = described.groups
        assert [m.member_id for m in described_group.members] == [stays.member_id]
        assert described_group.group_state == "Stable"
        assert sorted(await stays.fetch_until(3, timeout=5)) == [(0, 2), (1, 2), (2, 2)]
    finally:
        await stays.close()


async def test_waiting_fetch_gets_a_record_another_member_releases(broker: Any, topic: str) -> None:
    """A waiting ShareFetch gets a record another member releases: on broker_min at once (the release
    wakes it), on Kafka by the end of its wait (Kafka 4.3 does not wake it)."""
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    await _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    topic_id = await _topic_with_records(bootstrap, topic, 1)
    holder = await Member.join(bootstrap, group, topic, topic_id)
    waiter = await Member.join(bootstrap, group, topic, topic_id)
    try:
        assert await holder.fetch_until(1) == [(0, 1)]
        assert await waiter.fetch(max_wait_ms=100) == []
        waiting = asyncio.ensure_future(waiter.fetch(max_wait_ms=5000))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        assert await holder.acknowledge([(0, 0, RELEASE)]) == ErrorCode.none
        assert await waiting == [(0, 2)]
        if broker.kind == "broker_min":
            assert time.monotonic() - started < 3
        assert await waiter.acknowledge([(0, 0, ACCEPT)]) == ErrorCode.none
    finally:
        await holder.close()
        await waiter.close()


async def test_a_classic_member_cannot_join_a_share_groups_id(broker: Any, topic: str) -> None:
    """Group ids are one namespace: JoinGroup to a live share group is INCONSISTENT_GROUP_PROTOCOL."""
    bootstrap = broker.bootstrap_servers
    group = f"{topic}-g"
    topic_id = await _topic_with_records(bootstrap, topic, 1)
    member = await Member.join(bootstrap, group, topic, topic_id)
    try:
        protocol = sub(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b"")
        join = req(11, 5, group_id=group, session_timeout=_ms(10000), rebalance_timeout=_ms(10000),
                   member_id="", group_instance_id=None, protocol_type="consumer", protocols=(protocol,))  # fmt: skip
        answer = await member.client.call(join)
        assert answer.error_code == ErrorCode.inconsistent_group_protocol, answer
    finally:
        await member.close()
