"""The consumer's background fetcher: prefetching, buffering, position resets.

One loop task decides what to fetch; each broker gets at most one Fetch in
flight, covering every assigned, unpaused partition it leads whose buffered
bytes are below the prefetch threshold. Responses are stored undecoded (one
:class:`Chunk` per partition and response); records are decoded only when the
application drains them in ``getmany``, so decoding never competes with
fetching and data that a ``seek`` throws away is never decoded. A chunk is
decoded a piece (a few thousand records) at a time, and ``getmany`` without
``max_records`` hands out one piece per partition, so the application reads
records while they are still in the CPU cache.

Each partition keeps two offsets: ``position`` (the next record handed to the
application) and ``fetch_offset`` (the next offset to request, past whatever
is buffered). ``epoch`` counts seeks/resets so a response to a request sent
before one is dropped; so is one sent for an earlier assignment of the
partition (another state object, whose count may be the same).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    CorruptRecordError,
    KafkaError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    for_code,
)
from kafkakit.protocol.build import make_request
from kafkakit.protocol.framing import ApiKey
from kafkakit.records import (
    decode_batch_list,
    iter_batch_headers,
    visible_batches,
)
from kafkakit.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from .fetch_session import (
    FIRST_SESSION_VERSION,
    SESSION_ERRORS,
    FetchSessionHandler,
    SessionRequest,
    SessionStats,
    fetch_topics,
    fetch_version,
    forgotten_topics,
    response_topic_name,
    topic_ids,
)
from .offsets import EARLIEST, LATEST, READ_COMMITTED, list_offsets
from .partition_state import NO_EPOCH, Chunk, PartitionState
from .validation import PositionValidator

if TYPE_CHECKING:
    from .instrumentation import FetchMetrics

log = logging.getLogger(__name__)

Record: TypeAlias = ConsumerRecord[Any, Any]
Deserializer: TypeAlias = Callable[[Any], Any]
#: Where newly assigned partitions start when the consumer has a group: committed offsets.
CommittedLookup: TypeAlias = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, OffsetAndMetadata]]]

_OFFSET_OUT_OF_RANGE = 1
# Partition errors that a metadata refresh (and a retry) fixes: unknown topic or
# leader, not leader, storage error, fenced/unknown leader epoch, offset not available.
_REFRESH_ERRORS = {3, 5, 6, 56, 74, 75, 76, 78, 100, 103}  # ... unknown / inconsistent topic id
#: Errors whose Fetch v16+ answer may name the new leader (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH).
_HINTED = frozenset({6, 74})


class NoOffsetForPartitionError(OffsetOutOfRangeError):  # type: ignore[misc]
    """A partition has no position and ``auto_offset_reset="none"`` forbids picking one."""


class FetcherConfig:
    """The fetch-related consumer settings, already validated."""

    __slots__ = (
        "max_wait_ms",
        "min_bytes",
        "max_bytes",
        "partition_max_bytes",
        "isolation_level",
        "auto_offset_reset",
        "check_crcs",
        "retry_backoff",
        "request_timeout",
        "prefetch_bytes",
        "key_deserializer",
        "value_deserializer",
    )

    def __init__(
        self,
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: int,
        auto_offset_reset: str,
        check_crcs: bool,
        retry_backoff: float,
        request_timeout: float,
        key_deserializer: Deserializer | None,
        value_deserializer: Deserializer | None,
    ) -> None:
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.check_crcs = check_crcs
        self.retry_backoff = retry_backoff
        self.request_timeout = request_timeout
        # Keep fetching a partition until about two responses are buffered: one
        # being drained by the application while the next one is on its way.
        self.prefetch_bytes = 2 * partition_max_bytes
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer


class Fetcher:
    """Prefetches records for the assigned partitions and hands them out on demand."""

    def __init__(self, cluster: Cluster, config: FetcherConfig) -> None:
        self._cluster = cluster
        self._config = config
        self._states: dict[TopicPartition, PartitionState] = {}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._in_flight_bytes: dict[int, int] = {}  # node -> max_bytes of its Fetch in flight
        self._sessions: dict[int, FetchSessionHandler] = {}  # node -> its KIP-227 fetch session
        self.session_stats = SessionStats()
        self._wakeup = asyncio.Event()
        self._data_ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reset_task: asyncio.Task[None] | None = None
        self._validate_task: asyncio.Task[None] | None = None
        self._validator = PositionValidator(cluster, config.auto_offset_reset, config.retry_backoff, config.request_timeout, self._data_ready)
        self._next_refresh = 0.0
        self._closed = False
        self._rotation = 0
        #: Set by the group coordinator: positions come from committed offsets before the reset policy.
        self.committed_lookup: CommittedLookup | None = None
        #: The consumer's fetch metrics, recorded per response and per decoded piece (None: off).
        self.metrics: FetchMetrics | None = None

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kafkakit-fetcher")

    async def close(self) -> None:
        self._closed = True
        self._data_ready.set()
        tasks = [
            t
            for t in (self._task, self._reset_task, self._validate_task, *self._in_flight.values())
            if t is not None
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- assignment and positions ------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions that stay keep their position and buffer."""
        wanted = list(dict.fromkeys(partitions))
        old = self._states
        self._states = {
            tp: old.get(tp) or PartitionState(tp, self._config.partition_max_bytes) for tp in wanted
        }
        for tp, state in old.items():
            if tp not in self._states:
                state.epoch += 1  # drop any response still on its way
                if self.metrics is not None:
                    self.metrics.discarded(state)
        self._wake()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of an assigned partition (KeyError when ``tp`` is not assigned)."""
        return self._states[tp]

    def states(self) -> Iterable[PartitionState]:
        return self._states.values()

    def seek(self, tp: TopicPartition, offset: int | None) -> None:
        state = self._states[tp]
        if self.metrics is not None:
            self.metrics.discarded(state)
        state.seek(offset)
        self._wake()

    def pause(self, tp: TopicPartition) -> None:
        self._states[tp].paused = True

    def pause_if_assigned(self, tp: TopicPartition) -> None:
        """Stop handing out ``tp`` (a partition being revoked); no-op when it is not assigned."""
        state = self._states.get(tp)
        if state is not None:
            state.paused = True

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions (next offset to hand out) of the assigned ones among ``partitions``."""
        out = {}
        for tp in partitions:
            state = self._states.get(tp)
            if state is not None and state.position is not None:
                out[tp] = state.position
        return out

    def committable(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The known positions of the assigned ones among ``partitions``, with their leader epochs."""
        out = {}
        for tp in partitions:
            state = self._states.get(tp)
            if state is not None and state.position is not None:
                out[tp] = OffsetAndMetadata(state.position, "", state.position_epoch())
        return out

    def wake_waiters(self) -> None:
        """Wake getmany/getone so they notice a stop or a fatal group error."""
        self._data_ready.set()

    def resume(self, tp: TopicPartition) -> None:
        self._states[tp].paused = False
        self._wake()

    async def ensure_positions(self, states: list[PartitionState]) -> None:
        """Give every partition in ``states`` without a position one, by the reset policy."""
        missing = [s for s in states if s.position is None]
        if missing:
            await self._reset_positions(missing)
        for state in states:
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    async def ensure_validated(self, state: PartitionState) -> None:
        """Wait until ``state``'s position is checked against its leader (or raise what that found)."""
        while state.validating and state.error is None:
            self._wake()
            task = self._validate_task
            if task is not None and not task.done():
                await asyncio.wait([task])
            else:
                await asyncio.sleep(min(self._config.retry_backoff, 0.05))
        self.raise_pending_error([state])

    async def _reset_positions(self, states: list[PartitionState]) -> None:
        if self.committed_lookup is not None:
            # Not for a position the leader disowned (KIP-320): its committed offset is that position.
            by_policy = [s for s in states if s.reset_by_policy]
            states = by_policy + await self._positions_from_committed([s for s in states if not s.reset_by_policy])
            if not states:
                self._wake()
                return
        policy = self._config.auto_offset_reset
        if policy == "none":
            for s in states:
                s.error = NoOffsetForPartitionError(
                    f"{s.tp.topic}-{s.tp.partition} has no position and auto_offset_reset='none'"
                )
            self._data_ready.set()
            return
        timestamp = EARLIEST if policy == "earliest" else LATEST
        epochs = {s.tp: s.epoch for s in states}
        try:
            found = await list_offsets(
                self._cluster,
                dict.fromkeys(epochs, timestamp),
                isolation_level=self._config.isolation_level,
                timeout=self._config.request_timeout,
            )
        except KafkaError as exc:
            for s in states:
                if s.epoch == epochs[s.tp] and s.position is None:
                    s.error = exc
            self._data_ready.set()
            return
        for s in states:
            result = found.get(s.tp)
            # Apply only if nobody seeked meanwhile.
            if result is not None and s.epoch == epochs[s.tp] and s.position is None:
                s.seek(result.offset)
        self._wake()

    async def _positions_from_committed(self, states: list[PartitionState]) -> list[PartitionState]:
        """Seek partitions to their committed offsets; return those still without a position."""
        assert self.committed_lookup is not None
        epochs = {s.tp: s.epoch for s in states}
        try:
            committed = await self.committed_lookup(list(epochs))
        except KafkaError as exc:
            for s in states:
                if s.epoch == epochs[s.tp] and s.position is None:
                    s.error = exc
            self._data_ready.set()
            return []
        remaining = []
        for s in states:
            if s.epoch != epochs[s.tp] or s.position is not None:
                continue  # seeked meanwhile
            found = committed.get(s.tp)
            if found is None:
                remaining.append(s)
            else:
                s.seek(found.offset, found.leader_epoch)
        return remaining

    # -- handing records to the application ------------------------------

    def raise_pending_error(self, states: Iterable[PartitionState]) -> None:
        """Raise (once) an error stored for one of ``states``."""
        for state in states:
            if state.error is not None:
                error, state.error = state.error, None
                self._wake()
                raise error

    def has_in_flight(self) -> bool:
        return bool(self._in_flight)

    def drain(
        self, states: list[PartitionState], max_records: int | None
    ) -> dict[TopicPartition, list[Record]]:
        """Take up to ``max_records`` buffered records, rotating fairly over ``states``."""
        result: dict[TopicPartition, list[Record]] = {}
        budget = max_records if max_records is not None else -1
        count = len(states)
        if not count:
            return result
        start = self._rotation % count
        self._rotation += 1
        for i in range(count):
            state = states[(start + i) % count]
            if state.paused or not state.chunks:
                continue
            taken = self._drain_partition(state, budget)
            if taken:
                result[state.tp] = taken
                if budget > 0:
                    budget -= len(taken)
                    if budget == 0:
                        break
        return result

    def _drain_partition(self, state: PartitionState, budget: int) -> list[Record]:
        """Up to ``budget`` records of ``state`` (budget < 0: the next decoded piece, whole)."""
        out: list[Record] = []
        chunks = state.chunks
        while chunks and budget != 0:
            chunk = chunks[0]
            records = chunk.records
            start = chunk.index
            if start == len(records):
                if chunk.next_batch < len(chunk.batches):
                    records = chunk.records = self._decode(state, chunk)
                    start = chunk.index = 0
                    if not records:
                        continue
                else:
                    self._finish_chunk(state)
                    continue
            left = len(records) - start
            if budget < 0 or left <= budget:
                taken = records if start == 0 else records[start:]
                chunk.index = len(records)
            else:
                taken = records[start : start + budget]
                chunk.index = start + budget
            state.position = taken[-1].offset + 1
            if chunk.index == len(records) and chunk.next_batch == len(chunk.batches):
                self._finish_chunk(state)
            if out:
                out.extend(taken)
            else:
                out = taken
            if budget < 0:
                break  # one piece per call: the application reads it while it is still in the CPU cache
            budget -= len(taken)
        return out

    def next_decoded(self, state: PartitionState) -> Record | None:
        """The next record of ``state``'s decoded piece, or None (used up, paused, unassigned or failed).

        The ``async for`` path: one record at a time without drain()'s
        bookkeeping; drain() decodes the next piece when this returns None.
        """
        chunks = state.chunks
        if not chunks or state.paused or state.error is not None or self._states.get(state.tp) is not state:
            return None
        chunk = chunks[0]
        records = chunk.records
        index = chunk.index
        if index >= len(records):
            return None
        record = records[index]
        chunk.index = index = index + 1
        state.position = record.offset + 1
        if index == len(records) and chunk.next_batch == len(chunk.batches):
            self._finish_chunk(state)
        return record

    def _finish_chunk(self, state: PartitionState) -> None:
        """Drop the fully handed-out first chunk; the position moves past it (and its control batches)."""
        chunk = state.chunks.popleft()
        state.buffered_bytes -= len(chunk.data)
        state.position = chunk.next_offset
        self._wake()

    def _decode(self, state: PartitionState, chunk: Chunk) -> list[Record]:
        tp = state.tp
        check_crcs = self._config.check_crcs
        first = chunk.next_batch
        try:
            if chunk.aborted:
                chunk.next_batch = len(chunk.batches)  # the aborted-transaction walk needs every batch in order
                records = _decode_committed(chunk, tp, check_crcs)
            else:
                records = decode_batch_list(
                    chunk.data,
                    chunk.next_piece(),
                    tp.topic,
                    tp.partition,
                    check_crc=check_crcs,
                    min_offset=chunk.fetch_offset,
                )
        except CorruptRecordError:
            # Do not skip past a corrupt batch silently: the app sees the error and may seek.
            state.seek(state.position)
            raise
        key_des = self._config.key_deserializer
        value_des = self._config.value_deserializer
        if key_des is not None or value_des is not None:
            try:
                records = _deserialized(records, key_des, value_des)
            except BaseException:
                chunk.next_batch = first  # the next getmany decodes (and fails on) the same records again
                raise
        if self.metrics is not None:
            self.metrics.decoded(tp.topic, len(records), chunk.batches[first : chunk.next_batch])
        return records

    async def wait_for_data(self, timeout: float | None) -> None:
        """Wait until a fetch buffered data (or an error), up to ``timeout`` seconds."""
        # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that lands in
        # the step the event is set, so a cancelled getmany() would keep polling (stop() hung).
        try:
            async with asyncio.timeout(timeout):
                await self._data_ready.wait()
        except TimeoutError:
            pass

    def clear_data_ready(self) -> None:
        self._data_ready.clear()

    # -- the fetch loop ----------------------------------------------------

    def _wake(self) -> None:
        self._wakeup.set()

    async def _run(self) -> None:
        while not self._closed:
            self._wakeup.clear()
            retry_in: float | None = None
            try:
                retry_in = await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher step failed")
                retry_in = self._config.retry_backoff
            if retry_in is None:
                await self._wakeup.wait()
            else:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), retry_in)
                except TimeoutError:
                    pass

    async def _step(self) -> float | None:
        """Start resets and fetches; return seconds until a retry is due (None: wait for a wakeup)."""
        cluster = self._cluster
        retry_in: float | None = None
        topics = {tp.topic for tp in self._states}
        missing = topics - cluster.wanted_topics or {t for t in topics if t not in cluster.metadata.topics}
        if (missing or cluster.metadata_stale) and topics:
            if time.monotonic() >= self._next_refresh:
                self._next_refresh = time.monotonic() + self._config.retry_backoff
                try:
                    await cluster.refresh_metadata(topics)
                except KafkaError as exc:
                    log.warning("metadata refresh failed: %s", exc)
                    if not exc.retriable:  # refused: the application hears of it, no retry loop
                        self._fail_states(self._states.values(), exc)
            retry_in = self._config.retry_backoff
        self._start_resets()
        by_node: dict[int, list[PartitionState]] = {}
        # Buffered data plus the responses in flight stay within fetch_max_bytes, however many
        # partitions are assigned (per-partition prefetch alone grew with their number). Paused
        # partitions' data does not count: the application may wait on another partition.
        budget = self._config.max_bytes - sum(self._in_flight_bytes.values())
        budget -= sum(state.buffered_bytes for state in self._states.values() if not state.paused)
        if budget <= 0:
            return retry_in
        for state in self._states.values():
            if (
                state.paused
                or state.in_flight
                or state.fetch_offset is None
                or state.error is not None
                or state.buffered_bytes >= self._config.prefetch_bytes
            ):
                continue
            leader = cluster.metadata.leader_for(state.tp)
            if leader is None:
                cluster.request_metadata_update()
                retry_in = self._config.retry_backoff
                continue
            if state.validating or not self._leader_epoch_current(state):
                continue  # the position is checked against the new leader first (KIP-320)
            if leader not in self._in_flight:
                by_node.setdefault(leader, []).append(state)
        self._start_validations()
        for node, states in by_node.items():
            for state in states:
                state.in_flight = True
            max_bytes = self._in_flight_bytes[node] = max(budget // len(by_node), 1)
            self._in_flight[node] = asyncio.create_task(
                self._fetch(node, states, max_bytes), name=f"kafkakit-fetch-{node}"
            )
        return retry_in

    def _fail_states(self, states: Iterable[PartitionState], error: KafkaError) -> None:
        """Hand ``error`` to the application for these partitions (the next getmany raises it)."""
        for state in states:
            if state.error is None:
                state.error = error
        self._data_ready.set()

    def _leader_epoch_current(self, state: PartitionState) -> bool:
        """Follow the partition's leader epoch in metadata; False when the position needs checking.

        A new leader epoch after data was fetched under an older one means a new leader, whose
        log may have lost what this consumer read (an unclean election): the position goes to
        validation when its epoch is known. (Older metadata never replaces newer: see
        ``ClusterMetadata.update``.)
        """
        info = self._cluster.metadata.partition(state.tp)
        leader_epoch = info.leader_epoch if info is not None else NO_EPOCH
        if leader_epoch == state.leader_epoch:
            return True
        if state.leader_epoch != NO_EPOCH and leader_epoch > state.leader_epoch and state.position_epoch() is not None:
            state.validating = True
            return False
        state.leader_epoch = leader_epoch
        return True

    def _start_validations(self) -> None:
        if self._validate_task is not None and not self._validate_task.done():
            return
        need = [s for s in self._states.values() if s.validating and s.error is None and s.position is not None]
        if need:
            self._validate_task = asyncio.create_task(self._validator.validate(need), name="kafkakit-validate-positions")
            self._validate_task.add_done_callback(lambda _t: self._wake())

    def _start_resets(self) -> None:
        if self._reset_task is not None and not self._reset_task.done():
            return
        need = [s for s in self._states.values() if s.position is None and s.error is None]
        if need:
            self._reset_task = asyncio.create_task(self._reset_positions(need), name="kafkakit-reset-offsets")
            self._reset_task.add_done_callback(lambda _t: self._wake())

    async def _fetch(self, node: int, states: list[PartitionState], max_bytes: int) -> None:
        backoff = False
        try:
            backoff = await self._fetch_once(node, states, max_bytes)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            log.debug("fetch from broker %s failed: %s", node, exc)
            if not exc.retriable:
                self._fail_states(states, exc)
            self._cluster.request_metadata_update()
            backoff = True
        except Exception:
            log.exception("fetch from broker %s failed", node)
            backoff = True
        finally:
            for state in states:
                state.in_flight = False
            self._in_flight_bytes.pop(node, None)  # what the response brought is counted as buffered now
        if backoff:
            await asyncio.sleep(self._config.retry_backoff)
        del self._in_flight[node]
        self._wake()

    async def _fetch_once(self, node: int, states: list[PartitionState], max_bytes: int) -> bool:
        """One Fetch round trip (at most ``max_bytes``, or one batch); True when the caller should back off."""
        config = self._config
        conn = await self._cluster.connection(node)
        # The state object itself, not only its seek count: a partition unassigned and assigned
        # again meanwhile has a new state whose count starts at 0 again and can equal the old one.
        sent = {s.tp: (s, s.epoch, s.fetch_offset) for s in states}
        wanted = {s.tp: (s.fetch_offset, s.max_bytes, s.leader_epoch) for s in states if s.fetch_offset is not None}
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSessionHandler(self.session_stats)
        if conn.version(ApiKey.FETCH) >= FIRST_SESSION_VERSION:
            plan = session.next_request(wanted)
            session_fields = {"session_id": plan.session_id, "session_epoch": plan.epoch}
        else:
            plan = SessionRequest(0, -1, [(tp, *entry) for tp, entry in wanted.items()])
            session_fields = {"session_id": 0, "session_epoch": -1}
        # v13+ name topics by id: every topic this session may answer for needs one.
        ids = topic_ids(self._cluster.metadata, {tp.topic for tp in (*wanted, *plan.forgotten)})
        version = fetch_version(conn.version(ApiKey.FETCH), ids)
        request = make_request(
            ApiKey.FETCH,
            version,
            cluster_id=None,
            replica_id=-1,
            replica_state={"replica_id": -1, "replica_epoch": -1},  # v15+: a consumer
            max_wait=config.max_wait_ms,
            min_bytes=config.min_bytes,
            max_bytes=max_bytes,
            isolation_level=config.isolation_level,
            topics=fetch_topics(plan.partitions, ids),
            forgotten_topics_data=forgotten_topics(plan.forgotten, ids),
            rack_id="",
            **session_fields,
        )
        sent_at = time.monotonic()
        try:
            response = await conn.send(request, timeout=config.request_timeout + config.max_wait_ms / 1000)
        except BaseException:
            session.reset()  # the broker may or may not have seen this epoch
            raise
        code = int(response.error_code)
        if plan.epoch >= 0:
            session.on_response(plan, code, int(response.session_id))
        if code in SESSION_ERRORS:
            log.info("fetch session with broker %s ended (error %s); starting a new one", node, code)
            return False
        if code:
            log.warning("fetch from broker %s failed with error %s", node, code)
            return True
        backoff = False
        names_by_id = {topic_id: name for name, topic_id in (ids or {}).items()}
        for topic in response.responses:
            name = response_topic_name(topic, names_by_id)
            for p in topic.partitions:
                tp = TopicPartition(name or "", int(p.partition_index))
                state = self._states.get(tp)
                asked = sent.get(tp)
                if state is None or asked is None or asked[0] is not state or state.epoch != asked[1]:
                    continue  # unassigned (perhaps assigned again) or seeked while the request was out
                failed = self._handle_partition(state, asked[2], p)
                # KIP-951 (Fetch v16+): a new leader named in the error is fetched from at once.
                hinted = int(p.error_code) in _HINTED and self._cluster.metadata.take_leader_hint(tp, p, response)
                backoff |= failed and not hinted
        if self.metrics is not None:
            self.metrics.fetch_response(states, response, sent_at)
        return backoff


    def _handle_partition(self, state: PartitionState, fetch_offset: int | None, p: Any) -> bool:
        """Store one partition's part of a Fetch response; True when it failed retriably."""
        code = int(p.error_code)
        if code:
            return self._handle_partition_error(state, code)
        state.highwater = int(p.high_watermark)
        lso = int(p.last_stable_offset)
        state.last_stable_offset = lso if lso >= 0 else None
        state.log_start_offset = int(p.log_start_offset)
        data = p.records
        if not data or fetch_offset is None:
            return False
        if type(data) is not bytes:
            data = bytes(data)
        try:
            batches = list(iter_batch_headers(data))
        except CorruptRecordError as exc:
            state.error = exc
            self._data_ready.set()
            return False
        if not batches:
            self._grow_fetch_size(state, len(data))
            return False
        state.note_epochs(batches)
        last = batches[-1][1]
        next_offset = last.base_offset + last.last_offset_delta + 1
        state.max_bytes = self._config.partition_max_bytes
        if next_offset <= fetch_offset:
            return False  # nothing at or past the fetch offset (should not happen)
        aborted = None
        if self._config.isolation_level == READ_COMMITTED and p.aborted_transactions:
            # In first-offset order (visible_batches walks them so).
            aborted = sorted(
                ((int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions), key=lambda a: a[1]
            )
        state.chunks.append(Chunk(data, fetch_offset, next_offset, aborted, batches))
        state.buffered_bytes += len(data)
        state.fetch_offset = next_offset
        self._data_ready.set()
        return False

    def _grow_fetch_size(self, state: PartitionState, received: int) -> None:
        """Only a partial batch came back: ask for more next time, within fetch_max_bytes."""
        limit = self._config.max_bytes
        if state.max_bytes >= limit:
            state.error = RecordTooLargeError(
                f"a record batch of {state.tp.topic}-{state.tp.partition} at offset {state.fetch_offset} "
                f"is larger than fetch_max_bytes={limit}"
            )
            self._data_ready.set()
            return
        state.max_bytes = min(max(state.max_bytes, received) * 2, limit)

    def _handle_partition_error(self, state: PartitionState, code: int) -> bool:
        tp = f"{state.tp.topic}-{state.tp.partition}"
        if code == _OFFSET_OUT_OF_RANGE:
            if self._config.auto_offset_reset == "none":
                state.error = OffsetOutOfRangeError(
                    f"fetch offset {state.fetch_offset} is out of range for {tp}"
                )
                self._data_ready.set()
            else:
                log.info(
                    "fetch offset %s out of range for %s; resetting to %s",
                    state.fetch_offset,
                    tp,
                    self._config.auto_offset_reset,
                )
                state.seek(None)
                state.reset_by_policy = True  # as Java: by the policy, not back to a committed offset
            return False
        if code in _REFRESH_ERRORS or Cluster.is_refresh_error(code):
            self._cluster.request_metadata_update()
            return True
        error = for_code(code)
        if error.retriable:
            return True
        state.error = error(f"fetching {tp}")
        self._data_ready.set()
        return False


def _deserialized(
    records: list[Record], key_des: Deserializer | None, value_des: Deserializer | None
) -> list[Record]:
    """Copies of ``records`` (immutable NamedTuples) with deserialized keys and/or values."""
    if key_des is None:
        assert value_des is not None
        return [r._replace(value=value_des(r.value)) for r in records]
    if value_des is None:
        return [r._replace(key=key_des(r.key)) for r in records]
    return [r._replace(key=key_des(r.key), value=value_des(r.value)) for r in records]


def _decode_committed(chunk: Chunk, tp: TopicPartition, check_crc: bool) -> list[Record]:
    """Every data record of the chunk at or after its fetch offset, without the batches of aborted
    transactions (read_committed); decoded whole, not piece by piece.

    The batch selection is :func:`kafkakit.records.visible_batches`, which
    ``Consumer.fetch_range`` (and so the Spark source) uses too.
    """
    where = f"{tp.topic}-{tp.partition}"
    batches = visible_batches(
        chunk.data, chunk.batches, chunk.aborted, chunk.fetch_offset, check_crcs=check_crc, where=where
    )
    return decode_batch_list(
        chunk.data, batches, tp.topic, tp.partition, check_crc=False, min_offset=chunk.fetch_offset
    )
