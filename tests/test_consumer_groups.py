"""Consumer groups end to end, against every broker kind (broker_min and Apache Kafka).

Members are real ``kafkakit.Consumer`` objects polling in background tasks over
real sockets; test data is written with confluent-kafka. Session timeouts are
the brokers' minimum (6 s) and heartbeats short, so a crash is detected fast.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafkakit.consumer import Consumer, ConsumerRebalanceListener
from kafkakit.consumer.assignors import RangeAssignor
from kafkakit.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalStateError,
    KafkaConfigError,
    RebalanceInProgressError,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

from tests.brokers import new_topic_name

SESSION_MS = 6000  # Kafka's (and broker_min's) group.min.session.timeout.ms
HEARTBEAT_MS = 300


# -- helpers -------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            if all(p.leader >= 0 for p in meta.partitions.values()):
                return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} did not become ready")


def produce_round_robin(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    """``count`` records spread over every partition; values are b"<n>"."""
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
        producer.poll(0)
    assert producer.flush(60) == 0


async def setup_topic(bootstrap: str, topic: str, partitions: int = 6) -> None:
    await asyncio.to_thread(create_topic, bootstrap, topic, partitions)


async def write(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    await asyncio.to_thread(produce_round_robin, bootstrap, topic, partitions, count, start)


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; returns the seconds it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def all_partitions(topic: str, n: int = 6) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


class RecordingListener(ConsumerRebalanceListener):
    """Remembers every callback; with ``member`` set, commits its pending offsets on revocation."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.member: Member | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", set(revoked)))
        if self.member is not None:
            await self.member.commit_pending(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", set(lost)))

    def partitions(self, kind: str) -> list[set[TopicPartition]]:
        return [tps for k, tps in self.events if k == kind]


class Member:
    """A group member polling in a background task and remembering what it read.

    With ``commit_after_process`` it commits what it processed after every
    batch; offsets it could not commit during a rebalance stay pending and are
    committed by its listener when their partitions are revoked.
    """

    def __init__(self, consumer: Consumer, *, commit_after_process: bool = False) -> None:
        self.consumer = consumer
        self.commit_after_process = commit_after_process
        self.records: list[tuple[TopicPartition, int]] = []
        self.arrivals: dict[TopicPartition, list[float]] = defaultdict(list)
        self.pending: dict[TopicPartition, int] = {}
        self.error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def group(self) -> Any:
        return self.consumer._group

    def assignment(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    async def start(self) -> Member:
        await self.consumer.start()
        await self.start_polling()
        return self

    async def start_polling(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        try:
            while True:
                batches = await self.consumer.getmany(timeout_ms=100)
                now = time.monotonic()
                for tp, records in batches.items():
                    self.records.extend((tp, r.offset) for r in records)
                    self.arrivals[tp].append(now)
                    self.pending[tp] = records[-1].offset + 1
                if self.commit_after_process and self.pending:
                    await self.commit_pending(set(self.pending))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc

    async def commit_pending(self, partitions: set[TopicPartition]) -> None:
        offsets = {tp: o for tp, o in self.pending.items() if tp in partitions}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (RebalanceInProgressError, CommitFailedError):
            return  # kept pending: committed on revocation (or after the rebalance)
        for tp, offset in offsets.items():
            if self.pending.get(tp) == offset:
                del self.pending[tp]

    async def _stop_polling(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def stop(self) -> None:
        """A clean exit: commit, revoke, LeaveGroup (dynamic members)."""
        await self._stop_polling()
        await self.consumer.stop()

    async def crash(self) -> None:
        """Vanish like a killed process: no commit, no callback, no LeaveGroup."""
        await self._stop_polling()
        await self.consumer._abort()

    def gaps(self, partitions: Iterable[TopicPartition], since: float) -> float:
        """The longest pause between record arrivals of ``partitions`` after ``since``."""
        worst = 0.0
        for tp in partitions:
            times = [t for t in self.arrivals[tp] if t >= since]
            worst = max([worst, *(b - a for a, b in zip(times, times[1:], strict=False))])
        return worst


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


def group_consumer(bootstrap: str, group: str, *topics: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("fetch_max_wait_ms", 100)
    kwargs.setdefault("session_timeout_ms", SESSION_MS)
    kwargs.setdefault("heartbeat_interval_ms", HEARTBEAT_MS)
    kwargs.setdefault("enable_auto_commit", False)
    return Consumer(*topics, bootstrap_servers=bootstrap, group_id=group, **kwargs)


def assert_partitioned(members: list[Member], expected: set[TopicPartition]) -> None:
    owned = [m.assignment() for m in members]
    union = set().union(*owned)
    assert union == expected, f"gap: {expected - union}, extra: {union - expected}"
    assert sum(len(o) for o in owned) == len(expected), f"overlap: {owned}"


def balanced(members: list[Member], expected: set[TopicPartition]) -> bool:
    owned = [m.assignment() for m in members]
    sizes = {len(o) for o in owned}
    return (
        set().union(*owned) == expected
        and sum(len(o) for o in owned) == len(expected)
        and max(sizes) - min(sizes) <= 1
        and all(m.group.state.value == "stable" and not m.group._rejoin_needed for m in members)
    )


# -- membership ------------------------------------------------------------------


async def test_three_members_split_six_partitions_then_one_leaves(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    members = [await Member(group_consumer(bootstrap, group, topic)).start() for _ in range(3)]
    try:
        await wait_for(
            lambda: balanced(members, all_partitions(topic)), 30, "3 members with 2 partitions each"
        )
        assert_partitioned(members, all_partitions(topic))
        assert all(len(m.assignment()) == 2 for m in members)
        leaving = members.pop(0)
        moved = leaving.assignment()
        await leaving.stop()
        # LeaveGroup makes the move immediate, well before the session timeout.
        took = await wait_for(lambda: balanced(members, all_partitions(topic)), 30, "2 members with 3 each")
        assert took < SESSION_MS / 1000
        assert_partitioned(members, all_partitions(topic))
        assert moved <= members[0].assignment() | members[1].assignment()
        assert all(m.error is None for m in members)
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def test_killed_member_partitions_move_after_session_timeout(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    members = [await Member(group_consumer(bootstrap, group, topic)).start() for _ in range(2)]
    try:
        await wait_for(lambda: balanced(members, all_partitions(topic)), 30, "2 members with 3 each")
        victim = members.pop()
        await victim.crash()
        took = await wait_for(lambda: balanced(members, all_partitions(topic)), 30, "the survivor to own all")
        # Nobody told the coordinator: it only notices when the session times out.
        assert took > SESSION_MS / 1000 / 2, f"partitions moved after {took:.1f}s, before the session timeout"
        assert members[0].assignment() == all_partitions(topic)
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def test_static_member_restart_keeps_partitions_without_rebalance(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")

    def static(i: int) -> Consumer:
        return group_consumer(bootstrap, group, topic, group_instance_id=f"instance-{i}")

    members = [await Member(static(i)).start() for i in range(3)]
    try:
        await wait_for(lambda: balanced(members, all_partitions(topic)), 30, "3 static members")
        others = members[1:]
        before = [(m.group.generation_id, m.group.rebalances, m.assignment()) for m in others]
        restarted_owned = members[0].assignment()
        await members[0].stop()  # static: no LeaveGroup
        members[0] = await Member(static(0)).start()
        await wait_for(lambda: members[0].assignment() == restarted_owned, 20, "the same partitions back")
        await asyncio.sleep(3 * HEARTBEAT_MS / 1000)  # give a rebalance, if any, the time to show
        after = [(m.group.generation_id, m.group.rebalances, m.assignment()) for m in others]
        assert after == before, "the other members rebalanced"
        assert members[0].group.generation_id == before[0][0]
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def test_fenced_static_member_gets_a_clear_fatal_error(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    group = new_topic_name("g")
    first = await Member(group_consumer(bootstrap, group, topic, group_instance_id="same")).start()
    second: Member | None = None
    try:
        await wait_for(lambda: len(first.assignment()) == 2, 20, "the first member to own the topic")
        second = await Member(group_consumer(bootstrap, group, topic, group_instance_id="same")).start()
        await wait_for(lambda: first.error is not None, 20, "the first member to be fenced")
        assert isinstance(first.error, FencedInstanceIdError)
        assert "group_instance_id" in str(first.error)
        await wait_for(
            lambda: second is not None and len(second.assignment()) == 2, 20, "the newcomer to own it"
        )
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def test_poll_timeout_leaves_the_group_and_rejoins_on_next_poll(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 4)
    group = new_topic_name("g")
    expected = all_partitions(topic, 4)
    active = await Member(group_consumer(bootstrap, group, topic, max_poll_interval_ms=1500)).start()
    busy = await Member(group_consumer(bootstrap, group, topic, max_poll_interval_ms=1500)).start()
    try:
        await wait_for(lambda: balanced([active, busy], expected), 30, "a 2+2 split")
        await busy._stop_polling()
        # busy stops polling for longer than max_poll_interval_ms: it leaves, active takes everything.
        await wait_for(lambda: active.assignment() == expected, 15, "active to own all after the poll timeout")
        assert busy.consumer.group_metadata().generation_id == -1
        await busy.start_polling()  # polling again rejoins
        await wait_for(lambda: balanced([active, busy], expected), 30, "busy back in the group")
    finally:
        await active.stop()
        await busy.stop()


async def test_partition_lost_and_assigned_back_resumes_at_the_committed_offset(
    bootstrap: str, topic: str
) -> None:
    """A member that lost its generation gets its partition back at the committed offset (50), and
    the Fetch it had out at offset 100 before, answering after that, is dropped.

    The old Fetch used to be taken for the new assignment's (the fetcher matched responses by the
    partition's seek count, 1 in both), so the member went on from 100: records it had fetched but
    not handed out were never read by the group (a chaos run left 68 unread after its members got
    UNKNOWN_MEMBER_ID and rejoined). Here static member "b" (range: partition 1) stops polling,
    drops its generation on the poll timeout and rejoins, with its long poll at the log end still
    out (fetch_max_wait_ms 20 s). It is not the group's leader: a leader's metadata refresh would
    wait behind that long poll on the one connection to the broker, and so would the rejoin.
    """
    await setup_topic(bootstrap, topic, 2)
    group = new_topic_name("g")
    await write(bootstrap, topic, 2, 200)  # 100 records in each partition
    tp = TopicPartition(topic, 1)
    settings: dict[str, Any] = {"partition_assignment_strategy": [RangeAssignor()]}
    leader = await Member(group_consumer(bootstrap, group, topic, group_instance_id="a", **settings)).start()
    await wait_for(lambda: leader.assignment() == all_partitions(topic, 2), 30, "the leader's first generation")
    consumer = group_consumer(
        bootstrap, group, topic, group_instance_id="b", max_poll_interval_ms=1500, fetch_max_wait_ms=20000,
        **settings,
    )  # fmt: skip
    await consumer.start()
    try:
        read: list[int] = []
        deadline = time.monotonic() + 30
        while len(read) < 100 or consumer.assignment() != {tp}:
            assert time.monotonic() < deadline, f"read {len(read)} of 100, assigned {consumer.assignment()}"
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                read.extend(r.offset for r in batch)
        assert read == list(range(100))
        await consumer.commit({tp: 50})  # as if the commits of 50..99 had failed
        await wait_for(consumer._fetcher.has_in_flight, 10, "the long poll at offset 100")  # white box
        # No poll for longer than max_poll_interval_ms: the static member drops its generation.
        await wait_for(lambda: consumer.group_metadata().generation_id == -1, 15, "the poll timeout")
        deadline = time.monotonic() + 15
        # Polling rejoins: the partition is lost (no generation) and comes back.
        while consumer.group_metadata().generation_id == -1 or consumer.assignment() != {tp}:
            assert time.monotonic() < deadline, "the partition was not assigned back"
            assert await consumer.getmany(timeout_ms=100) == {}
        assert await consumer.position(tp) == 50
        assert consumer._fetcher.has_in_flight()  # the old long poll is still out
        await write(bootstrap, topic, 2, 2, start=200)  # the old long poll answers with offset 100
        read = []
        deadline = time.monotonic() + 30
        while len(read) < 51:
            assert time.monotonic() < deadline, f"read {read}"
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                read.extend(r.offset for r in batch)
        assert read == list(range(50, 101))
    finally:
        await consumer.stop()
        await leader.stop()


# -- rebalance protocols ---------------------------------------------------------


async def test_cooperative_keeps_unaffected_partitions_flowing(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    listener = RecordingListener()
    first = group_consumer(bootstrap, group)
    first.subscribe([topic], listener=listener)
    a = await Member(first).start()
    stop = threading.Event()
    producer = asyncio.create_task(asyncio.to_thread(_produce_until, bootstrap, topic, 6, stop))
    b: Member | None = None
    try:
        await wait_for(
            lambda: a.assignment() == all_partitions(topic) and len(a.arrivals) == 6, 20, "a to read all"
        )
        joined_at = time.monotonic()
        b = await Member(group_consumer(bootstrap, group, topic)).start()
        await wait_for(lambda: balanced([a, b], all_partitions(topic)), 30, "a and b with 3 each")
        await wait_for(lambda: len(b.arrivals) == 3, 10, "b to read its partitions")
        kept = a.assignment()
        assert a.group.protocol_name == "cooperative-sticky"
        # Only what moved to b was revoked; a never let go of the partitions it kept.
        revoked = set().union(*listener.partitions("revoked"))
        assert revoked == b.assignment()
        assert not revoked & kept
        pause = a.gaps(kept, joined_at)
        assert pause < 1.5, f"kept partitions paused {pause:.2f}s during the rebalance"
    finally:
        stop.set()
        await producer
        await a.stop()
        if b is not None:
            await b.stop()


def _produce_until(bootstrap: str, topic: str, partitions: int, stop: threading.Event) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    i = 0
    while not stop.is_set():
        for p in range(partitions):
            producer.produce(topic, value=b"%d" % i, partition=p)
        producer.poll(0)
        i += 1
        time.sleep(0.02)
    producer.flush(30)


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
async def test_every_record_consumed_once_across_joins_and_leaves(
    bootstrap: str, topic: str, strategy: str
) -> None:
    """Commit-after-process, with revocations committing what was processed: no loss, no duplicate."""
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    total = 3000
    writer = asyncio.create_task(_write_slowly(bootstrap, topic, total))
    members: list[Member] = []
    finished: list[Member] = []

    async def join() -> Member:
        listener = RecordingListener()
        consumer = group_consumer(bootstrap, group, partition_assignment_strategy=[strategy])
        consumer.subscribe([topic], listener=listener)
        member = Member(consumer, commit_after_process=True)
        listener.member = member
        return await member.start()

    try:
        members.append(await join())
        await asyncio.sleep(1.0)
        members.append(await join())
        await asyncio.sleep(1.0)
        members.append(await join())
        await asyncio.sleep(1.0)
        leaving = members.pop(0)
        await leaving.stop()
        finished.append(leaving)
        await writer
        everyone = lambda: [*finished, *members]  # noqa: E731
        await wait_for(lambda: len({r for m in everyone() for r in m.records}) >= total, 40, "every record")
        await asyncio.sleep(0.5)  # let a duplicate, if any, arrive
        consumed = [r for m in everyone() for r in m.records]
        duplicates = [r for r, n in Counter(consumed).items() if n > 1]
        assert not duplicates, f"{len(duplicates)} records consumed twice, e.g. {sorted(duplicates)[:5]}"
        assert len(consumed) == total
        assert all(m.error is None for m in everyone())
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        await asyncio.gather(*(m.stop() for m in members))


async def _write_slowly(bootstrap: str, topic: str, total: int) -> None:
    step = total // 10
    for start in range(0, total, step):
        await write(bootstrap, topic, 6, step, start)
        await asyncio.sleep(0.35)


# -- offsets ----------------------------------------------------------------------


async def test_restarted_group_resumes_from_committed_offsets(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    group = new_topic_name("g")
    await write(bootstrap, topic, 2, 10)
    first = await Member(group_consumer(bootstrap, group, topic)).start()
    await wait_for(lambda: len(first.records) == 10, 20, "10 records")
    await first._stop_polling()
    await first.consumer.commit()  # the current positions: everything read
    tp0 = TopicPartition(topic, 0)
    assert await first.consumer.committed(tp0) == 5
    await first.consumer.stop()
    await write(bootstrap, topic, 2, 4, start=10)
    second = await Member(group_consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(lambda: len(second.records) == 4, 20, "the 4 new records")
        await asyncio.sleep(0.3)
        assert sorted(second.records) == sorted(
            [(tp0, 5), (tp0, 6), (TopicPartition(topic, 1), 5), (TopicPartition(topic, 1), 6)]
        )
    finally:
        await second.stop()


async def test_auto_commit_and_commit_metadata_round_trip(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1)
    group = new_topic_name("g")
    tp = TopicPartition(topic, 0)
    await write(bootstrap, topic, 1, 5)
    consumer = group_consumer(bootstrap, group, topic, enable_auto_commit=True, auto_commit_interval_ms=200)
    member = await Member(consumer).start()
    try:
        await wait_for(lambda: len(member.records) == 5, 20, "5 records")
        deadline = time.monotonic() + 10
        while await consumer.committed(tp) != 5:
            assert time.monotonic() < deadline, "auto-commit did not commit the position"
            await asyncio.sleep(0.1)
        await consumer.commit({tp: OffsetAndMetadata(3, "checkpoint-7")})
        assert await consumer.committed_offsets([tp]) == {tp: OffsetAndMetadata(3, "checkpoint-7")}
        meta = consumer.group_metadata()
        assert meta.group_id == group and meta.generation_id >= 1 and meta.member_id
        with pytest.raises(ValueError):
            await consumer.commit({tp: -1})
        with pytest.raises(TypeError):
            await consumer.commit({"not-a-tp": 1})  # type: ignore[dict-item]
    finally:
        await member._stop_polling()
        await consumer.stop()


async def test_manual_assignment_with_group_commits_and_resumes(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1)
    group = new_topic_name("g")
    tp = TopicPartition(topic, 0)
    await write(bootstrap, topic, 1, 6)
    async with group_consumer(bootstrap, group) as consumer:
        consumer.assign([tp])
        batch = await consumer.getmany(timeout_ms=5000)
        assert batch
        await consumer.commit({tp: 4})
    async with group_consumer(bootstrap, group) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 4
        with pytest.raises(IllegalStateError):
            consumer.subscribe([topic])


# -- subscriptions and listeners --------------------------------------------------------


async def test_pattern_subscription_picks_up_a_new_matching_topic(bootstrap: str) -> None:
    prefix = new_topic_name("pat")
    first, second = f"{prefix}-a", f"{prefix}-b"
    await setup_topic(bootstrap, first, 2)
    consumer = group_consumer(bootstrap, new_topic_name("g"), metadata_max_age_ms=500)
    consumer.subscribe(pattern=rf"{prefix}-.*")
    member = await Member(consumer).start()
    try:
        await wait_for(lambda: member.assignment() == all_partitions(first, 2), 20, "the first topic")
        await setup_topic(bootstrap, second, 2)
        await write(bootstrap, second, 2, 4)
        await wait_for(
            lambda: member.assignment() == all_partitions(first, 2) | all_partitions(second, 2),
            20,
            "the new topic",
        )
        await wait_for(lambda: len(member.records) == 4, 20, "records of the new topic")
        assert {tp.topic for tp, _ in member.records} == {second}
    finally:
        await member.stop()


async def test_listener_callbacks_name_the_right_partitions(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    la, lb = RecordingListener(), RecordingListener()
    ca, cb = group_consumer(bootstrap, group), group_consumer(bootstrap, group)
    ca.subscribe([topic], listener=la)
    cb.subscribe([topic], listener=lb)
    a = await Member(ca).start()
    b: Member | None = None
    try:
        await wait_for(lambda: a.assignment() == all_partitions(topic), 20, "a to own all")
        assert la.partitions("assigned")[0] == all_partitions(topic)
        b = await Member(cb).start()
        await wait_for(lambda: balanced([a, b], all_partitions(topic)), 30, "a and b balanced")
        b_owned = b.assignment()
        assert set().union(*la.partitions("revoked")) == b_owned  # cooperative: only what moved
        assert set().union(*lb.partitions("assigned")) == b_owned
        await b.stop()
        assert lb.partitions("revoked")[-1] == b_owned  # closing revokes everything it owned
        await wait_for(lambda: a.assignment() == all_partitions(topic), 20, "a to own all again")
        assert la.partitions("assigned")[-1] == b_owned
        assert not la.partitions("lost")
    finally:
        await a.stop()
        if b is not None:
            await b.stop()


async def test_unsubscribe_gives_partitions_up_and_subscribe_rejoins(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    listener = RecordingListener()
    leaving_consumer = group_consumer(bootstrap, group)
    leaving_consumer.subscribe([topic], listener=listener)
    leaving = await Member(leaving_consumer).start()
    staying = await Member(group_consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(lambda: balanced([leaving, staying], all_partitions(topic)), 30, "a 3+3 split")
        owned = leaving.assignment()
        leaving.consumer.unsubscribe()
        assert leaving.assignment() == set()  # at once; the listener and LeaveGroup follow
        await wait_for(lambda: staying.assignment() == all_partitions(topic), 5, "staying to own all")
        assert listener.partitions("revoked")[-1] == owned
        leaving.consumer.subscribe([topic], listener=listener)
        await wait_for(lambda: balanced([leaving, staying], all_partitions(topic)), 30, "a 3+3 split again")
    finally:
        await leaving.stop()
        await staying.stop()


async def test_lost_coordinator_connection_is_reopened_without_a_rebalance(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)
    group = new_topic_name("g")
    await write(bootstrap, topic, 2, 4)
    member = await Member(group_consumer(bootstrap, group, topic)).start()
    try:
        await wait_for(lambda: len(member.records) == 4, 20, "4 records")
        generation = member.group.generation_id
        await member.group._conn.close()  # the socket to the coordinator drops
        await member.consumer.commit()  # rediscovers the coordinator and reconnects
        assert await member.consumer.committed(TopicPartition(topic, 0)) == 2
        await asyncio.sleep(3 * HEARTBEAT_MS / 1000)  # heartbeats flow again on the new connection
        assert member.group.generation_id == generation and member.group.state.value == "stable"
        assert member.group._conn is not None and member.group._conn.connected
    finally:
        await member.stop()


async def test_listener_exception_is_raised_from_the_next_poll(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 2)

    class Broken(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise ValueError("listener bug")

    consumer = group_consumer(bootstrap, new_topic_name("g"))
    consumer.subscribe([topic], listener=Broken())
    async with consumer:
        deadline = time.monotonic() + 20
        with pytest.raises(ValueError, match="listener bug"):
            while time.monotonic() < deadline:
                await consumer.getmany(timeout_ms=100)
        assert consumer.assignment() == all_partitions(topic, 2)  # the rebalance itself completed
        await consumer.getmany(timeout_ms=100)  # raised once


# -- cancellation ------------------------------------------------------------------------
#
# Member.stop() cancels the task polling and committing. On Python 3.11,
# asyncio.wait_for returns the result and drops the cancellation when it lands in
# the loop step its awaitable completes, so a poll cancelled just as records (or a
# commit's response) arrived kept running and stop() hung. Each test cancels at
# every step around the wakeup: a cancel() that returned True must end the task.


async def _cancel_after(task: asyncio.Task[Any], steps: int) -> bool:
    """Cancel ``task`` after ``steps`` loop steps; True if it took the cancellation (did not end normally)."""
    for _ in range(steps):
        await asyncio.sleep(0)
    requested = task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, f"cancelled {steps} step(s) after its wakeup, the task did not end in 5 s"
    return not requested or task.cancelled()


async def test_poll_cancelled_as_records_arrive_ends(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1)
    consumer = group_consumer(bootstrap, new_topic_name("g"), topic)
    member = await Member(consumer).start()
    try:
        await wait_for(lambda: balanced([member], all_partitions(topic, 1)), 30, "the assignment")
        await member._stop_polling()
        for steps in range(4):
            poll = asyncio.create_task(consumer.getmany(timeout_ms=20_000))
            await asyncio.sleep(0.1)  # parked: the topic is empty
            consumer._fetcher._data_ready.set()  # what a fetch that buffered records does
            took = await _cancel_after(poll, steps)
            assert took, f"getmany ignored a cancel {steps} step(s) after data"
    finally:
        await member.stop()


async def test_commit_cancelled_as_its_response_arrives_ends(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic, 1)
    consumer = group_consumer(bootstrap, new_topic_name("g"), topic)
    member = await Member(consumer).start()
    tp = TopicPartition(topic, 0)
    try:
        await wait_for(lambda: balanced([member], all_partitions(topic, 1)), 30, "the assignment")
        await member._stop_polling()
        conn = await member.group._coordinator()
        for steps in range(6):
            before = set(conn._pending)
            commit = asyncio.create_task(consumer.commit({tp: OffsetAndMetadata(0)}))
            await asyncio.sleep(0)  # OffsetCommit is on the wire
            (response,) = [
                p.future
                for cid, p in conn._pending.items()
                if cid not in before and p.api_key == ApiKey.OFFSET_COMMIT
            ]
            while not response.done():
                await asyncio.sleep(0)
            took = await _cancel_after(commit, steps)
            assert took, f"commit ignored a cancel {steps} step(s) after its response"
    finally:
        await member.stop()


# -- other clients in the same group -----------------------------------------------------


async def test_mixed_group_with_confluent_kafka_and_aiokafka(bootstrap: str, topic: str) -> None:
    """Three clients, one group: the range assignor is the one they all offer."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    ours = await Member(group_consumer(bootstrap, group, topic)).start()
    confluent_owned: set[TopicPartition] = set()
    stop = threading.Event()

    def run_confluent() -> None:
        consumer = ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "partition.assignment.strategy": "range",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                consumer.poll(0.1)
                confluent_owned.clear()
                confluent_owned.update(TopicPartition(p.topic, p.partition) for p in consumer.assignment())
        finally:
            consumer.close()

    thread = threading.Thread(target=run_confluent, daemon=True)
    thread.start()
    theirs = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
    )
    await theirs.start()
    polling = asyncio.create_task(_poll_aiokafka(theirs))
    try:

        def split() -> bool:
            owned = [
                ours.assignment(),
                set(confluent_owned),
                {TopicPartition(t.topic, t.partition) for t in theirs.assignment()},
            ]
            return all(len(o) == 2 for o in owned) and set().union(*owned) == all_partitions(topic)

        await wait_for(split, 60, "kafkakit, confluent-kafka and aiokafka to own 2 partitions each")
        assert ours.group.protocol_name == RangeAssignor.name
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await theirs.stop()
        stop.set()
        await asyncio.to_thread(thread.join, 30)
        await ours.stop()


async def test_cooperative_group_with_confluent_kafka(bootstrap: str, topic: str) -> None:
    """kafkakit and librdkafka both offer cooperative-sticky: the group rebalances incrementally."""
    await setup_topic(bootstrap, topic)
    group = new_topic_name("g")
    ours = await Member(group_consumer(bootstrap, group, topic)).start()
    await wait_for(lambda: ours.assignment() == all_partitions(topic), 20, "kafkakit to own all")
    confluent_owned: set[TopicPartition] = set()
    stop = threading.Event()

    def run_confluent() -> None:
        consumer = ConfluentConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                consumer.poll(0.1)
                confluent_owned.clear()
                confluent_owned.update(TopicPartition(p.topic, p.partition) for p in consumer.assignment())
        finally:
            consumer.close()

    thread = threading.Thread(target=run_confluent, daemon=True)
    thread.start()
    try:

        def split() -> bool:
            owned = [ours.assignment(), set(confluent_owned)]
            return all(len(o) == 3 for o in owned) and set().union(*owned) == all_partitions(topic)

        await wait_for(split, 60, "kafkakit and confluent-kafka to own 3 partitions each")
        assert ours.group.protocol_name == "cooperative-sticky"
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)
        await ours.stop()


async def _poll_aiokafka(consumer: Any) -> None:
    while True:
        await consumer.getmany(timeout_ms=100)


# -- settings (no broker needed) ------------------------------------------------------------


def test_group_settings_are_validated() -> None:
    with pytest.raises(KafkaConfigError) as info:
        Consumer(group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=6000)
    assert info.value.setting == "heartbeat_interval_ms"
    with pytest.raises(KafkaConfigError) as info:
        Consumer("t")
    assert info.value.setting == "group_id"
    with pytest.raises(KafkaConfigError) as info:
        Consumer(group_instance_id="i")
    assert info.value.setting == "group_instance_id"
    with pytest.raises(KafkaConfigError) as info:
        Consumer(group_id="g", partition_assignment_strategy=["no-such-assignor"])
    assert info.value.setting == "partition_assignment_strategy"
    with pytest.raises(KafkaConfigError) as info:
        Consumer(group_id="")
    assert info.value.setting == "group_id"
    with pytest.raises(KafkaConfigError) as info:
        Consumer().subscribe(["t"])
    assert info.value.setting == "group_id"
    consumer = Consumer(group_id="g")
    with pytest.raises(ValueError):
        consumer.subscribe(["t"], pattern="t.*")
    with pytest.raises(TypeError):
        consumer.subscribe("t")
    with pytest.raises(TypeError):
        consumer.subscribe(["t"], listener=object())  # type: ignore[arg-type]
    consumer.subscribe(["t"])
    with pytest.raises(IllegalStateError):
        consumer.assign([TopicPartition("t", 0)])


def test_group_defaults_follow_java() -> None:
    dynamic = Consumer(group_id="g")
    assert dynamic._group_config is not None
    assert [a.name for a in dynamic._group_config.assignors] == ["cooperative-sticky", "range"]
    assert dynamic._group_config.rebalance_timeout_ms == 300000
    assert dynamic._group_config.leave_group_on_close is True
    static = Consumer(group_id="g", group_instance_id="i")
    assert static._group_config is not None and static._group_config.leave_group_on_close is False


def test_cooperative_first_round_holds_back_partitions_that_change_owner() -> None:
    from kafkakit.consumer.assignors import Assignment, Subscription
    from kafkakit.consumer.group import _without_transfers

    p0, p1, p2 = (TopicPartition("t", p) for p in range(3))
    subscriptions = {
        "a": Subscription(["t"], owned_partitions=[p0, p1, p2], member_id="a"),
        "b": Subscription(["t"], member_id="b"),
    }
    result = _without_transfers({"a": Assignment([p0, p1]), "b": Assignment([p2])}, subscriptions)
    assert result["a"].partitions == [p0, p1]
    assert result["b"].partitions == []  # p2 is still a's until a revokes it


def test_pattern_subscription_matches_whole_topic_names() -> None:
    from kafkakit.consumer.subscription import SubscriptionState

    state = SubscriptionState()
    state.subscribe_pattern(r"orders-.*", None)
    assert state.match_topics(["orders-eu", "orders-us", "old-orders-x", "orders"]) is True
    assert state.topics == {"orders-eu", "orders-us"}
    assert state.match_topics(["orders-us", "orders-eu"]) is False
