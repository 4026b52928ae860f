"""The sender: one task that turns ready batches into Produce requests.

Each cycle groups the ready partition queues by leader and, per broker
connection, writes up to ``max_in_flight`` pipelined Produce requests
(``send_frame`` returns the response future without awaiting it).  Responses
are handled in done-callbacks, so no task or coroutine exists per request.

Coalescing: Kafka accepts one record batch per partition per request, so a
backlog of ``max_batch_size`` batches would cost one round trip each.  When
several ready batches of one partition are queued, the sender encodes them as
one record batch of up to ``max_request_size``; the broker then sees few large
batches, which is what makes ``send()`` fast.  If the broker rejects such a
batch as too large (its ``message.max.bytes`` is lower), the batches are resent
one by one.

Retries: a retriable failure (a partition error such as NOT_LEADER_OR_FOLLOWER,
a lost connection, a request timeout) puts the batch back at its place in its
partition's queue after ``retry_backoff_ms`` and asks for fresh metadata, so
the retry goes to the new leader.  When ``delivery_timeout_ms`` has passed since
the batch was created, it fails with :class:`KafkaTimeoutError`.

Ordering: a retried batch goes back ahead of every younger batch of its
partition.  With ``max_in_flight_requests_per_connection > 1`` a younger batch
of the same partition may already be in flight and land first (Kafka's
documented behaviour without idempotence); with ``1`` a partition has at most
one batch in flight, so order holds across retries.

Idempotence (``identity`` given): each batch gets its partition's next
sequence number when first drained and keeps it (and its encoding) across
retries; coalescing is off so a resent batch is byte-identical.  Up to
``max_in_flight`` (at most 5, the broker's window) batches of a partition may
be in flight, once the partition has acknowledged a batch of the current producer
id/epoch (before that, one: a broker takes any first sequence from a producer it
has no state for).  As in Java, a batch put back for a retry is resent only when it
is its partition's first unacknowledged batch (the lowest sequence sent and not
completed): the retries behind it wait for its answer, so none overtakes it.
DUPLICATE_SEQUENCE_NUMBER counts as success; OUT_OF_ORDER_SEQUENCE_NUMBER or
UNKNOWN_PRODUCER_ID for a batch behind an unacknowledged one is retried (its
predecessor is being resent); the same errors at the first unacknowledged
batch mean the broker lost our state: the sender drains what is in flight,
bumps the epoch (KIP-360) and renumbers.  In a transaction such a gap instead
makes the transaction abortable.  INVALID_PRODUCER_EPOCH / PRODUCER_FENCED are
fatal without a transaction; in one they make it abortable (see transactions).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortedError,
    UnknownServerError,
    for_code,
)
from kafkakit.net.connection import BrokerConnection
from kafkakit.producer.accumulator import Accumulator, PartitionQueue, ProducerBatch
from kafkakit.producer.idempotence import (
    FENCING_CODES,
    ProducerIdentity,
    fenced_error,
    next_sequence,
    stamp_batch,
)
from kafkakit.producer.record_future import STAMPS_PER_MS
from kafkakit.producer.transactions import choose_version
from kafkakit.protocol.build import make_request, millis
from kafkakit.protocol.framing import ApiKey
from kafkakit.records import encode_queued_batches
from kafkakit.structs import TopicPartition

if TYPE_CHECKING:
    from kafkakit.producer.instrumentation import ProducerMetrics
    from kafkakit.producer.transactions import TransactionManager

log = logging.getLogger(__name__)

_NO_OFFSETS = (-1, -1, -1)
_TOO_LARGE = {10, 18}  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
_OUT_OF_ORDER = 45
_DUPLICATE_SEQUENCE = 46
_UNKNOWN_PRODUCER_ID = 59
_CONCURRENT_TRANSACTIONS = 51
_CONCURRENT_BACKOFF = 0.02
#: Room left in a request for everything around the record batches.
_REQUEST_OVERHEAD = 512


class _InFlight:
    """One Produce request awaiting its response."""

    __slots__ = ("node_id", "conn", "groups", "timer", "done", "payload")

    def __init__(
        self, node_id: int, conn: BrokerConnection, groups: list[tuple[PartitionQueue, list[ProducerBatch]]]
    ) -> None:
        self.node_id = node_id
        self.conn = conn
        self.groups = groups  # per partition, the batches sent as one record batch
        self.timer: asyncio.TimerHandle | None = None
        self.done = False
        # The encoded record batches, held until the response (as a lone batch's ``encoded``
        # is): freed as soon as written, the top of the heap was handed back to the system
        # after each request and faulted in again for the next (~45,000 page faults per
        # million 100-byte records, about a tenth of the producer's time).
        self.payload: list[bytes] = []


class Sender:
    """Drains the accumulator into Produce requests, one background task per producer."""

    def __init__(
        self,
        cluster: Cluster,
        accumulator: Accumulator,
        *,
        acks: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
        max_in_flight: int,
        max_request_size: int,
        on_metadata_update: Callable[[], None] = lambda: None,
        identity: ProducerIdentity | None = None,
        transactions: TransactionManager | None = None,
    ) -> None:
        self._cluster = cluster
        self._acc = accumulator
        self._acks = acks
        self._request_timeout_ms = request_timeout_ms
        self._request_timeout = request_timeout_ms / 1000
        self._retry_backoff = retry_backoff_ms / 1000
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._max_in_flight = max_in_flight
        self._guarantee_order = max_in_flight == 1
        self._identity = identity
        self._txn = transactions
        self._reset_wanted = False  # KIP-360: bump the epoch once nothing is in flight
        # Idempotence: per partition, the batches with a sequence not yet completed, in order.
        self._unacked: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._unacked_identity = (-1, -1)
        self._max_request_size = max_request_size
        self._on_metadata_update = on_metadata_update
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._in_flight: dict[int, int] = {}
        self._requests: set[_InFlight] = set()
        self._refresh_task: asyncio.Task[None] | None = None
        self._last_refresh = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: The producer's metrics, recorded once per request and per retried batch (None: off).
        self.metrics: ProducerMetrics | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kafkakit-producer-sender")

    def wake(self) -> None:
        """Run a drain cycle soon (cheap; called when a batch becomes ready)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def stop(self) -> None:
        """Stop the task; in-flight requests are failed by the caller closing the cluster."""
        tasks: list[asyncio.Task[Any]] = [t for t in (self._task, self._refresh_task) if t is not None]
        tasks.extend(self._connecting.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for request in list(self._requests):
            if request.timer is not None:
                request.timer.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                # Before the waiter exists: the batches this opens need not wake this cycle again.
                self._acc.place_unplaced()
            except Exception:
                log.exception("placing keyed records failed")
            waiter = self._waiter = loop.create_future()
            try:
                delay = await self._run_once()
            except Exception:  # a bug here must not silently stop all sending
                log.exception("producer sender cycle failed")
                delay = self._retry_backoff
            if waiter.done():
                continue
            handle = loop.call_later(delay, _resolve, waiter) if delay is not None else None
            await waiter
            if handle is not None:
                handle.cancel()

    # -- one cycle -------------------------------------------------------------

    async def _run_once(self) -> float | None:
        """Send what is ready; return how long to sleep before the next cycle (None: until woken)."""
        acc = self._acc
        cluster = self._cluster
        identity = self._identity
        if identity is not None:
            if identity.fatal is not None:
                acc.fail_queued(identity.fatal)
                return None
            if self._reset_wanted:
                if any(self._in_flight.values()):
                    return None  # woken by the last response
                if not await self._bump_epoch():
                    return self._retry_backoff
        txn = self._txn
        if (
            txn is not None
            and txn.abortable_error is not None
            and acc.fail_queued(
                TransactionAbortedError(f"the transaction failed and must be aborted: {txn.abortable_error}")
            )
        ):
            txn.on_batch_error(txn.abortable_error, sequence_gap=True)
        now = time.monotonic()
        metadata = cluster.metadata
        need_metadata = cluster.metadata_stale
        next_at = math.inf
        by_node: dict[int, list[PartitionQueue]] = {}
        guarantee_order = self._guarantee_order
        for by_partition in acc.queues.values():
            for pq in by_partition.values():
                if not pq.batches:
                    continue
                if acc.expire(pq, now, self._delivery_timeout):
                    self._sequence_gap(KafkaError(f"a batch to {pq.tp.topic}-{pq.tp.partition} expired"))
                if not pq.batches or self._blocked(pq, guarantee_order):
                    continue
                if txn is not None and not txn.partition_added(pq.tp):
                    continue  # AddPartitionsToTxn is on its way; it wakes us
                if not acc.is_ready(pq, now):
                    next_at = min(next_at, acc.next_linger_deadline(pq))
                    continue
                leader = metadata.leader_for(pq.tp)
                if leader is None:
                    acc.seal(pq)
                    need_metadata = True
                    next_at = min(next_at, now + self._retry_backoff)
                    continue
                nodes = by_node.get(leader)
                if nodes is None:
                    by_node[leader] = [pq]
                else:
                    nodes.append(pq)
        for node_id, queues in by_node.items():
            conn = self._connections.get(node_id)
            if conn is None or not conn.connected:
                for pq in queues:
                    acc.seal(pq)
                self._connect(node_id)
                continue
            await self._send_to(node_id, conn, queues, now)
        if need_metadata and acc.has_incomplete:
            self._refresh_metadata()
            next_at = min(next_at, now + self._retry_backoff)
        if next_at == math.inf:
            return None
        return max(next_at - time.monotonic(), 0.0)

    async def _send_to(
        self, node_id: int, conn: BrokerConnection, queues: list[PartitionQueue], now: float
    ) -> None:
        acc = self._acc
        guarantee_order = self._guarantee_order
        max_size = self._max_request_size - _REQUEST_OVERHEAD
        while self._acks == 0 or self._in_flight.get(node_id, 0) < self._max_in_flight:
            groups: list[tuple[PartitionQueue, list[ProducerBatch]]] = []
            size = 0
            for pq in queues:
                if not pq.batches or self._blocked(pq, guarantee_order) or not acc.is_ready(pq, now):
                    continue
                head = pq.batches[0]
                if groups and size + head.size > max_size:
                    continue
                group = [acc.take(pq)]
                size += head.size
                if self._identity is not None:
                    if head.base_sequence < 0 and head.encoded is None and not head.solo:
                        size = self._attach_followers(pq, head, size, max_size, now)
                    self._assign_sequence(pq, head)
                elif head.encoded is None and not head.solo:
                    size = self._coalesce(pq, group, size, max_size, now)
                groups.append((pq, group))
            if not groups:
                return
            await self._send_request(node_id, conn, groups)
            if not conn.connected:
                return

    def _blocked(self, pq: PartitionQueue, guarantee_order: bool) -> bool:
        """Whether ``pq`` must wait for its in-flight batches before sending its head batch."""
        if not pq.in_flight:
            return False
        if guarantee_order:
            return True
        if self._identity is None:
            return False
        # Idempotence, as in Java: up to max_in_flight batches of a partition in flight (the
        # broker dedups the last 5).  A retry (a batch that has its sequence) goes only once it
        # is the partition's first unacknowledged batch: the retries behind it wait for its
        # answer, so none can overtake it and the broker sees the sequences in order.
        head = pq.batches[0]
        if head.base_sequence >= 0:
            return head is not self._first_unacked(pq.tp)
        if pq.acked_sequence == 0:
            # A broker accepts any first sequence from a producer id it has no state for, so
            # until the partition acknowledged a batch of this producer id/epoch only one goes:
            # a failed first batch (e.g. a new topic's leader not ready) could be overtaken.
            return True
        return pq.in_flight >= self._max_in_flight

    def _first_unacked(self, tp: TopicPartition) -> ProducerBatch | None:
        """The lowest-sequence batch of ``tp`` sent and not yet completed, if any."""
        pending = self._unacked_batches(tp)
        while pending and (pending[0].future.done() or pending[0].base_sequence < 0):
            pending.popleft()  # completed (or failed, or its sequence was reset)
        return pending[0] if pending else None

    def _unacked_batches(self, tp: TopicPartition) -> deque[ProducerBatch]:
        identity = self._identity
        assert identity is not None
        current = (identity.producer_id, identity.epoch)
        if current != self._unacked_identity:
            # A new producer id or epoch renumbers every partition from 0.
            self._unacked.clear()
            self._unacked_identity = current
        pending = self._unacked.get(tp)
        if pending is None:
            pending = self._unacked[tp] = deque()
        return pending

    def _assign_sequence(self, pq: PartitionQueue, batch: ProducerBatch) -> None:
        if batch.base_sequence < 0:
            batch.base_sequence = pq.next_sequence
            pq.next_sequence = next_sequence(pq.next_sequence, _wire_count(batch))
            self._unacked_batches(pq.tp).append(batch)

    def _attach_followers(
        self, pq: PartitionQueue, head: ProducerBatch, size: int, max_size: int, now: float
    ) -> int:
        """Idempotent coalescing: the next fresh batches ride in ``head``'s record batch for good."""
        acc = self._acc
        batches = pq.batches
        followers: list[ProducerBatch] = []
        while batches:
            nxt = batches[0]
            if (
                nxt.encoded is not None
                or nxt.solo
                or nxt.base_sequence >= 0
                or nxt.followers
                or size + nxt.size > max_size
                or not acc.is_ready(pq, now)
            ):
                break
            followers.append(acc.take_follower(pq))
            size += nxt.size
        if followers:
            head.followers = followers
        return size

    def _coalesce(
        self, pq: PartitionQueue, group: list[ProducerBatch], size: int, max_size: int, now: float
    ) -> int:
        """Add the partition's next ready batches to ``group`` while the request has room.

        Kafka takes one record batch per partition per request, so a backlog of
        ``max_batch_size`` batches would cost a request each; sending them as one
        record batch (up to ``max_request_size``) cuts the per-request cost that
        dominates on both client and broker.
        """
        acc = self._acc
        batches = pq.batches
        while batches:
            nxt = batches[0]
            if nxt.encoded is not None or nxt.solo or size + nxt.size > max_size or not acc.is_ready(pq, now):
                break
            group.append(acc.take(pq))
            size += nxt.size
        return size

    def _encode_group(self, group: list[ProducerBatch]) -> bytes:
        identity = self._identity
        if identity is not None:
            # Never coalesced: one batch whose sequence (and bytes) survive retries.
            (batch,) = group
            if batch.encoded is None:  # the first send: encoded with the producer fields in place
                parts = [batch]
                if batch.followers:
                    parts += batch.followers
                data = encode_queued_batches(
                    parts,
                    compression=self._acc.compression,
                    producer_id=identity.producer_id,
                    producer_epoch=identity.epoch,
                    base_sequence=batch.base_sequence,
                    transactional=identity.transactional,
                    stamps_per_ms=STAMPS_PER_MS,
                )
            else:  # a retry (maybe under a new epoch or sequence) or a pre-encoded bulk batch
                data = stamp_batch(
                    batch.encoded, identity.producer_id, identity.epoch, batch.base_sequence, identity.transactional
                )
            batch.encoded = data
            return data
        if len(group) == 1:
            return group[0].encode(self._acc.compression)
        return encode_queued_batches(group, compression=self._acc.compression, stamps_per_ms=STAMPS_PER_MS)

    async def _send_request(
        self, node_id: int, conn: BrokerConnection, groups: list[tuple[PartitionQueue, list[ProducerBatch]]]
    ) -> None:
        acc = self._acc
        topic_data: dict[str, list[dict[str, Any]]] = {}
        encodable: list[tuple[PartitionQueue, list[ProducerBatch]]] = []
        payload: list[bytes] = []
        for pq, group in groups:
            try:
                data = self._encode_group(group)
            except Exception as exc:  # bad record contents: fail those records only
                error = exc if isinstance(exc, KafkaError | TypeError | ValueError) else KafkaError(repr(exc))
                for batch in group:
                    acc.fail(pq, batch, error)
                continue
            encodable.append((pq, group))
            payload.append(data)
            partitions = topic_data.get(pq.tp.topic)
            if partitions is None:
                partitions = topic_data[pq.tp.topic] = []
            partitions.append({"index": pq.tp.partition, "records": data})
        if not encodable:
            return
        if self.metrics is not None:
            self.metrics.produce_request(encodable, payload, time.monotonic())
        version = conn.version(ApiKey.PRODUCE)
        if self._txn is not None:
            # Produce v12+ tells the broker we speak transaction version 2 (partitions added implicitly).
            version = choose_version(conn, ApiKey.PRODUCE, self._txn.transaction_version)
        request = make_request(
            ApiKey.PRODUCE,
            version,
            transactional_id=self._identity.transactional_id if self._identity is not None else None,
            acks=self._acks,
            timeout=self._request_timeout_ms,
            topic_data=[{"name": name, "partition_data": parts} for name, parts in topic_data.items()],
        )
        if self._acks == 0:
            try:
                await conn.send(request, expect_response=False)
            except KafkaError as exc:
                self._retry_all(encodable, exc)
                return
            for pq, group in encodable:
                for batch in group:
                    acc.complete(pq, batch, _NO_OFFSETS)
            return
        try:
            future = conn.send_frame(request)
        except KafkaError as exc:
            self._retry_all(encodable, exc)
            return
        assert future is not None
        request_state = _InFlight(node_id, conn, encodable)
        request_state.payload = payload
        self._in_flight[node_id] = self._in_flight.get(node_id, 0) + 1
        self._requests.add(request_state)
        request_state.timer = asyncio.get_running_loop().call_later(
            self._request_timeout, self._on_timeout, request_state
        )
        future.add_done_callback(functools.partial(self._on_response, request_state))

    # -- responses -------------------------------------------------------------

    def _finish(self, request: _InFlight) -> None:
        request.done = True
        if request.timer is not None:
            request.timer.cancel()
        self._in_flight[request.node_id] -= 1
        self._requests.discard(request)

    def _on_timeout(self, request: _InFlight) -> None:
        if request.done:
            return
        self._finish(request)
        error = KafkaTimeoutError(
            f"Produce request to broker {request.node_id} got no response within "
            f"request_timeout_ms={self._request_timeout_ms}"
        )
        self._retry_all(request.groups, error)
        # The stream is unusable once a response is overdue: drop the connection.
        if self._connections.get(request.node_id) is request.conn:
            del self._connections[request.node_id]
        asyncio.ensure_future(request.conn.close())
        self.wake()

    def _on_response(self, request: _InFlight, future: asyncio.Future[Any]) -> None:
        if request.done:
            return
        self._finish(request)
        try:
            if future.cancelled():
                raise KafkaConnectionError("Produce request cancelled")
            error = future.exception()
            if error is not None:
                if self._connections.get(request.node_id) is request.conn and not request.conn.connected:
                    del self._connections[request.node_id]
                self._retry_all(request.groups, error)
                return
            self._handle_response(request, future.result())
        finally:
            self.wake()

    def _handle_response(self, request: _InFlight, response: Any) -> None:
        acc = self._acc
        results: dict[tuple[str, int], Any] = {}
        for topic in response.responses:
            for partition in topic.partition_responses:
                results[(topic.name, int(partition.index))] = partition
        now = time.monotonic()
        for pq, group in request.groups:
            tp = pq.tp
            result = results.get((tp.topic, tp.partition))
            error: BaseException
            if result is None:
                error = UnknownServerError(f"no Produce result for {tp.topic}-{tp.partition}")
                for batch in reversed(group):
                    self._retry_or_fail(pq, batch, error, now)
                continue
            code = int(result.error_code)
            if (
                self._identity is not None
                and code
                and self._handle_idempotence_error(pq, group[0], code, result, now)
            ):
                continue
            if code == 0:
                if self._identity is not None:
                    pq.acked_sequence = next_sequence(group[0].base_sequence, _wire_count(group[0]))
                offset = int(result.base_offset)
                log_append_time = millis(result.log_append_time)
                log_start_offset = int(result.log_start_offset)
                acc.complete_group(pq, group, offset, log_append_time, log_start_offset)
                continue
            if code in _TOO_LARGE and len(group) > 1:
                # Our coalescing overshot the broker's limit: resend the batches one by one.
                for batch in reversed(group):
                    batch.solo = True
                    acc.requeue(pq, batch)
                continue
            if code in _TOO_LARGE and self._identity is None and acc.split(pq, group[0]):
                continue  # a batch that grew past max_batch_size: resent in max_batch_size parts
            moved = False
            if Cluster.is_refresh_error(code):
                moved = self._take_leader_hint(tp, result, response)
                if not moved:
                    self._cluster.request_metadata_update()
            error = for_code(code)(_describe(tp, result))
            for batch in reversed(group):
                # KIP-951: with the new leader known, the retry goes to it at once.
                self._retry_or_fail(pq, batch, error, now, backoff=0.0 if moved else None)

    def _take_leader_hint(self, tp: TopicPartition, result: Any, response: Any) -> bool:
        """Use the new leader a Produce v10+ error answer names (KIP-951); True when taken."""
        taken = self._cluster.metadata.take_leader_hint(tp, result, response)
        if taken:
            log.info("%s-%s: leader moved to broker %s", tp.topic, tp.partition, self._cluster.metadata.leader_for(tp))
        return taken

    def _handle_idempotence_error(
        self, pq: PartitionQueue, batch: ProducerBatch, code: int, result: Any, now: float
    ) -> bool:
        """Handle the sequence and epoch errors of an idempotent Produce; False: not one of them."""
        if code == _DUPLICATE_SEQUENCE:
            # The broker already has this batch (an earlier attempt landed): success, offset unknown.
            pq.acked_sequence = next_sequence(batch.base_sequence, _wire_count(batch))
            self._acc.complete(pq, batch, _NO_OFFSETS)
            return True
        if code in FENCING_CODES and self._txn is not None:
            # A newer instance, or the coordinator aborted our transaction on timeout (KIP-588):
            # abortable; abort_transaction() asks the coordinator which it was.
            error = for_code(code)(_describe(pq.tp, result))
            self._acc.fail(pq, batch, error)
            self._txn.on_batch_error(error, sequence_gap=True, fence_suspect=True)
            return True
        if code in FENCING_CODES:
            assert self._identity is not None
            fenced = fenced_error(code, f"Produce to {pq.tp.topic}-{pq.tp.partition}")
            self._identity.set_fatal(fenced)
            self._acc.fail(pq, batch, fenced)
            return True
        if code in (_OUT_OF_ORDER, _UNKNOWN_PRODUCER_ID) and batch is not self._first_unacked(pq.tp):
            # A batch ahead of this one failed and is being resent (the broker saw a gap, or,
            # on a partition new to this producer, no first batch yet): retry behind it.
            batch.last_error = for_code(code)(_describe(pq.tp, result))
            self._acc.requeue(pq, batch)
            return True
        if code in (_OUT_OF_ORDER, _UNKNOWN_PRODUCER_ID):
            error = for_code(code)(_describe(pq.tp, result))
            if self._txn is not None:
                self._txn.on_batch_error(error, sequence_gap=True)
                self._acc.fail(pq, batch, error)
                return True
            # The broker lost our producer state: bump the epoch and resend from sequence 0.
            log.warning("%s: resetting sequence numbers with a new epoch", error)
            batch.last_error = error
            self._reset_wanted = True
            self._acc.requeue(pq, batch)
            return True
        return False

    def _sequence_gap(self, reason: KafkaError) -> None:
        """A sequenced batch was given up: the broker would see a gap after it."""
        if self._identity is None:
            return
        if self._txn is not None:
            self._txn.on_batch_error(reason, sequence_gap=True)
        else:
            self._reset_wanted = True

    async def _bump_epoch(self) -> bool:
        """KIP-360: a new epoch (or producer id) and sequences from 0; False to try again later."""
        identity = self._identity
        assert identity is not None
        try:
            conn = await self._cluster.any_connection()
            await identity.init_producer_id(
                conn, bump=True, timeout=self._request_timeout, backoff=self._retry_backoff
            )
        except KafkaError as exc:
            if identity.fatal is None and not exc.retriable:
                identity.set_fatal(exc)
            log.warning("cannot bump the producer epoch: %s", exc)
            return False
        self._acc.reset_sequences()
        self._reset_wanted = False
        return True

    def _retry_all(
        self, groups: list[tuple[PartitionQueue, list[ProducerBatch]]], error: BaseException
    ) -> None:
        now = time.monotonic()
        if isinstance(error, KafkaConnectionError | KafkaTimeoutError):
            self._cluster.request_metadata_update()
        # Youngest first, so each requeue lands ahead of the ones already put back.
        for pq, group in reversed(groups):
            for batch in reversed(group):
                self._retry_or_fail(pq, batch, error, now)

    def _retry_or_fail(
        self, pq: PartitionQueue, batch: ProducerBatch, error: BaseException, now: float, *, backoff: float | None = None
    ) -> None:
        batch.last_error = error
        if getattr(error, "retriable", False):
            backoff = self._retry_backoff if backoff is None else backoff
            if getattr(error, "code", None) == _CONCURRENT_TRANSACTIONS:
                # TV2: the previous transaction's markers are still being written; clears in ms.
                backoff = min(backoff, _CONCURRENT_BACKOFF)
            retry_at = now + backoff
            if retry_at - batch.created < self._delivery_timeout:
                batch.attempts += 1
                batch.retry_at = retry_at
                if self.metrics is not None:
                    self.metrics.batch_retried(batch)
                log.debug("retrying %r after %s", batch, error)
                self._acc.requeue(pq, batch)
                return
            error = KafkaTimeoutError(
                f"delivery_timeout_ms={self._delivery_timeout * 1000:.0f} expired for {batch.record_count} record(s) to "
                f"{batch.tp.topic}-{batch.tp.partition} after {batch.attempts + 1} attempt(s); last error: {error}"
            )
        log.warning(
            "failed to deliver %d record(s) to %s-%s: %s",
            batch.record_count,
            batch.tp.topic,
            batch.tp.partition,
            error,
        )
        self._acc.fail(pq, batch, error)
        if self._txn is not None:
            self._txn.on_batch_error(error, sequence_gap=batch.base_sequence >= 0)
        elif batch.base_sequence >= 0:
            self._sequence_gap(KafkaError(f"a batch to {pq.tp.topic}-{pq.tp.partition} failed: {error}"))

    # -- connections and metadata -------------------------------------------------

    def _connect(self, node_id: int) -> None:
        if node_id in self._connecting:
            return
        task = asyncio.create_task(
            self._cluster.connection(node_id), name=f"kafkakit-producer-connect-{node_id}"
        )
        self._connecting[node_id] = task
        task.add_done_callback(functools.partial(self._on_connected, node_id))

    def _on_connected(self, node_id: int, task: asyncio.Task[BrokerConnection]) -> None:
        self._connecting.pop(node_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, KafkaError) and not error.retriable:
            # Refused (authentication, an untrusted certificate): every try would fail the same
            # way, so the records for this broker fail now instead of at delivery_timeout_ms.
            log.warning("cannot connect to broker %s: %s", node_id, error)
            self._fail_where(lambda pq: self._cluster.metadata.leader_for(pq.tp) == node_id, error)
        elif error is not None:
            log.info("cannot connect to broker %s: %s", node_id, error)
            self._cluster.request_metadata_update()
        else:
            self._connections[node_id] = task.result()
        self.wake()

    def _fail_where(self, selected: Callable[[PartitionQueue], bool], error: KafkaError) -> None:
        """Fail every queued batch of the selected partitions with ``error``."""
        if self._acc.fail_queued(error, selected):
            self._sequence_gap(error)

    def _refresh_metadata(self) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return
        now = time.monotonic()
        if now - self._last_refresh < self._retry_backoff:
            return  # the cycle sleeps at most retry_backoff, so the refresh happens soon
        self._last_refresh = now
        self._refresh_task = asyncio.create_task(
            self._cluster.refresh_metadata(), name="kafkakit-producer-metadata"
        )
        self._refresh_task.add_done_callback(self._on_refreshed)

    def _on_refreshed(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, KafkaError) and not error.retriable:
            log.warning("metadata refresh failed: %s", error)
            self._fail_where(lambda pq: True, error)
        elif error is not None:
            log.info("metadata refresh failed: %s", error)
        self._on_metadata_update()
        self.wake()


def _wire_count(batch: ProducerBatch) -> int:
    """Records in ``batch``'s record batch on the wire (its own plus its followers')."""
    followers = batch.followers
    if not followers:
        return batch.record_count
    return batch.record_count + sum(f.record_count for f in followers)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _describe(tp: TopicPartition, result: Any) -> str:
    text = f"{tp.topic}-{tp.partition}"
    message = getattr(result, "error_message", None)
    if message:
        text += f": {message}"
    record_errors = getattr(result, "record_errors", ())
    if record_errors:
        text += "; " + ", ".join(
            f"record {e.batch_index}: {e.batch_index_error_message}" for e in record_errors[:5]
        )
    return text
