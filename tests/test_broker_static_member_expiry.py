"""A static member that goes away without LeaveGroup empties its group at its session timeout.

Issue 11: two consumers, one static (``group.instance.id``), both
cooperative-sticky, in one group; each closes once it has read everything.  A
static member closes without LeaveGroup, so the group is only empty once the
coordinator expires its session, even while the group is rebalancing (the
dynamic member's LeaveGroup starts a rebalance the static member never joins).
Apache Kafka empties the group then, and ``kafka-consumer-groups --reset-offsets``
(an OffsetCommit without generation or member) is accepted from that moment.

Every test runs against each broker of the ``broker`` fixture, so broker_min and
Apache Kafka are held to the same bound: Empty within the session timeout plus
a little slack after the static member's close, and not long before it.
Sessions are the brokers' minimum (6 s) to keep the file fast.  Clients are
real: kafkakit's Consumer and Apache Kafka's own Java consumer, over sockets.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer

from tests.brokers import ensure_kafka_jars, missing_kafka_tools, new_topic_name
from tests.raw_protocol import RawClient, req, sub

SESSION_MS = 6000  # group.min.session.timeout.ms of both brokers
HEARTBEAT_MS = 500
# Expiry fires one session after the last heartbeat, which is at most one interval before the close.
EARLIEST_S = (SESSION_MS - HEARTBEAT_MS) / 1000 - 1.0
SLACK_S = 3.0
LATEST_S = SESSION_MS / 1000 + SLACK_S
PARTITIONS = 4
RECORDS = 40
DESCRIBE_GROUPS, OFFSET_COMMIT, OFFSET_FETCH = 15, 8, 9


# -- broker-side checks (raw requests, as kafka-consumer-groups sends them) ----------


async def describe(bootstrap: str, group: str) -> tuple[str, int]:
    """(state, member count) of ``group`` from DescribeGroups."""
    client = await RawClient.connect(bootstrap)
    try:
        answer = await client.call(
            req(DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=False)
        )
    finally:
        client.close()
    described = answer.groups[0]
    assert described.error_code.value == 0, described
    return described.group_state, len(described.members)


async def wait_until_empty(bootstrap: str, group: str, since: float, limit: float) -> float:
    """Seconds from ``since`` until the group is Empty; fails once ``limit`` seconds have passed."""
    while True:
        state, members = await describe(bootstrap, group)
        elapsed = time.monotonic() - since
        if state == "Empty":
            assert members == 0
            return elapsed
        assert elapsed < limit, f"group {group} still {state} with {members} member(s) after {elapsed:.1f}s"
        await asyncio.sleep(0.1)


async def reset_offsets(bootstrap: str, group: str, topic: str, offset: int) -> list[int]:
    """OffsetCommit with no generation and no member (an admin reset); the error code per partition."""
    partitions = tuple(
        sub(OFFSET_COMMIT, 8, "OffsetCommitRequestPartition", partition_index=p, committed_offset=offset,
            committed_leader_epoch=-1, committed_metadata="")
        for p in range(PARTITIONS)
    )  # fmt: skip
    topics = (sub(OFFSET_COMMIT, 8, "OffsetCommitRequestTopic", name=topic, partitions=partitions),)
    client = await RawClient.connect(bootstrap)
    try:
        answer = await client.call(
            req(OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=topics)
        )  # fmt: skip
        fetched = await client.call(
            req(OFFSET_FETCH, 7, group_id=group, require_stable=False,
                topics=(sub(OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name=topic,
                            partition_indexes=tuple(range(PARTITIONS))),))
        )  # fmt: skip
    finally:
        client.close()
    errors = [p.error_code.value for t in answer.topics for p in t.partitions]
    if errors == [0] * PARTITIONS:
        assert [p.committed_offset for p in fetched.topics[0].partitions] == [offset] * PARTITIONS
    return errors


async def fill_topic(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS)])
    producer = Producer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(topic, b"%d" % i, partition=i % PARTITIONS)
        await producer.flush()
    finally:
        await producer.stop()


async def assert_static_member_expires(bootstrap: str, group: str, topic: str, closed_at: float) -> None:
    """The group still holds the static member right after both closed, is Empty one session
    after its close, and then takes an admin offset reset."""
    state, members = await describe(bootstrap, group)
    assert members == 1, f"the static member must stay until its session expires ({state}, {members})"
    assert await reset_offsets(bootstrap, group, topic, 0) != [0] * PARTITIONS, (
        "a non-empty group took a reset"
    )
    took = await wait_until_empty(bootstrap, group, closed_at, LATEST_S)
    assert took >= EARLIEST_S, f"Empty {took:.1f}s after the close, before the static member's session ended"
    assert await reset_offsets(bootstrap, group, topic, 1) == [0] * PARTITIONS


# -- kafkakit consumers --------------------------------------------------------------


def member(bootstrap: str, group: str, topic: str, instance: str | None) -> Consumer:
    return Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )  # default strategy: cooperative-sticky first


async def read_all(consumers: list[Consumer], timeout: float = 30.0) -> None:
    """Poll every consumer until the group read each record, then until both own partitions."""
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < RECORDS or not all(c.assignment() for c in consumers):
        assert time.monotonic() < deadline, f"read {len(seen)} of {RECORDS} records"
        for consumer in consumers:
            for tp, records in (await consumer.getmany(timeout_ms=50)).items():
                seen.update((tp.partition, r.offset) for r in records)


@pytest.mark.parametrize("order", ["static_first", "dynamic_first"])
async def test_kafkakit_static_member_expires_and_group_empties(broker: Any, topic: str, order: str) -> None:
    bootstrap = broker.bootstrap_servers
    await fill_topic(bootstrap, topic)
    group = new_topic_name("static-expiry")
    static, dynamic = member(bootstrap, group, topic, "static-0"), member(bootstrap, group, topic, None)
    await static.start()
    await dynamic.start()
    closed_at = 0.0
    try:
        await read_all([static, dynamic])
    finally:
        # The static member sends no LeaveGroup; the dynamic one does, which starts a rebalance
        # the static member never joins (when it closed first) or joins and leaves unfinished.
        for consumer in [static, dynamic] if order == "static_first" else [dynamic, static]:
            await consumer.stop()
            if consumer is static:
                closed_at = time.monotonic()
    await assert_static_member_expires(bootstrap, group, topic, closed_at)


# -- Apache Kafka's Java consumer ----------------------------------------------------

JAVA_MEMBER = r"""
import java.io.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

// A group member like VerifiableConsumer: polls, commits what it read, prints READ <total>,
// and closes (no LeaveGroup when static) once its stdin is closed.
public class StaticGroupMember {
    static volatile boolean closing = false;
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace(System.out);
            System.exit(1);
        }
        System.out.println("CLOSED");
    }

    static void run(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        if (!args[3].equals("-")) props.put("group.instance.id", args[3]);
        props.put("partition.assignment.strategy", CooperativeStickyAssignor.class.getName());
        props.put("session.timeout.ms", args[4]);
        props.put("heartbeat.interval.ms", args[5]);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        Thread stdin = new Thread(() -> {
            try { while (System.in.read() >= 0) {} } catch (IOException e) {}
            closing = true;
        });
        stdin.setDaemon(true);
        stdin.start();
        long read = 0;
        int owned = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            while (!closing) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                if (!records.isEmpty()) {
                    read += records.count();
                    consumer.commitSync();
                    System.out.println("READ " + read);
                }
                if (consumer.assignment().size() != owned) {
                    owned = consumer.assignment().size();
                    System.out.println("OWNS " + owned);
                }
            }
        }
    }
}
"""


class JavaMember:
    """One Java consumer process; ``read`` and ``owns`` follow its output."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.read = 0
        self.owns = 0
        self.output: list[str] = []
        self._pump = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.output.append(line)
            if line.startswith("READ "):
                self.read = int(line.split()[1])
            elif line.startswith("OWNS "):
                self.owns = int(line.split()[1])

    async def close(self) -> None:
        """Close stdin: the consumer closes as KafkaConsumer.close() does, and the JVM exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = await asyncio.wait_for(self.proc.wait(), 60)
        await self._pump
        assert code == 0 and self.output[-1:] == ["CLOSED"], "\n".join(self.output[-40:])

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


async def test_java_static_member_expires_and_group_empties(broker: Any, topic: str, tmp_path: Path) -> None:
    reason = missing_kafka_tools()
    if reason is not None:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    source = tmp_path / "StaticGroupMember.java"
    source.write_text(JAVA_MEMBER)
    bootstrap = broker.bootstrap_servers
    await fill_topic(bootstrap, topic)
    group = new_topic_name("static-expiry-java")
    members: list[JavaMember] = []
    try:
        for instance in ("static-0", "-"):
            proc = await asyncio.create_subprocess_exec(
                "java", "-cp", f"{lib}/*", str(source), bootstrap, topic, group, instance,
                str(SESSION_MS), str(HEARTBEAT_MS),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            members.append(JavaMember(proc))
        static, dynamic = members
        deadline = time.monotonic() + 60
        while static.read + dynamic.read < RECORDS or not (static.owns and dynamic.owns):
            assert time.monotonic() < deadline, "\n".join(static.output[-20:] + dynamic.output[-20:])
            await asyncio.sleep(0.1)
        await static.close()  # no LeaveGroup: static membership
        closed_at = time.monotonic()
        await dynamic.close()  # LeaveGroup: a rebalance the static member never joins
    finally:
        for java in members:
            java.kill()
    await assert_static_member_expires(bootstrap, group, topic, closed_at)
