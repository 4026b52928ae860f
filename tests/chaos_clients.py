"""The three Kafka clients behind one small interface, for the chaos drivers (tests/chaos_drivers.py).

kafkakit, confluent-kafka and aiokafka are driven the same way so that a
resilience scenario can compare their failover stalls and losses.  Only the
operations the drivers need are covered: an idempotent (optionally
transactional) producer, and a group consumer that commits explicitly.

confluent-kafka is a synchronous library: its non-blocking calls (``produce``,
``poll(0)``) run on the event loop, its blocking ones (transactions, commit,
``consume`` with a timeout) in a worker thread, and every callback it makes
is handed back to the event loop with ``call_soon_threadsafe``, since librdkafka
serves callbacks in whichever thread calls ``poll``/``flush``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from kafkakit.consumer import Consumer, ConsumerRebalanceListener
from kafkakit.errors import TransactionStateError
from kafkakit.producer import Producer, TransactionState
from kafkakit.structs import TopicPartition

ClientName = Literal["kafkakit", "confluent", "aiokafka"]
#: Every client the drivers can run.
CLIENTS: tuple[ClientName, ...] = ("kafkakit", "confluent", "aiokafka")

#: ``done(partition, offset, error)``: one record's delivery outcome (partition/offset -1 on error).
DoneCallback = Callable[[int, int, BaseException | None], None]
#: ``on_rebalance(kind, partitions)``, kind one of "assigned", "revoked", "lost".
RebalanceCallback = Callable[[str, Sequence[int]], None]
#: A record as a consumer hands it over: (partition, offset, key, value).
RawRecord = tuple[int, int, bytes | None, bytes | None]


class AbortRequired(Exception):
    """A transaction commit failed and the client says it can only be aborted (its outcome is known)."""


class ProducerClient(Protocol):
    """An idempotent producer (acks=all) of one topic; transactional when built with a transactional id."""

    async def start(self) -> None: ...
    async def send(self, key: bytes, value: bytes, done: DoneCallback) -> None: ...
    async def begin(self) -> None: ...
    async def commit(self) -> None: ...
    async def abort(self) -> None: ...
    def broken(self) -> bool: ...
    async def stop(self) -> None: ...


class ConsumerClient(Protocol):
    """A group member of one topic that commits explicitly."""

    async def start(self) -> None: ...
    async def poll(self, timeout: float) -> list[RawRecord]: ...
    async def commit(self, offsets: Mapping[int, int]) -> None: ...
    async def stop(self) -> None: ...


# --------------------------------------------------------------------------- producers


class _KafkakitProducer:
    def __init__(
        self, servers: str, topic: str, transactional_id: str | None, settings: Mapping[str, Any]
    ) -> None:
        self._topic = topic
        self._transactional = transactional_id is not None
        self._producer = Producer(
            bootstrap_servers=servers,
            acks="all",
            enable_idempotence=True,
            transactional_id=transactional_id,
            **settings,
        )

    async def start(self) -> None:
        await self._producer.start()
        if self._transactional:
            await self._producer.init_transactions()

    async def send(self, key: bytes, value: bytes, done: DoneCallback) -> None:
        future = await self._producer.send(self._topic, value, key=key)

        def finished(f: Any) -> None:
            if f.cancelled():
                done(-1, -1, asyncio.CancelledError())
                return
            error = f.exception()
            if error is not None:
                done(-1, -1, error)
            else:
                metadata = f.result()
                done(metadata.partition, metadata.offset, None)

        future.add_done_callback(finished)

    async def begin(self) -> None:
        self._producer.begin_transaction()

    async def commit(self) -> None:
        try:
            await self._producer.commit_transaction()
        except TransactionStateError as exc:  # "call abort_transaction()": nothing was committed
            raise AbortRequired(str(exc)) from exc

    async def abort(self) -> None:
        await self._producer.abort_transaction()

    def broken(self) -> bool:
        return self._producer.transaction_state is TransactionState.FATAL

    async def stop(self) -> None:
        await self._producer.stop()


class _ConfluentProducer:
    def __init__(
        self, servers: str, topic: str, transactional_id: str | None, settings: Mapping[str, Any]
    ) -> None:
        import confluent_kafka

        config: dict[str, Any] = {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            **settings,
        }
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self._topic = topic
        self._transactional = transactional_id is not None
        self._producer = confluent_kafka.Producer(config)
        self._fatal = False
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._poller = asyncio.create_task(self._poll_forever())
        if self._transactional:
            await asyncio.to_thread(self._producer.init_transactions, 30)

    async def _poll_forever(self) -> None:
        while True:  # delivery callbacks run inside poll(); 5 ms bounds the acknowledgement time error
            self._producer.poll(0)
            await asyncio.sleep(0.005)

    async def send(self, key: bytes, value: bytes, done: DoneCallback) -> None:
        loop = asyncio.get_running_loop()

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                if error.fatal():
                    self._fatal = True
                loop.call_soon_threadsafe(done, -1, -1, _ConfluentError(error))
            else:
                loop.call_soon_threadsafe(done, message.partition(), message.offset(), None)

        while True:
            try:
                self._producer.produce(self._topic, value=value, key=key, on_delivery=delivered)
                return
            except BufferError:  # librdkafka's queue is full: let deliveries drain it
                await asyncio.sleep(0.01)

    async def begin(self) -> None:
        self._producer.begin_transaction()

    async def commit(self) -> None:
        try:
            await asyncio.to_thread(self._producer.commit_transaction, 60)
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and hasattr(error, "fatal") and error.fatal():
                self._fatal = True
            if error is not None and hasattr(error, "txn_requires_abort") and error.txn_requires_abort():
                raise AbortRequired(str(exc)) from exc
            raise

    async def abort(self) -> None:
        await asyncio.to_thread(self._producer.abort_transaction, 60)

    def broken(self) -> bool:
        return self._fatal

    async def stop(self) -> None:
        try:
            while await asyncio.to_thread(self._producer.flush, 1.0) > 0:
                pass
        finally:
            if self._poller is not None:
                self._poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._poller
            self._producer.poll(0)


class _ConfluentError(Exception):
    """A librdkafka error delivered to a callback, as an exception."""

    def __init__(self, error: Any) -> None:
        super().__init__(str(error))
        self.error = error


class _AiokafkaProducer:
    def __init__(
        self, servers: str, topic: str, transactional_id: str | None, settings: Mapping[str, Any]
    ) -> None:
        from aiokafka import AIOKafkaProducer

        self._topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=servers,
            enable_idempotence=True,
            acks="all",
            transactional_id=transactional_id,
            **settings,
        )
        self._fatal = False

    async def start(self) -> None:
        await self._producer.start()  # a transactional producer initialises its id here

    async def send(self, key: bytes, value: bytes, done: DoneCallback) -> None:
        future = await self._producer.send(self._topic, value, key=key)

        def finished(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                done(-1, -1, asyncio.CancelledError())
            elif f.exception() is not None:
                done(-1, -1, f.exception())
            else:
                metadata = f.result()
                done(metadata.partition, metadata.offset, None)

        future.add_done_callback(finished)

    async def begin(self) -> None:
        await self._producer.begin_transaction()

    async def commit(self) -> None:
        await self._producer.commit_transaction()

    async def abort(self) -> None:
        await self._producer.abort_transaction()

    def broken(self) -> bool:
        return self._fatal

    async def stop(self) -> None:
        await self._producer.stop()


def producer_client(
    client: ClientName, servers: str, topic: str, transactional_id: str | None, settings: Mapping[str, Any]
) -> ProducerClient:
    """A new, unstarted producer of ``client`` for ``topic`` (acks=all, idempotent)."""
    if client == "kafkakit":
        return _KafkakitProducer(servers, topic, transactional_id, settings)
    if client == "confluent":
        return _ConfluentProducer(servers, topic, transactional_id, settings)
    if client == "aiokafka":
        return _AiokafkaProducer(servers, topic, transactional_id, settings)
    raise ValueError(f"unknown client {client!r}; expected one of {CLIENTS}")


# --------------------------------------------------------------------------- consumers


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc,unused-ignore]  # kafkakit is Any to mypy without scripts/typecheck.py
    """Reports each rebalance callback of a kafkakit consumer."""

    def __init__(self, report: RebalanceCallback) -> None:
        self._report = report

    def on_partitions_revoked(self, revoked: Any) -> None:
        self._report("revoked", sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._report("assigned", sorted(tp.partition for tp in assigned))

    def on_partitions_lost(self, lost: Any) -> None:
        self._report("lost", sorted(tp.partition for tp in lost))


class GroupOptions:
    """What a group member is asked to be: group, static id, assignor, isolation level, extra settings."""

    def __init__(
        self,
        group_id: str,
        *,
        group_instance_id: str | None = None,
        assignor: str | None = None,
        isolation_level: str = "read_committed",
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.assignor = assignor
        self.isolation_level = isolation_level
        self.settings = dict(settings or {})


class _KafkakitConsumer:
    def __init__(
        self, servers: str, topic: str, options: GroupOptions, on_rebalance: RebalanceCallback
    ) -> None:
        self._topic = topic
        extra: dict[str, Any] = {"fetch_max_wait_ms": 200, **options.settings}
        if options.assignor is not None:
            extra["partition_assignment_strategy"] = options.assignor
        self._consumer = Consumer(
            bootstrap_servers=servers,
            group_id=options.group_id,
            group_instance_id=options.group_instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=options.isolation_level,
            **extra,
        )
        self._listener = _Listener(on_rebalance)

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.subscribe([self._topic], listener=self._listener)

    async def poll(self, timeout: float) -> list[RawRecord]:
        batches = await self._consumer.getmany(timeout_ms=int(timeout * 1000))
        return [(r.partition, r.offset, r.key, r.value) for records in batches.values() for r in records]

    async def commit(self, offsets: Mapping[int, int]) -> None:
        await self._consumer.commit({TopicPartition(self._topic, p): o for p, o in offsets.items()})

    async def stop(self) -> None:
        await self._consumer.stop()


_CONFLUENT_ASSIGNORS = {
    "range": "range",
    "roundrobin": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
}


class _ConfluentConsumer:
    def __init__(
        self, servers: str, topic: str, options: GroupOptions, on_rebalance: RebalanceCallback
    ) -> None:
        import confluent_kafka

        config: dict[str, Any] = {
            "bootstrap.servers": servers,
            "group.id": options.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": options.isolation_level,
            **options.settings,
        }
        if options.group_instance_id is not None:
            config["group.instance.id"] = options.group_instance_id
        if options.assignor is not None:
            config["partition.assignment.strategy"] = _CONFLUENT_ASSIGNORS[options.assignor]
        self._topic = topic
        self._consumer = confluent_kafka.Consumer(config)
        self._tp = confluent_kafka.TopicPartition
        self._on_rebalance = on_rebalance
        self._loop: asyncio.AbstractEventLoop | None = None

    def _callback(self, kind: str) -> Callable[[Any, list[Any]], None]:
        def report(_consumer: Any, partitions: list[Any]) -> None:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(
                self._on_rebalance, kind, sorted(tp.partition for tp in partitions)
            )

        return report

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._callback("assigned"),
            on_revoke=self._callback("revoked"),
            on_lost=self._callback("lost"),
        )

    async def poll(self, timeout: float) -> list[RawRecord]:
        messages = await asyncio.to_thread(self._consumer.consume, 500, timeout)
        records: list[RawRecord] = []
        for m in messages:
            if m.error() is None:
                records.append((m.partition() or 0, m.offset() or 0, m.key(), m.value()))
        return records

    async def commit(self, offsets: Mapping[int, int]) -> None:
        tps = [self._tp(self._topic, p, o) for p, o in offsets.items()]
        result = await asyncio.to_thread(self._consumer.commit, offsets=tps, asynchronous=False)
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            raise RuntimeError(f"commit failed for {failed}")

    async def stop(self) -> None:
        await asyncio.to_thread(self._consumer.close)


class _AiokafkaConsumer:
    def __init__(
        self, servers: str, topic: str, options: GroupOptions, on_rebalance: RebalanceCallback
    ) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
        from aiokafka.structs import TopicPartition as AioTopicPartition

        assignors: dict[str, Any] = {
            "range": RangePartitionAssignor,
            "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor,
        }
        extra: dict[str, Any] = {"fetch_max_wait_ms": 200, **options.settings}
        if options.assignor is not None:
            extra["partition_assignment_strategy"] = (assignors[options.assignor],)
        self._topic = topic
        self._tp = AioTopicPartition
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            group_id=options.group_id,
            group_instance_id=options.group_instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=options.isolation_level,
            **extra,
        )
        self._listener = _aiokafka_listener(on_rebalance)

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.subscribe([self._topic], listener=self._listener)

    async def poll(self, timeout: float) -> list[RawRecord]:
        batches = await self._consumer.getmany(timeout_ms=int(timeout * 1000))
        return [(r.partition, r.offset, r.key, r.value) for records in batches.values() for r in records]

    async def commit(self, offsets: Mapping[int, int]) -> None:
        await self._consumer.commit({self._tp(self._topic, p): o for p, o in offsets.items()})

    async def stop(self) -> None:
        await self._consumer.stop()


def _aiokafka_listener(report: RebalanceCallback) -> Any:
    """aiokafka checks its listener against its own base class (it has no "lost" callback)."""
    from aiokafka.abc import ConsumerRebalanceListener as AioListener

    class Listener(AioListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            report("revoked", sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            report("assigned", sorted(tp.partition for tp in assigned))

    return Listener()


def consumer_client(
    client: ClientName, servers: str, topic: str, options: GroupOptions, on_rebalance: RebalanceCallback
) -> ConsumerClient:
    """A new, unstarted group member of ``client`` reading ``topic`` from the earliest offset."""
    if client == "kafkakit":
        return _KafkakitConsumer(servers, topic, options, on_rebalance)
    if client == "confluent":
        return _ConfluentConsumer(servers, topic, options, on_rebalance)
    if client == "aiokafka":
        return _AiokafkaConsumer(servers, topic, options, on_rebalance)
    raise ValueError(f"unknown client {client!r}; expected one of {CLIENTS}")
