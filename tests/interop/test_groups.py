"""Third-party consumer groups on broker_min: confluent-kafka, aiokafka and kafka-python.

Each consumer runs ``subscribe`` with a ``group_id`` in its own thread (aiokafka
on its own event loop there) and reports what it owns; the tests wait until
the members' assignments split the topic's partitions with no overlap and no
gap.  Beyond that: commits survive a broker_min restart, one group mixes the
three clients (they only share the round-robin assignor, so the coordinator
must select it), librdkafka's cooperative-sticky assignor keeps unaffected
partitions through a rebalance, and a static member (``group.instance.id``)
restarting gets its partitions back without rebalancing the others.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import BrokerMinServer

from .checks import text_records
from .clients import produce_confluent
from .conftest import INTEROP_BROKER, TopicFactory, create_topic_confluent

pytestmark = pytest.mark.interop

PARTITIONS = 6
RECORDS = 60
SETTLE_S = 45.0
# Short timings so rebalances settle in a few seconds (6 s is the broker's minimum session).
SESSION_MS = 6000
HEARTBEAT_MS = 500


_SERIAL = itertools.count()


class GroupConsumer(threading.Thread):
    """One group member of some client kind, polling in a thread until stopped.

    ``assignment`` is its current set of partitions, ``consumed`` every
    (partition, offset) it returned, ``assign_calls``/``revoked`` what its
    rebalance callbacks saw (confluent only).
    """

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str, **config: Any) -> None:
        super().__init__(name=f"{kind}-{group}-{next(_SERIAL)}", daemon=True)
        self.kind, self.bootstrap, self.topic, self.group, self.config = kind, bootstrap, topic, group, config
        self.assignment: frozenset[int] = frozenset()
        self.consumed: list[tuple[int, int]] = []
        self.assign_calls = 0
        self.revoked: list[frozenset[int]] = []
        self.error: BaseException | None = None
        self.stop_requested = threading.Event()
        self.commit_on_stop: dict[int, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            if self.kind == "confluent":
                self._run_confluent()
            elif self.kind == "aiokafka":
                asyncio.run(self._run_aiokafka())
            elif self.kind == "kafka-python":
                self._run_kafka_python()
            else:
                raise ValueError(self.kind)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _set_assignment(self, partitions: Iterator[int] | Sequence[int] | set[int]) -> None:
        with self._lock:
            self.assignment = frozenset(partitions)

    def _record(self, partition: int, offset: int) -> None:
        with self._lock:
            self.consumed.append((partition, offset))

    # -- confluent-kafka ---------------------------------------------------------------------

    def _run_confluent(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                **self.config,
            }
        )
        cooperative = self.config.get("partition.assignment.strategy") == "cooperative-sticky"

        def on_assign(c: Any, partitions: list[Any]) -> None:
            self.assign_calls += 1
            added = {p.partition for p in partitions}
            self._set_assignment((self.assignment | added) if cooperative else added)

        def on_revoke(c: Any, partitions: list[Any]) -> None:
            gone = frozenset(p.partition for p in partitions)
            self.revoked.append(gone)
            self._set_assignment(self.assignment - gone if cooperative else set())

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop_requested.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    self._record(message.partition(), message.offset())
            if self.commit_on_stop:
                consumer.commit(
                    offsets=[
                        TopicPartition(self.topic, p, offset, metadata)
                        for p, (offset, metadata) in self.commit_on_stop.items()
                    ],
                    asynchronous=False,
                )
        finally:
            consumer.close()

    # -- aiokafka ----------------------------------------------------------------------------

    async def _run_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **self.config,
        )
        await consumer.start()
        try:
            while not self.stop_requested.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for record in records:
                        self._record(tp.partition, record.offset)
                self._set_assignment({tp.partition for tp in consumer.assignment()})
        finally:
            await consumer.stop()

    # -- kafka-python ------------------------------------------------------------------------

    def _run_kafka_python(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **self.config,
        )
        try:
            while not self.stop_requested.is_set():
                batches = consumer.poll(timeout_ms=100)
                for tp, records in batches.items():
                    for record in records:
                        self._record(tp.partition, record.offset)
                self._set_assignment({tp.partition for tp in consumer.assignment()})
        finally:
            consumer.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the thread to close its consumer, wait for it, and re-raise what it failed with."""
        self.stop_requested.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.name} did not close within {timeout}s")
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error


def wait_for_split(
    members: Sequence[GroupConsumer], partitions: int = PARTITIONS, settle_s: float = 1.0
) -> None:
    """Wait until every member owns something and together they own each partition exactly once,
    unchanged for ``settle_s`` seconds."""
    deadline = time.monotonic() + SETTLE_S
    stable_since: float | None = None
    last: list[frozenset[int]] = []
    while time.monotonic() < deadline:
        for m in members:
            if m.error is not None:
                raise AssertionError(f"{m.name} failed: {m.error!r}") from m.error
        current = [m.assignment for m in members]
        if is_split(current, partitions):
            if current != last:
                stable_since = time.monotonic()
            elif stable_since is not None and time.monotonic() - stable_since >= settle_s:
                return
        else:
            stable_since = None
        last = current
        time.sleep(0.05)
    raise AssertionError(f"assignments never split {partitions} partitions: {[sorted(a) for a in last]}")


def is_split(assignments: Sequence[frozenset[int]], partitions: int) -> bool:
    """Non-empty, pairwise disjoint, and covering 0..partitions-1."""
    union: set[int] = set()
    for a in assignments:
        if not a or union & a:
            return False
        union |= a
    return union == set(range(partitions))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def filled_topic(bootstrap: str, new_topic: TopicFactory) -> str:
    """A fresh 6-partition topic with 10 records in each partition."""
    topic = new_topic(PARTITIONS, prefix="groups")
    produce_confluent(bootstrap, topic, text_records(RECORDS, PARTITIONS, timestamps=None))
    return topic


def start_group(
    kinds: Sequence[str], bootstrap: str, topic: str, group: str, **config: Any
) -> list[GroupConsumer]:
    members = [GroupConsumer(kind, bootstrap, topic, group, **config) for kind in kinds]
    for m in members:
        m.start()
    return members


def stop_all(members: Sequence[GroupConsumer]) -> None:
    errors = []
    for m in members:
        try:
            m.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    assert not errors, errors


@pytest.mark.parametrize("kind", ["confluent", "aiokafka", "kafka-python"])
def test_three_members_of_one_client_split_six_partitions(
    bootstrap: str, filled_topic: str, kind: str
) -> None:
    group = f"split-{kind}-{uuid.uuid4().hex[:8]}"
    members = start_group([kind] * 3, bootstrap, filled_topic, group)
    try:
        wait_for_split(members)
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
        # Every record reached the member that owns its partition.
        wait_until(
            lambda: (
                all({p for p, _ in m.consumed} >= m.assignment for m in members)
                and {(p, o) for m in members for p, o in m.consumed}
                >= {(p, o) for p in range(6) for o in range(10)}
            ),
            "every record to be consumed",
        )
    finally:
        stop_all(members)


def test_a_mixed_group_of_three_clients_splits_the_partitions(bootstrap: str, filled_topic: str) -> None:
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    members = start_group(["confluent", "aiokafka", "kafka-python"], bootstrap, filled_topic, group)
    try:
        wait_for_split(members)
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
    finally:
        stop_all(members)


def test_confluent_cooperative_sticky_keeps_unaffected_partitions(bootstrap: str, filled_topic: str) -> None:
    group = f"coop-{uuid.uuid4().hex[:8]}"
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    members = start_group(["confluent"] * 3, bootstrap, filled_topic, group, **config)
    try:
        wait_for_split(members)
        leaving, *staying = members
        kept = [m.assignment for m in staying]
        revoked_before = [len(m.revoked) for m in staying]
        leaving.stop()
        wait_for_split(staying)
        for m, owned, seen in zip(staying, kept, revoked_before, strict=True):
            assert m.assignment >= owned, (
                f"a staying member lost a partition: {sorted(owned)} -> {sorted(m.assignment)}"
            )
            for gone in m.revoked[seen:]:
                assert not gone & owned, f"a staying member had {sorted(gone)} revoked"
    finally:
        stop_all([m for m in members if m.is_alive()])


def test_confluent_static_member_restart_keeps_its_partitions_without_a_rebalance(
    bootstrap: str, filled_topic: str
) -> None:
    group = f"static-{uuid.uuid4().hex[:8]}"
    static_config = {"group.instance.id": f"{group}-pod-0", "session.timeout.ms": 15000}
    static = GroupConsumer("confluent", bootstrap, filled_topic, group, **static_config)
    other = GroupConsumer("confluent", bootstrap, filled_topic, group)
    static.start()
    other.start()
    restarted: GroupConsumer | None = None
    try:
        wait_for_split([static, other])
        owned, others_owned, others_assigns = static.assignment, other.assignment, other.assign_calls
        static.stop()  # a static member sends no LeaveGroup on close
        restarted = GroupConsumer("confluent", bootstrap, filled_topic, group, **static_config)
        restarted.start()
        wait_until(
            lambda: bool(restarted and restarted.assignment), "the restarted static member's assignment"
        )
        time.sleep(2 * HEARTBEAT_MS / 1000)  # long enough for a rebalance to show in the other member
        assert restarted.assignment == owned
        assert (other.assignment, other.assign_calls) == (others_owned, others_assigns)
    finally:
        stop_all([m for m in (other, restarted) if m is not None and m.is_alive()])


@pytest.mark.skipif(INTEROP_BROKER != "broker_min", reason="restarts broker_min itself (its own data dir)")
def test_committed_offsets_survive_a_broker_min_restart(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KPTopicPartition

    data = tmp_path / "data"
    server = BrokerMinServer(data)
    server.start()
    group = "restart-group"
    try:
        topic = "restart-topic"
        create_topic_confluent(server.bootstrap_servers, topic, PARTITIONS)
        members = start_group(["confluent"] * 2, server.bootstrap_servers, topic, group)
        try:
            wait_for_split(members)
            for m in members:
                m.commit_on_stop = {p: (10 + p, f"meta-{p}") for p in m.assignment}
        finally:
            stop_all(members)
    finally:
        server.stop()
    server = BrokerMinServer(data)
    server.start()
    try:
        consumer = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group})
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        finally:
            consumer.close()
        assert [(tp.partition, tp.offset, tp.metadata) for tp in committed] == [
            (p, 10 + p, f"meta-{p}") for p in range(PARTITIONS)
        ]
        kp = KafkaConsumer(
            bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
        )
        try:
            assert kp.committed(KPTopicPartition(topic, 3)) == 13
        finally:
            kp.close()
    finally:
        server.stop()
