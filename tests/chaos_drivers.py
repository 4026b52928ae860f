"""Workload drivers for resilience scenarios (kafkakit issue 11), after Apache Kafka's system-test tools.

- :class:`VerifiableProducer` (like Kafka's ``VerifiableProducer``): per key
  ("key-0".."key-7") it sends the values 0, 1, 2, ... with acks=all and
  idempotence, optionally in transactions, and records every acknowledgement
  (:class:`Ack`) and every failure (:class:`SendFailure`).
- :class:`VerifiableConsumer` (like ``VerifiableConsumer``): a group member
  that commits after each batch and records every record read
  (:class:`Consumed`), every commit (:class:`CommitEvent`) and every rebalance.
- :class:`TransactionalCopier` (like ``TransactionalMessageCopier``):
  read_committed input, output in a transaction together with the offsets;
  aborts and resets to the committed offsets on an error.

The drivers only know bootstrap servers, so they run unchanged against
broker_min, a single Kafka or the 3-node cluster of tests/kafka_cluster.py
while faults are injected.  tests/chaos_checker.py turns what they record into
a report.  Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from kafkakit.consumer import Consumer, ConsumerRebalanceListener
from kafkakit.errors import ProducerFencedError
from kafkakit.producer import Producer
from kafkakit.structs import TopicPartition

from tests.chaos_clients import (
    AbortRequired,
    ClientName,
    ConsumerClient,
    GroupOptions,
    ProducerClient,
    consumer_client,
    producer_client,
)

_names = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Ack:
    """A record the producer was told is safely written (for a transaction: once it committed)."""

    key: str
    value: int
    partition: int
    offset: int
    time: float


@dataclass(frozen=True, slots=True)
class SendFailure:
    """A record whose send failed; ``aborted``: its transaction certainly aborted (it must stay invisible)."""

    key: str
    value: int
    time: float
    error: str
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class Consumed:
    """A record a group member read."""

    partition: int
    offset: int
    key: str
    value: int
    time: float
    member: str = ""


@dataclass(frozen=True, slots=True)
class CommitEvent:
    """One offset commit (partition -> next offset to read); ``error`` is None when it succeeded.

    ``start`` is when it was sent: successful commits of a group are ordered by
    it, since a member sends its commits one at a time and a later member can
    only join after an earlier one's accepted commit.
    """

    offsets: Mapping[int, int]
    start: float
    time: float
    member: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    """A rebalance callback: kind "assigned", "revoked" or "lost"."""

    kind: str
    partitions: tuple[int, ...]
    time: float
    member: str = ""


@dataclass(frozen=True, slots=True)
class CopierEvent:
    """A transaction of a copier: committed (offsets, record count) or aborted (error)."""

    committed: bool
    offsets: Mapping[int, int]
    records: int
    time: float
    member: str = ""
    error: str | None = None


def key_name(index: int, prefix: str = "key-") -> str:
    return f"{prefix}{index}"


def decode_record(key: bytes | None, value: bytes | None) -> tuple[str, int] | None:
    """(key, value) of a record written by a VerifiableProducer; None for anything else."""
    if key is None or value is None:
        return None
    try:
        return key.decode(), int(value)
    except ValueError:
        return None


async def _wait_for(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:.0f}s: {what()}")
        await asyncio.sleep(0.02)


class _Driver:
    """start() runs ``_run`` as a task; stop() asks it to finish and waits (cancelling after ``timeout``)."""

    def __init__(self, name: str | None) -> None:
        self.name = name or f"{type(self).__name__}-{next(_names)}"
        self.errors: list[tuple[float, str]] = []  # (time, error) of everything that went wrong
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Begin the workload in the background."""
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        raise NotImplementedError

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def stop(self, timeout: float = 60.0) -> None:
        """Finish the workload (deliver what was sent, leave the group) and re-raise a crash of it."""
        self._stopping.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self.errors.append((time.monotonic(), f"stop: cancelled after {timeout}s"))
        if not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _error(self, what: str, exc: BaseException) -> None:
        self.errors.append((time.monotonic(), f"{what}: {type(exc).__name__}: {exc}"))

    async def _retry(self, what: str, action: Callable[[], Awaitable[None]]) -> bool:
        """Run ``action`` until it succeeds (True) or the driver is stopped (False)."""
        while not self._stopping.is_set():
            try:
                await action()
                return True
            except Exception as exc:
                self._error(what, exc)
                await asyncio.sleep(0.2)
        return False


class VerifiableProducer(_Driver):
    """Sends unique sequential integer values per key, idempotently (acks=all), and records the outcome.

    ``client`` is "kafkakit", "confluent" or "aiokafka"; ``rate`` is records per
    second (None: as fast as ``max_outstanding`` unacknowledged records allow);
    it stops after ``max_records`` or at ``stop()``.  With ``transactional_id``
    every ``transaction_size`` records form a transaction, acknowledged when it
    commits.  A client that cannot go on (fatal state, or ``send`` raising three
    times in a row) is replaced by a new one: ``restarts`` counts them.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        client: ClientName = "kafkakit",
        keys: int = 8,
        key_prefix: str = "key-",
        max_records: int | None = None,
        rate: float | None = None,
        max_outstanding: int = 1000,
        transactional_id: str | None = None,
        transaction_size: int = 50,
        settings: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.client: ClientName = client
        self.keys = keys
        self.key_prefix = key_prefix
        self.max_records = max_records
        self.rate = rate
        self.transactional_id = transactional_id
        self.transaction_size = transaction_size
        self.settings = dict(settings or {})
        self.acks: list[Ack] = []
        self.failures: list[SendFailure] = []
        self.sent = 0
        self.restarts = 0
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._room = asyncio.Semaphore(max_outstanding)
        self._outstanding = 0
        self._next_value = [0] * keys
        self._client: ProducerClient | None = None
        self._txn: list[tuple[str, int]] = []
        self._txn_meta: dict[tuple[str, int], tuple[int, int]] = {}
        self._txn_error: BaseException | None = None
        self._txn_number = 0  # late callbacks of an ended transaction must not touch the next one

    @property
    def idempotent(self) -> bool:
        return True  # every client runs with idempotence on

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    async def run(self) -> None:
        """Produce ``max_records`` records and stop (for a fault-free run)."""
        if self.max_records is None:
            raise ValueError("run() needs max_records")
        await self.start()
        await _wait_for(lambda: self.done, 300, self._progress)
        await self.stop()

    async def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` records are acknowledged (to inject a fault mid-run).

        Raises TimeoutError after ``timeout``, RuntimeError if the producer ends first.
        """
        await _wait_for(lambda: len(self.acks) >= count or self.done, timeout, self._progress)
        if len(self.acks) < count:
            raise RuntimeError(f"the producer ended before {count} acknowledgements: {self._progress()}")

    def _progress(self) -> str:
        return f"{self.name}: {len(self.acks)} acked, {len(self.failures)} failed; errors {self.errors[-3:]}"

    async def _open(self) -> bool:
        async def open_client() -> None:
            client = producer_client(
                self.client, self.bootstrap_servers, self.topic, self.transactional_id, self.settings
            )
            try:
                await client.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await client.stop()
                raise
            self._client = client

        return await self._retry("start", open_client)

    async def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.stop()
            except Exception as exc:
                self._error("stop", exc)

    async def _run(self) -> None:
        self.started_at = time.monotonic()
        consecutive_errors = 0
        try:
            while not self._stopping.is_set() and (self.max_records is None or self.sent < self.max_records):
                if self._client is None and not await self._open():
                    break
                assert self._client is not None
                if self.rate is not None:
                    delay = self.started_at + self.sent / self.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                elif self.sent % 64 == 0:
                    await asyncio.sleep(0)  # let consumers and fault injectors run
                if self.transactional and not self._txn:
                    if not await self._begin():
                        continue
                index = self.sent % self.keys
                key, value = key_name(index, self.key_prefix), self._next_value[index]
                self._next_value[index] += 1
                self.sent += 1
                if not await self._send(key, value):
                    consecutive_errors += 1
                    if consecutive_errors >= 3 or self._client.broken():
                        await self._restart()
                        consecutive_errors = 0
                    else:
                        await asyncio.sleep(0.1)
                    continue
                consecutive_errors = 0
                if self.transactional and len(self._txn) >= self.transaction_size:
                    await self._end_transaction()
            if self._txn:
                await self._end_transaction()
        finally:
            await self._close()
            self.finished_at = time.monotonic()

    async def _send(self, key: str, value: int) -> bool:
        assert self._client is not None
        await self._room.acquire()
        self._outstanding += 1
        try:
            number = self._txn_number
            await self._client.send(
                key.encode(), b"%d" % value, lambda p, o, e: self._on_done(key, value, number, p, o, e)
            )
        except Exception as exc:
            self._room.release()
            self._outstanding -= 1
            self._error("send", exc)
            self.failures.append(SendFailure(key, value, time.monotonic(), repr(exc)))
            if self.transactional:
                self._txn.append((key, value))
                self._txn_error = exc
            return False
        if self.transactional:
            self._txn.append((key, value))
        return True

    def _on_done(
        self, key: str, value: int, number: int, partition: int, offset: int, error: BaseException | None
    ) -> None:
        self._room.release()
        self._outstanding -= 1
        now = time.monotonic()
        if self.transactional:
            if number != self._txn_number:
                return
            if error is None:
                self._txn_meta[(key, value)] = (partition, offset)
            else:
                self._txn_error = error
        elif error is None:
            self.acks.append(Ack(key, value, partition, offset, now))
        else:
            self.failures.append(SendFailure(key, value, now, repr(error)))

    async def _begin(self) -> bool:
        assert self._client is not None
        try:
            await self._client.begin()
            return True
        except Exception as exc:
            self._error("begin_transaction", exc)
            await self._restart()
            return False

    async def _end_transaction(self) -> None:
        """Commit the open transaction; on failure abort it (or replace the client) and record why."""
        assert self._client is not None
        records = self._txn
        error = self._txn_error
        definite = True  # False when the commit's outcome is unknown: then it may have committed
        if error is None:
            try:
                await self._client.commit()
                for _ in range(3):  # delivery callbacks scheduled by the commit's flush
                    await asyncio.sleep(0)
            except AbortRequired as exc:
                error = exc
            except Exception as exc:  # e.g. a timeout
                error, definite = exc, False
            else:
                now = time.monotonic()
                for key, value in records:
                    partition, offset = self._txn_meta.get((key, value), (-1, -1))
                    self.acks.append(Ack(key, value, partition, offset, now))
                self._forget_transaction()
                return
        self._error("commit_transaction", error)
        try:
            await self._client.abort()
            aborted = definite
        except Exception as exc:
            self._error("abort_transaction", exc)
            aborted = False
            await self._restart()
        now = time.monotonic()
        failed = {(f.key, f.value) for f in self.failures}
        self.failures.extend(
            SendFailure(key, value, now, repr(error), aborted)
            for key, value in records
            if (key, value) not in failed
        )
        self._forget_transaction()

    def _forget_transaction(self) -> None:
        self._txn, self._txn_meta, self._txn_error = [], {}, None
        self._txn_number += 1

    async def _restart(self) -> None:
        """Replace the client (a new transactional instance fences the old one and aborts its transaction)."""
        self.restarts += 1
        await self._close()


class VerifiableConsumer(_Driver):
    """A consumer group member that commits after each batch and records reads, commits and rebalances.

    Errors from polls and commits are recorded and retried; the member keeps
    going until ``stop()``.  ``client``, ``group_instance_id``, ``assignor``
    (a name: "range", "roundrobin", "cooperative-sticky"...) and
    ``isolation_level`` are passed to the client.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group_id: str,
        *,
        client: ClientName = "kafkakit",
        group_instance_id: str | None = None,
        assignor: str | None = None,
        isolation_level: str = "read_committed",
        settings: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.group_id = group_id
        self.client: ClientName = client
        self.options = GroupOptions(
            group_id,
            group_instance_id=group_instance_id,
            assignor=assignor,
            isolation_level=isolation_level,
            settings=settings,
        )
        self.records: list[Consumed] = []
        self.commits: list[CommitEvent] = []
        self.rebalances: list[RebalanceEvent] = []
        self.foreign = 0  # records not written by a VerifiableProducer

    def _on_rebalance(self, kind: str, partitions: Any) -> None:
        self.rebalances.append(RebalanceEvent(kind, tuple(partitions), time.monotonic(), self.name))

    async def wait_consumed(self, count: int, timeout: float = 60.0) -> None:
        """Wait until this member has read ``count`` records (re-reads included); raises as ``wait_acked``."""

        def what() -> str:
            return f"{self.name}: read {len(self.records)}; errors {self.errors[-3:]}"

        await _wait_for(lambda: len(self.records) >= count or self.done, timeout, what)
        if len(self.records) < count:
            raise RuntimeError(f"the consumer ended before reading {count} records: {what()}")

    async def _run(self) -> None:
        client: ConsumerClient | None = None

        async def open_client() -> None:
            nonlocal client
            candidate = consumer_client(
                self.client, self.bootstrap_servers, self.topic, self.options, self._on_rebalance
            )
            await candidate.start()
            client = candidate

        if not await self._retry("start", open_client):
            return
        assert client is not None
        try:
            while not self._stopping.is_set():
                try:
                    batch = await client.poll(0.2)
                except Exception as exc:
                    self._error("poll", exc)
                    await asyncio.sleep(0.2)
                    continue
                if not batch:
                    continue
                now = time.monotonic()
                offsets: dict[int, int] = {}
                for partition, offset, key, value in batch:
                    decoded = decode_record(key, value)
                    if decoded is None:
                        self.foreign += 1
                    else:
                        self.records.append(
                            Consumed(partition, offset, decoded[0], decoded[1], now, self.name)
                        )
                    offsets[partition] = max(offsets.get(partition, 0), offset + 1)
                start = time.monotonic()
                try:
                    await client.commit(offsets)
                    self.commits.append(CommitEvent(offsets, start, time.monotonic(), self.name))
                except Exception as exc:
                    self._error("commit", exc)
                    error = f"{type(exc).__name__}: {exc}"
                    self.commits.append(CommitEvent(offsets, start, time.monotonic(), self.name, error))
        finally:
            try:
                await client.stop()
            except Exception as exc:
                self._error("stop", exc)


class _CopierListener(ConsumerRebalanceListener):  # type: ignore[misc,unused-ignore]  # kafkakit is Any to mypy without scripts/typecheck.py
    def __init__(self, copier: TransactionalCopier) -> None:
        self._copier = copier

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._copier.rebalances.append(
            RebalanceEvent(
                "assigned",
                tuple(sorted(tp.partition for tp in assigned)),
                time.monotonic(),
                self._copier.name,
            )
        )

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._copier.rebalances.append(
            RebalanceEvent(
                "revoked", tuple(sorted(tp.partition for tp in revoked)), time.monotonic(), self._copier.name
            )
        )


class TransactionalCopier(_Driver):
    """Copies ``input_topic`` to ``output_topic`` exactly once with kafkakit (same key, value, partition).

    A read_committed group member (``group_id``) and a transactional producer
    (``transactional_id``): each batch's records and offsets commit in one
    transaction.  On an error the transaction is aborted (or, if that fails,
    the producer replaced: its successor's ``init_transactions`` aborts it) and
    the consumer is moved back to the group's committed offsets, as Kafka's
    TransactionalMessageCopier does.  ``events`` records every transaction.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        input_topic: str,
        output_topic: str,
        group_id: str,
        transactional_id: str,
        *,
        group_instance_id: str | None = None,
        max_poll_records: int = 200,
        consumer_settings: Mapping[str, Any] | None = None,
        producer_settings: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.bootstrap_servers = bootstrap_servers
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.group_id = group_id
        self.transactional_id = transactional_id
        self.group_instance_id = group_instance_id
        self.max_poll_records = max_poll_records
        self.consumer_settings = dict(consumer_settings or {})
        self.producer_settings = dict(producer_settings or {})
        self.events: list[CopierEvent] = []
        self.rebalances: list[RebalanceEvent] = []
        self.restarts = 0
        self.fenced = False

    @property
    def copied(self) -> int:
        """Records in committed transactions."""
        return sum(e.records for e in self.events if e.committed)

    @property
    def aborts(self) -> int:
        return sum(1 for e in self.events if not e.committed)

    async def _new_producer(self) -> Producer | None:
        producer: Producer | None = None

        async def open_producer() -> None:
            nonlocal producer
            candidate = Producer(
                bootstrap_servers=self.bootstrap_servers,
                transactional_id=self.transactional_id,
                **self.producer_settings,
            )
            try:
                await candidate.start()
                await candidate.init_transactions()  # aborts what a predecessor left open
            except BaseException:
                with contextlib.suppress(Exception):
                    await candidate.stop()
                raise
            producer = candidate

        await self._retry("init_transactions", open_producer)
        return producer

    async def _run(self) -> None:
        settings: dict[str, Any] = {"fetch_max_wait_ms": 200, **self.consumer_settings}
        consumer = Consumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            group_instance_id=self.group_instance_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=self.max_poll_records,
            **settings,
        )
        if not await self._retry("consumer start", consumer.start):
            return
        consumer.subscribe([self.input_topic], listener=_CopierListener(self))
        producer = await self._new_producer()
        try:
            while producer is not None and not self._stopping.is_set():
                try:
                    batches = await consumer.getmany(timeout_ms=200)
                except Exception as exc:
                    self._error("getmany", exc)
                    await asyncio.sleep(0.2)
                    continue
                if not batches:
                    continue
                group = consumer.group_metadata()  # with the batch: a rebalance since fences the commit
                offsets = {tp.partition: records[-1].offset + 1 for tp, records in batches.items()}
                count = sum(len(records) for records in batches.values())
                try:
                    producer.begin_transaction()
                    for tp, records in batches.items():
                        for r in records:
                            await producer.send(self.output_topic, r.value, key=r.key, partition=tp.partition)
                    await producer.send_offsets_to_transaction(
                        {TopicPartition(self.input_topic, p): o for p, o in offsets.items()}, group
                    )
                    await producer.commit_transaction()
                    self.events.append(CopierEvent(True, offsets, count, time.monotonic(), self.name))
                except ProducerFencedError as exc:
                    self._error("fenced", exc)
                    self.fenced = True  # another copier owns the transactional id now
                    break
                except Exception as exc:
                    self._error("transaction", exc)
                    error = f"{type(exc).__name__}: {exc}"
                    self.events.append(CopierEvent(False, offsets, count, time.monotonic(), self.name, error))
                    producer = await self._abort_and_rewind(consumer, producer)
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _abort_and_rewind(self, consumer: Consumer, producer: Producer) -> Producer | None:
        try:
            await producer.abort_transaction()
        except Exception as exc:
            self._error("abort_transaction", exc)
            self.restarts += 1
            with contextlib.suppress(Exception):
                await producer.stop()
            replacement = await self._new_producer()
            if replacement is None:
                return None
            producer = replacement

        async def rewind() -> None:
            assigned = consumer.assignment()
            committed = await consumer.committed_offsets(assigned)
            for tp in assigned:
                if tp in committed:
                    consumer.seek(tp, committed[tp].offset)
                else:
                    await consumer.seek_to_beginning(tp)

        await self._retry("rewind", rewind)
        return producer


async def wait_read(
    consumers: Sequence[VerifiableConsumer], acks: Sequence[Ack], timeout: float = 60.0
) -> None:
    """Wait until the group (``consumers``) has read every acknowledged record at least once."""
    wanted = {(a.key, a.value) for a in acks}

    def missing() -> set[tuple[str, int]]:
        return wanted - {(r.key, r.value) for c in consumers for r in c.records}

    def what() -> str:
        gone = missing()
        errors = [e for c in consumers for e in c.errors[-2:]]
        return (
            f"the group has not read {len(gone)} of {len(wanted)} acknowledged records; errors {errors}; "
            + _where_reads_stopped(consumers, [a for a in acks if (a.key, a.value) in gone])
        )

    deadline = time.monotonic() + timeout
    while missing():  # a set difference per check: poll every 0.2 s, not 0.02
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:.0f}s: {what()}")
        await asyncio.sleep(0.2)


def _where_reads_stopped(consumers: Sequence[VerifiableConsumer], unread: Sequence[Ack]) -> str:
    """For a failure message: the unread records' offsets by partition, where each member's reads
    of each partition ended, and each member's last rebalance (a stuck member or a lost record)."""
    unread_by_partition: dict[int, list[int]] = {}
    for ack in unread:
        unread_by_partition.setdefault(ack.partition, []).append(ack.offset)
    unread_text = {p: f"{min(o)}-{max(o)} ({len(o)})" for p, o in sorted(unread_by_partition.items())}
    # Who read the offsets around each unread range, and when: one member on both sides jumped it.
    around: dict[int, str] = {}
    for partition, offsets in sorted(unread_by_partition.items()):
        low, high = min(offsets), max(offsets)
        seen = [r for c in consumers for r in c.records if r.partition == partition]
        before = max((r for r in seen if r.offset < low), key=lambda r: (r.offset, r.time), default=None)
        after = min((r for r in seen if r.offset > high), key=lambda r: (r.offset, r.time), default=None)
        around[partition] = " / ".join(
            "none" if r is None else f"{r.member} read {r.offset} at {r.time:.1f}" for r in (before, after)
        )
    reads = []
    for consumer in consumers:
        last: dict[int, tuple[int, float]] = {}
        for record in consumer.records:
            if record.offset >= last.get(record.partition, (-1, 0.0))[0]:
                last[record.partition] = (record.offset, record.time)
        rebalance = consumer.rebalances[-1] if consumer.rebalances else None
        reads.append(f"{consumer.name}: last read {dict(sorted(last.items()))}, last rebalance {rebalance}")
    return (
        f"unread offsets by partition {unread_text}; read just before / after them {around}; "
        f"now {time.monotonic():.1f}; " + "; ".join(reads)
    )


async def wait_copied(copiers: Sequence[TransactionalCopier], count: int, timeout: float = 60.0) -> None:
    """Wait until the copiers together committed ``count`` records (the size of their input)."""

    def what() -> str:
        return (
            f"copied {sum(c.copied for c in copiers)} of {count}; errors {[c.errors[-2:] for c in copiers]}"
        )

    await _wait_for(lambda: sum(c.copied for c in copiers) >= count, timeout, what)
