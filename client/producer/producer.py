"""The public Producer: settings, ``send`` and the bulk ``send_batch`` path.

``send()`` follows aiokafka: awaiting it enqueues the record (waiting only for
metadata of a new topic or for buffer memory) and returns an awaitable that
resolves to the record's :class:`~kafkakit.structs.RecordMetadata`::

    async with Producer(bootstrap_servers="localhost:9092") as producer:
        pending = await producer.send("events", b"payload", key=b"user-1")
        metadata = await pending               # or: await producer.send_and_wait(...)
        result = await (await producer.send_batch("events", [b"a", b"b", b"c"]))
        print(result.ranges)                   # [(TopicPartition('events', 0), 42, 3)]

The per-record path does a couple of dict lookups and one list append; the
encoding happens in the sender when the batch leaves.  ``send_batch`` encodes
whole batches at once (with the records codec's bulk encoder) and is the
fastest way to produce many records.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from sys import getrefcount as _getrefcount
from time import time_ns as _time_ns
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    IllegalStateError,
    KafkaConfigError,
    ProducerClosed,
    RecordTooLargeError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
)
from kafkakit.metrics import Metrics, NetworkMetrics, metrics_enabled
from kafkakit.net.security import OAuthTokenProvider, SecurityConfig
from kafkakit.producer.accumulator import (
    BATCH_HEADER_SIZE,
    HEADERS_MEMORY_OVERHEAD,
    KEY_MEMORY_OVERHEAD,
    RECORD_MEMORY_OVERHEAD,
    RECORD_OVERHEAD,
    Accumulator,
    PartitionQueue,
    ProducerBatch,
)
from kafkakit.producer.bulk_input import bulk_input
from kafkakit.producer.bulk_send import BulkQueueing
from kafkakit.producer.idempotence import ProducerIdentity
from kafkakit.producer.instrumentation import ProducerMetrics, SendHook, attach, hooked_send
from kafkakit.producer.partitioner import Partitioner, StickyPartitions
from kafkakit.producer.record_future import FUTURES_REUSABLE, MAX_TIMESTAMP_MS, STAMPS_PER_MS, RecordFuture
from kafkakit.producer.record_input import BULK_RECORD_OVERHEAD, as_bytes, check_headers, invalid_timestamp
from kafkakit.producer.send_batch_result import SendBatchFuture, SendBatchResult
from kafkakit.producer.sender import Sender
from kafkakit.producer.settings import check_settings
from kafkakit.producer.topic_state import TopicState
from kafkakit.producer.transactions import TransactionHandle, TransactionManager, TransactionState
from kafkakit.protocol.framing import ApiKey, preload
from kafkakit.records import Compression
from kafkakit.structs import Header, OffsetAndMetadata, RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from kafkakit.consumer.group import GroupMetadata

__all__ = ["Producer", "RecordFuture", "SendBatchFuture", "SendBatchResult", "TransactionHandle"]

#: Room left in a bulk batch for the Produce request around it.
_REQUEST_OVERHEAD = 512


class Producer:
    """An asyncio Kafka producer (``acks``, batching, compression, retries, bulk sends).

    Settings follow aiokafka's ``AIOKafkaProducer``; each is validated and a bad
    value raises :class:`~kafkakit.errors.KafkaConfigError` naming it.

    ``linger_ms`` defaults to 0 as in aiokafka: in asyncio, records sent in the
    same event-loop turn already share a batch, because the sender runs only when
    the application yields; a linger only helps when records trickle in.

    ``max_batch_size`` is the size at which a partition's open batch counts as
    full, ready to send (and keyless records move to another sticky partition).
    Until the sender takes it, later records of that partition keep joining it,
    up to ``max_request_size``: Kafka takes one batch per partition per request,
    so the sender would send them as one record batch anyway.  A broker that
    refuses such a batch as too large gets it again in parts of
    ``max_batch_size``.  Idempotent batches stay within ``max_batch_size``.

    ``max_in_flight_requests_per_connection`` above 1 pipelines Produce requests;
    a retry may then reorder a partition's records, as in Kafka without
    idempotence.  Use 1 for strict per-partition order across retries.

    ``send()`` raises at once for bad input: :class:`RecordTooLargeError` for a
    record larger than ``max_request_size`` (or ``buffer_memory``), TypeError for
    a key, value, header or timestamp of the wrong type.  Delivery errors
    (non-retriable broker errors such as MESSAGE_TOO_LARGE, or
    :class:`KafkaTimeoutError` once ``delivery_timeout_ms`` passes while retrying)
    arrive on the awaitable ``send()`` returned.

    ``enable_idempotence=True`` (requires ``acks="all"``, the default then, and
    ``max_in_flight_requests_per_connection <= 5``) makes retries safe: the
    broker drops duplicates and rejects gaps, so every record lands exactly once
    and in order per partition.  ``transactional_id`` enables transactions
    (and idempotence); see :meth:`init_transactions` and docs/transactions.md.
    Left unset (None), idempotence is on when ``acks="all"`` and the in-flight
    limit allows it, as in modern Kafka clients; the default ``acks`` stays 1
    (aiokafka's), which leaves it off.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str] = "localhost:9092",
        client_id: str = "kafkakit",
        acks: int | str | None = None,
        linger_ms: int = 0,
        max_batch_size: int = 16384,
        max_request_size: int = 1048576,
        buffer_memory: int = 33554432,
        compression_type: str | None = None,
        request_timeout_ms: int = 30000,
        delivery_timeout_ms: int = 120000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        partitioner: Partitioner | None = None,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        max_in_flight_requests_per_connection: int = 5,
        transaction_timeout_ms: int = 60000,
        max_block_ms: int = 60000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: OAuthTokenProvider | None = None,
        sasl_oauth_extensions: Mapping[str, str] | None = None,
    ) -> None:
        enable_idempotence, self._acks = check_settings(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            acks=acks,
            enable_idempotence=enable_idempotence,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            max_block_ms=max_block_ms,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            max_request_size=max_request_size,
            buffer_memory=buffer_memory,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            callables={"key_serializer": key_serializer, "value_serializer": value_serializer, "partitioner": partitioner},
        )
        self._compression = Compression.from_name(compression_type)  # KafkaConfigError("compression_type", ...)

        self.client_id = client_id
        self._max_batch_size = max_batch_size
        self._max_request_size = max_request_size
        self._buffer_memory = buffer_memory
        self._request_timeout_ms = request_timeout_ms
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._partitioner = partitioner
        self._metrics = Metrics() if metrics_enabled() else None
        network = None if self._metrics is None else NetworkMetrics(self._metrics, frozenset({ApiKey.PRODUCE}))
        self._send_hooks: list[SendHook] = []
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            retry_backoff_ms=retry_backoff_ms,
            security=SecurityConfig(
                security_protocol=security_protocol,
                ssl_context=ssl_context,
                sasl_mechanism=sasl_mechanism,
                sasl_plain_username=sasl_plain_username,
                sasl_plain_password=sasl_plain_password,
                sasl_oauth_token_provider=sasl_oauth_token_provider,
                sasl_oauth_extensions=sasl_oauth_extensions or {},
            ),
            network_metrics=network,
        )
        self._acc = Accumulator(
            max_batch_size=max_batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            compression=self._compression,
            wake_sender=self._wake_sender,
        )
        self._identity: ProducerIdentity | None = None
        self._txn: TransactionManager | None = None
        if enable_idempotence:
            self._identity = ProducerIdentity(
                transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
            )
        if transactional_id is not None:
            assert self._identity is not None
            self._txn = TransactionManager(
                self._cluster,
                self._identity,
                request_timeout_ms=request_timeout_ms,
                max_block_ms=max_block_ms,
                retry_backoff_ms=retry_backoff_ms,
                wake_sender=self._wake_sender,
                reset_sequences=self._acc.reset_sequences,
            )
        self._retry_backoff = retry_backoff_ms / 1000
        self._sender = Sender(
            self._cluster,
            self._acc,
            acks=self._acks,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_in_flight=max_in_flight_requests_per_connection,
            max_request_size=max_request_size,
            on_metadata_update=self._forget_topics,
            identity=self._identity,
            transactions=self._txn,
        )
        if self._metrics is not None:
            attach(self._sender, self._acc, ProducerMetrics(self._metrics, self._acc))
        self._topics: dict[str, TopicState] = {}
        # The futures of the last two send() calls, for reuse (see send()).
        self._old_future: RecordFuture | None = None
        self._older_future: RecordFuture | None = None
        self._sticky = StickyPartitions()
        self._bulk = BulkQueueing(
            self._acc,
            self._sticky,
            compression=self._compression,
            limit=min(max_request_size, buffer_memory) - BATCH_HEADER_SIZE - _REQUEST_OVERHEAD,
            buffer_memory=buffer_memory,
            partitioner=self._partitioner,
            user_partition=self._user_partition,
            sticky_limit=self._sticky_limit,
        )
        # The largest record send() accepts (its estimated size in a batch).
        self._max_record_size = min(max_request_size, buffer_memory) - BATCH_HEADER_SIZE
        # A full batch (max_batch_size) is ready, and the sender sends a partition's ready
        # batches as one record batch of up to max_request_size; until it takes the batch,
        # records join it rather than opening a 16 KiB batch each (a batch, its future and
        # its completion cost 5% of the per-record path). A broker that refuses the grown
        # batch as too large gets it again as max_batch_size batches (Accumulator.split).
        # Idempotent batches keep max_batch_size: their sequences are fixed when sent.
        self._batch_limit = max_batch_size
        if self._identity is None:
            self._batch_limit = max(max_batch_size, max_request_size - _REQUEST_OVERHEAD)
        self._acc.batch_limit = self._batch_limit
        self._accepting = False
        self._send_checks = True
        if self._identity is not None:
            self._identity.on_fatal = self._update_send_path
        self._started = False
        self._closed = False

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the sender."""
        if self._closed:
            raise ProducerClosed("the producer was stopped; create a new one")
        if self._started:
            return
        await self._cluster.start()
        identity = self._identity
        try:
            conn = await self._cluster.any_connection()
        except BaseException:
            await self._cluster.close()
            raise
        if conn.supports(ApiKey.PRODUCE):  # (else the first send raises UnsupportedVersionError)
            preload(ApiKey.PRODUCE, conn.version(ApiKey.PRODUCE))  # not in the first send's way
        if identity is not None and self._txn is None:
            try:
                await identity.init_producer_id(
                    conn, bump=False, timeout=self._request_timeout_ms / 1000, backoff=self._retry_backoff
                )
            except BaseException:
                await self._cluster.close()
                raise
        self._sender.start()
        self._started = True
        self._accepting = True
        self._update_send_path()

    async def stop(self, timeout: float | None = None) -> None:
        """Stop accepting records, deliver everything already sent, then close connections.

        ``timeout`` (seconds) bounds the wait for delivery, as Java's ``close(Duration)``:
        records still undelivered then fail with ProducerClosed. Without it, delivery is
        waited for up to ``delivery_timeout_ms``, reachable cluster or not.
        """
        if self._closed:
            return
        self._closed = True
        self._accepting = False
        self._update_send_path()
        if self._started:
            try:
                await self.flush(timeout)
            except TimeoutError:
                log.warning("producer stopped after %ss with records undelivered: they fail", timeout)
            finally:
                self._acc.closed = True
                await self._sender.stop()
                self._acc.abort_all(
                    ProducerClosed("the producer was stopped before these records were delivered")
                )
                if self._txn is not None:
                    await self._txn.close()
                await self._cluster.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _wake_sender(self) -> None:
        self._sender.wake()

    # -- observability -------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Kafka's producer metrics by name (``record-send-rate``, ``record-send-rate{topic=t}``...): docs/metrics.md."""
        return self._metrics.snapshot() if self._metrics is not None else {}

    def add_send_hook(self, hook: SendHook) -> None:
        """Call ``hook(topic, key, value, partition, headers)`` in each ``send()`` (not ``send_batch``)
        before queueing; it may append headers and return a callback for the outcome (see SendHook).
        """
        self._send_hooks.append(hook)
        if len(self._send_hooks) == 1:  # an instance attribute in front of send(): without hooks, none
            self.send = functools.partial(hooked_send, self._send_hooks, self.send)  # type: ignore[method-assign]

    def _forget_topics(self) -> None:
        # Partition counts or leaders may have changed: rebuild topic states lazily.
        self._acc.place_unplaced()  # with the partitions they were sent under
        self._topics.clear()

    # -- sending one record ------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> RecordFuture:
        """Queue one record; returns an awaitable of its :class:`RecordMetadata`.

        Waits only for a new topic's metadata or, when ``buffer_memory`` is used
        up, for room.  Raises :class:`RecordTooLargeError` for a record larger than
        ``max_request_size`` (or ``buffer_memory``), TypeError for a value or key
        that is not bytes after serialisation, ValueError for a ``timestamp_ms`` below 0
        or after :data:`~kafkakit.producer.record_future.MAX_TIMESTAMP_MS` (the year 2262).
        """
        if self._send_checks:
            key, value = self._checked_input(key, value)
        if value is None:
            size = RECORD_OVERHEAD
        else:
            if value.__class__ is not bytes:
                value = as_bytes(value, "value")
            size = RECORD_OVERHEAD + len(value)
        if key is None and not headers:
            plain = True  # the commonest record: no key, no headers
        else:
            plain = False
            if key is not None:
                if key.__class__ is not bytes:
                    key = as_bytes(key, "key")
                size += len(key)
                held = KEY_MEMORY_OVERHEAD  # memory beyond the wire size of key and headers
            else:
                held = 0
            if headers:
                headers, header_size = check_headers(headers)
                size += header_size
                held += HEADERS_MEMORY_OVERHEAD
        # A record too large for a request is refused before anything else, in each branch
        # below: on the sticky path only when its batch is full (see _sticky_limit).
        try:  # a subscript in a try costs less than dict.get()
            state = self._topics[topic]
        except KeyError:
            state = None  # looked up outside the handler: its errors must not chain to a KeyError
        if state is None:
            state = await self._topic_state(topic)
        pq: PartitionQueue | None
        batch: ProducerBatch | None  # set when already known to have room for this record
        limit: int  # the batch size at which the record opens a new batch (see _batch_limit)
        if partition is None:
            if key is None and self._partitioner is None:
                # KIP-480: stick to one partition until a record would open a new batch there.
                pq = state.sticky_queue
                batch = pq.open
                limit = state.sticky_limit
                if batch is None or batch.size + size > limit:
                    if size > self._max_record_size:
                        raise self._too_large(size)
                    pq = self._switch_sticky(topic, state, size)
                    batch = None
                    limit = state.sticky_limit
            elif self._partitioner is None:
                if size > self._max_record_size:
                    raise self._too_large(size)
                pq = state.single
                if pq is None:
                    # None for a key not seen lately: the record is parked (below) and placed
                    # with others, its key hashed in one vectorised pass (key_placement.py).
                    pq = state.by_key.get(key)  # not a subscript in a try: misses are common (unique keys)
                batch = None
                limit = self._batch_limit
            else:
                if size > self._max_record_size:
                    raise self._too_large(size)
                pq = state.queues[self._user_partition(state, key)]
                batch = None
                limit = self._batch_limit
        else:
            if size > self._max_record_size:
                raise self._too_large(size)
            try:
                pq = state.send_queues[partition]  # empty while keyed records are parked
            except KeyError:
                pq = None
            if pq is None:
                pq = await self._explicit_partition(topic, partition, state)
            batch = None
            limit = self._batch_limit
        if timestamp_ms is None:
            stamp = _time_ns()  # nanoseconds: see STAMPS_PER_MS
        elif timestamp_ms.__class__ is int and 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            stamp = timestamp_ms * STAMPS_PER_MS
        else:
            raise invalid_timestamp(timestamp_ms)
        acc = self._acc
        # Accumulator.reserve's fast path, inlined; released per record when the batch completes.
        free = acc.free - (size + RECORD_MEMORY_OVERHEAD)  # one big int, not two
        if free >= 0:
            acc.free = free
        else:
            await acc.reserve(size + RECORD_MEMORY_OVERHEAD)
            batch = None  # the sender may have taken it meanwhile
        # Accumulator.append, inlined: this is the per-record hot path.
        if batch is None:
            if pq is None:  # a key whose partition is not known yet
                unplaced = state.unplaced
                if unplaced is None:
                    unplaced = state.park(topic, acc)
                acc.free -= held  # taken once queued (the plain path pays nothing for it)
                index = len(unplaced.values)
                unplaced.values.append(value)
                unplaced.keys.append(key)  # type: ignore[arg-type]  # bytes here
                unplaced.stamps.append(stamp)
                unplaced.sizes.append(size)
                if headers:
                    unplaced.headers[index] = headers
                placeholder = unplaced.placeholder
                futures = unplaced.futures
                parked = self._older_future  # reused when nothing else holds it, as on the batch path below
                self._older_future = self._old_future
                if parked is None:
                    parked = RecordFuture()
                elif parked._batch is placeholder:
                    if _getrefcount(parked) == 3:  # this local, the argument, our list's entry
                        futures[parked._delta] = None
                    else:
                        parked = RecordFuture()
                elif _getrefcount(parked) != 2:
                    parked = RecordFuture()
                if FUTURES_REUSABLE:
                    self._old_future = parked
                parked._batch = placeholder
                parked._delta = index
                parked._timestamp = stamp
                parked._state = None
                parked._asyncio_future_blocking = False
                futures.append(parked)
                return parked
            batch = pq.open
            if batch is None or batch.size + size > limit:
                batch = acc.new_batch(pq)
        values = batch.values  # columns: see ProducerBatch.values
        values.append(value)
        batch.stamps.append(stamp)
        if not plain:
            # Taken once queued, so that the plain path pays nothing for it: the buffer may go
            # over by one record's ``held``, and the next send waits for it.
            acc.free -= held
            if headers:
                batch.add_key_and_headers(len(values) - 1, key, headers)
            else:  # a key alone: ProducerBatch.add_key_and_headers, inlined
                keys = batch.keys
                if keys is None:
                    keys = batch.keys = []
                if len(keys) + 1 != len(values):
                    batch.pad_keys(len(values) - 1)
                keys.append(key)  # type: ignore[arg-type]  # bytes here
        batch.size += size
        # RecordFuture.of(batch, index, timestamp_ms), inlined: a quarter of this path's cost
        # went to building the future. Keep in step with of().
        # The future of the send before last is reused when nothing but this call holds it
        # (the application dropped it, and no callback or waiter holds it): creating and
        # freeing one cost 0.2 us of this path's 1.7. Two sends back, because the common
        # ``last = await send(...)`` still holds the previous one.
        future = self._older_future  # always None without FUTURES_REUSABLE
        self._older_future = self._old_future
        if future is None or _getrefcount(future) != 2:  # 2: this local and the call's argument
            future = RecordFuture()
        if FUTURES_REUSABLE:
            self._old_future = future
        future._batch = batch
        future._delta = len(values) - 1
        future._timestamp = stamp
        future._state = None
        future._asyncio_future_blocking = False
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> RecordMetadata:
        """Send one record and wait until it is acknowledged."""
        pending = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await pending

    def _switch_sticky(self, topic: str, state: TopicState, size: int) -> PartitionQueue:
        """Move ``topic``'s keyless records to a new sticky partition (KIP-480: they filled a
        batch's worth where they were, or its batch is gone), for a batch's worth there.

        While keyed records are parked, send() comes here for every keyless record: they are
        placed first, and the record (``size`` bytes) stays where it was when it fits."""
        if state.unplaced is not None:
            state.place_parked()
            pq = state.sticky_queue
            batch = pq.open
            if batch is not None and batch.size + size <= state.sticky_limit:
                return pq
        if len(state.all_partitions) > 1:
            pq = state.stick_to(self._sticky.next(topic, state.all_partitions, state.available, state.sticky))
        else:
            pq = state.sticky_queue
        state.sticky_limit = self._sticky_limit(pq)
        return pq

    def _sticky_limit(self, pq: PartitionQueue) -> int:
        """The size of ``pq``'s open batch up to which keyless records stay: max_batch_size of
        records after those it holds (a full batch keeps growing until the sender takes it,
        so records coming back to a partition join its open batch), or, when the open batch
        cannot grow by that much, max_batch_size: they open a new batch."""
        batch = pq.open
        if batch is None or batch.size + self._max_batch_size - BATCH_HEADER_SIZE > self._batch_limit:
            limit = self._max_batch_size
        else:
            limit = batch.size + self._max_batch_size - BATCH_HEADER_SIZE
        # A batch holds at least its header: a record that fits below this limit is no larger
        # than _max_record_size, which send() then need not check on its sticky path.
        return min(limit, self._max_record_size + BATCH_HEADER_SIZE)

    def _user_partition(self, state: TopicState, key: bytes | None) -> int:
        """The user partitioner's choice for a record, which must be one of the topic's (with the
        default partitioner, keys are placed by key_placement and partitions_for_keys)."""
        assert self._partitioner is not None
        partition = self._partitioner(key, state.all_partitions, state.available)
        if partition not in state.queues:
            raise KafkaConfigError("partitioner", f"returned {partition!r}, not one of {state.all_partitions}")
        return partition

    async def _topic_state(self, topic: str) -> TopicState:
        """Partition lists of ``topic`` from the metadata cache (fetching them when unknown)."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        cluster = self._cluster
        meta = cluster.metadata.topics.get(topic)
        if meta is None or meta.error_code or not meta.partitions or topic not in cluster.wanted_topics:
            await cluster.partitions_for(topic)
            meta = cluster.metadata.topics[topic]
            if not self._accepting:
                raise self._not_accepting()
        # Records parked under a forgotten state of this topic queue before any sent under the new one.
        self._acc.place_unplaced()
        all_partitions = sorted(meta.partitions)
        available = [p for p in all_partitions if meta.partitions[p].leader >= 0]
        queues = {p: self._acc.queue(topic, p) for p in all_partitions}
        sticky = self._sticky.get(topic, all_partitions, available)
        if sticky not in queues:
            sticky = self._sticky.next(topic, all_partitions, available)
        state = TopicState(all_partitions, available, queues, sticky, self._sticky_limit(queues[sticky]))
        self._topics[topic] = state
        return state

    async def _explicit_partition(self, topic: str, partition: int, state: TopicState) -> PartitionQueue:
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise TypeError(f"partition must be an int, not {partition!r}")
        if state.unplaced is not None:  # keyed records are parked: they queue first
            state.place_parked()
            pq = state.queues.get(partition)
            if pq is not None:
                return pq
        # The partition may have been added since the last refresh: look once more.
        await self._cluster.refresh_metadata([topic])
        self._topics.pop(topic, None)
        state = await self._topic_state(topic)
        pq = state.queues.get(partition)
        if pq is None:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist (partitions: {state.all_partitions})"
            )
        return pq

    def _not_accepting(self) -> Exception:
        if self._closed:
            return ProducerClosed("the producer is stopped")
        return IllegalStateError("the producer is not started: call (and await) start() first")

    def _too_large(self, size: int) -> RecordTooLargeError:
        limit, setting = (
            (self._max_request_size, "max_request_size")
            if self._max_request_size <= self._buffer_memory
            else (self._buffer_memory, "buffer_memory")
        )
        return RecordTooLargeError(
            f"the record is {size} bytes when serialized, larger than {setting}={limit}"
        )

    def _update_send_path(self) -> None:
        """Let send() skip its checks while none could refuse a record or change it.

        Called whenever one of their inputs changes (start, stop, a fatal error); a
        transactional producer always checks (its state changes with every transaction).
        """
        identity = self._identity
        self._send_checks = not (
            self._accepting
            and self._txn is None
            and (identity is None or identity.fatal is None)
            and self._key_serializer is None
            and self._value_serializer is None
        )

    def _checked_input(self, key: Any, value: Any) -> tuple[Any, Any]:
        """send()'s checks and serialisation, when _update_send_path says they are needed."""
        if not self._accepting:
            raise self._not_accepting()
        if self._identity is not None:
            self._check_can_send()
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        return key, value

    def _check_can_send(self) -> None:
        assert self._identity is not None
        self._identity.check_fatal()
        if self._txn is not None:
            self._txn.check_can_send()

    # -- transactions -------------------------------------------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise KafkaConfigError("transactional_id", "transactions need a transactional_id")
        if not self._started or self._closed:
            raise self._not_accepting()
        return self._txn

    @property
    def transaction_state(self) -> TransactionState | None:
        """The transaction state (None for a non-transactional producer)."""
        return self._txn.state if self._txn is not None else None

    @property
    def transaction_version(self) -> int | None:
        """1 or 2 (KIP-890), chosen by ``init_transactions``; None for a non-transactional producer."""
        return self._txn.transaction_version if self._txn is not None else None

    async def init_transactions(self) -> None:
        """Register the transactional id with its coordinator (call once, after ``start``).

        Fences every older producer with the same ``transactional_id`` and aborts
        (or completes) the transaction it left open.
        """
        await self._transactions().init_transactions()

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._transactions().begin_transaction()

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn).

        Raises :class:`~kafkakit.errors.TransactionStateError` if a record of the
        transaction failed (abort instead), :class:`ProducerFencedError` if a newer
        producer took over the transactional id (fatal: stop this producer).
        """
        await self._transactions().commit(self.flush)

    async def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError, sent ones are discarded."""
        txn = self._transactions()
        acc = self._acc

        async def wait_in_flight() -> None:
            futures = acc.pending_futures()
            if futures:
                await asyncio.wait(futures)

        await txn.abort(
            lambda: acc.fail_queued(TransactionAbortedError("the transaction was aborted")),
            wait_in_flight,
        )

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group_metadata: GroupMetadata
    ) -> None:
        """Commit consumer offsets as part of the transaction (they apply only if it commits).

        ``offsets`` are the next offsets to consume; ``group_metadata`` comes from
        ``consumer.group_metadata()``: a consumer that was rebalanced out in the
        meantime makes this raise :class:`~kafkakit.errors.CommitFailedError` (KIP-447).
        """
        await self._transactions().send_offsets(offsets, group_metadata)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Self]:
        """``async with producer.transaction():`` begins, then commits, or aborts on an exception."""
        txn = self._transactions()
        txn.begin_transaction()
        try:
            yield self
        except BaseException:
            if txn.state is not TransactionState.FATAL:
                await self.abort_transaction()
            raise
        await self.commit_transaction()

    async def prepare_transaction(self) -> TransactionHandle:
        """Deliver the transaction's records without ending it; returns a handle for
        :func:`kafkakit.producer.transactions.complete_transaction`.

        The transaction must then be completed before ``transaction_timeout_ms``
        passes (the coordinator aborts it) and before any producer with the same
        transactional id calls ``init_transactions`` (which aborts it too).  This
        producer may complete it itself (commit/abort_transaction) or, once it is
        completed elsewhere, call :meth:`forget_prepared_transaction`.
        """
        return await self._transactions().prepare(self.flush)

    def forget_prepared_transaction(self) -> None:
        """The prepared transaction was completed by ``complete_transaction``: be ready for the next one."""
        self._transactions().forget_prepared()

    # -- flushing ---------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is delivered or failed.

        Delivery errors stay on the records' futures; ``flush`` itself raises only
        :class:`asyncio.TimeoutError` when ``timeout`` (seconds) passes first.
        """
        acc = self._acc
        acc.flushing += 1
        self._sender.wake()
        try:
            futures = acc.pending_futures()
            if futures:
                done, pending = await asyncio.wait(futures, timeout=timeout)
                if pending:
                    raise TimeoutError(f"flush: {len(pending)} batch(es) still undelivered after {timeout}s")
        finally:
            acc.flushing -= 1

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (waiting for an auto-created topic to appear)."""
        return set(await self._cluster.partitions_for(topic))

    # -- bulk path ------------------------------------------------------------------

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        headers: Sequence[Sequence[Header] | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> SendBatchFuture:
        """Queue many records at once, encoded straight into record batches.

        ``keys`` and ``headers``, when given, are parallel to ``values`` (one entry
        per record; ``None`` entries allowed).  Every record gets ``timestamp_ms``
        (default: now).  Records go to ``partition``, else by key like ``send()``,
        else whole batches go to sticky partitions (one partition per batch).

        Batches are cut at ``max_request_size`` (not ``max_batch_size``: the whole
        point is big batches) and take buffer memory like ``send()``, so a huge
        list waits for room.  Awaiting the returned future gives a
        :class:`SendBatchResult`, a lazy sequence of RecordMetadata in the order of
        ``values`` plus per-batch ``ranges``; if any batch fails, awaiting raises
        that batch's error (the other batches are still delivered).

        Records of one call keep their relative order within a partition and come
        after records sent earlier to that partition.
        """
        if not self._accepting:
            raise self._not_accepting()
        if self._identity is not None:
            self._check_can_send()
        bulk = bulk_input(values, keys, headers, timestamp_ms, self._value_serializer, self._key_serializer)
        result = SendBatchFuture(topic, len(values), bulk.timestamp_ms)
        if not values:
            return result
        state = self._topics.get(topic)
        if state is None:
            state = await self._topic_state(topic)
        state.place_parked()  # records sent before these queue first
        largest = max(bulk.sizes)
        if largest - BULK_RECORD_OVERHEAD + RECORD_OVERHEAD > self._max_record_size:
            raise self._too_large(largest)
        await self._bulk.enqueue(topic, state, bulk, partition, result)
        return result
