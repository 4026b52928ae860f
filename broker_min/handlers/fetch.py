"""Fetch (key 1), v4-12: long poll, KIP-74 size limits, and zero-copy record data.

The response is encoded by hand rather than with kio.  Its layout is small and
stable, and hand-encoding lets each partition's records go out as a file slice
that the server sends with ``loop.sendfile`` (segment bytes never enter Python).
For the flexible v12 the same holds: records are compact bytes whose varint
length is known up front, followed by the partition's (empty) tagged fields.

Fetch sessions (v7+, KIP-227) are kept in :mod:`kafkakit.broker.fetch_sessions`:
epoch 0 opens one, later epochs carry only changed and forgotten partitions and
get back only partitions with news; epoch -1 asks for a sessionless full fetch.
read_committed returns data only below the last stable offset (see
:func:`last_stable_offset`) plus the aborted transactions overlapping
``[fetch offset, LSO)``, which clients use to drop aborted records.

Every read is bounded by the partition's high watermark (the LSO never exceeds
it): a fetch offset between the HW and the log end gets no records rather than
OFFSET_OUT_OF_RANGE, as in Kafka, so the HW can lag the log end once partitions
are replicated.  From v9 each partition's ``current_leader_epoch`` is checked
against the partition's leader epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
see :func:`~kafkakit.broker.handlers.leader_epochs.check_current_leader_epoch`);
partitions a session remembers but the request does not name are not re-checked.

Cluster mode (``state.replicas`` set, :mod:`kafkakit.broker.replication`): a
consumer's Fetch (replica_id -1) is served by the partition's leader only
(NOT_LEADER_OR_FOLLOWER elsewhere).  A follower's Fetch (replica_id >= 0, which
needs CLUSTER_ACTION) reads up to the log end rather than the HW, tells the
replica manager each partition's fetch offset (the follower's log end, which
moves the HW and the ISR) and gets the leader's HW back; its long poll also
ends when a partition's HW moves, so followers learn the HW without waiting out
``max_wait``.  On a single node none of this applies.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, FetchSession, FetchSessionCache
from kafkakit.broker.handlers.base import ApiHandler, FileSliceLike, RawResponse
from kafkakit.broker.handlers.leader_epochs import check_current_leader_epoch
from kafkakit.broker.log.errors import LogError
from kafkakit.broker.replication.hooks import LeaderHook, cluster_hook
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState
    from kafkakit.protocol import RequestHeaderInfo

API_KEY = 1
CLUSTER_NAME = "kafka-cluster"
FIRST_FLEXIBLE = 12
READ_COMMITTED = 1
#: Partition data at least this large is sent from the segment file (sendfile); smaller is copied.
ZERO_COPY_MIN_BYTES = 64 * 1024

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_FIXED = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


@dataclass(slots=True)
class PartitionResult:
    """What one partition contributes to the response."""

    index: int
    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    records: FileSliceLike | bytes = b""

    @property
    def size(self) -> int:
        """Bytes of record data."""
        return len(self.records) if isinstance(self.records, bytes) else self.records.length


@dataclass(slots=True)
class _Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int


def last_stable_offset(state: BrokerState, log: PartitionLog, read_committed: bool = True) -> int:
    """The LSO: the first offset of the oldest open transaction, else the high watermark.

    read_committed builds the partition's producer state (one scan of its
    batch headers, once); read_uncommitted reports the LSO only when that
    state already exists, so plain consumers never pay for the scan.
    """
    producer_state = (
        state.producer_states.for_log(log) if read_committed else state.producer_states.loaded(log)
    )
    if producer_state is None:
        return log.high_watermark
    return producer_state.last_stable_offset(log.high_watermark)


async def handle_fetch(state: BrokerState, header: RequestHeaderInfo, request: Any) -> RawResponse:
    """Read the requested partitions, waiting up to max_wait for min_bytes to be available."""
    version = header.api_version
    session: FetchSession | None = None
    incremental = False
    if version >= 7:
        opened = open_session(state.fetch_sessions, request)
        if isinstance(opened, ErrorCode):
            return encode_fetch_response(version, opened, [])
        session, incremental = opened
    read_committed = request.isolation_level == READ_COMMITTED
    if session is None:
        wanted = [
            _Wanted(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
            for t in request.topics
            for p in t.partitions
        ]
        topics = {w.topic for w in wanted}
    elif incremental:
        wanted = []  # chosen afresh on every pass: only partitions that may have news are read
        topics = {topic for topic, _ in session.partitions}
    else:
        wanted = [
            _Wanted(p.topic, p.partition, p.fetch_offset, p.max_bytes) for p in session.partitions.values()
        ]
        topics = {w.topic for w in wanted}
    cluster = cluster_hook(state)
    follower = cluster is not None and request.replica_id >= 0
    if follower:
        # A follower's fetch needs CLUSTER_ACTION, which covers every topic (Kafka's check).
        allowed = state.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        denied = set() if allowed else set(topics)
    else:
        # A consumer's fetch needs READ on each topic (Kafka's check; denied partitions fail alone).
        denied = {t for t in topics if not state.allowed(AclOperation.READ, ResourceType.TOPIC, t)}
    fenced = _fenced_partitions(state, request) if version >= 9 else {}
    if follower:
        assert cluster is not None
        _record_follower_fetch(cluster, request, denied, fenced)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    watched = session if incremental else None
    high_watermarks: list[int] | None = None
    while True:
        if watched is not None:
            wanted = _maybe_news(state, watched, denied, fenced)
        results, total, failed = _read_all(
            state, wanted, request.max_bytes, read_committed, denied, fenced, cluster, follower
        )
        remaining = deadline - loop.time()
        if total >= request.min_bytes or failed or remaining <= 0:
            break
        if follower:
            seen = [p.high_watermark for _, partitions in results for p in partitions]
            if high_watermarks is not None and seen != high_watermarks:
                break  # a HW moved: the follower learns it now
            high_watermarks = seen
        keys = watched.partitions.keys() if watched is not None else [(w.topic, w.partition) for w in wanted]
        await state.wait_for_append(keys, remaining)
    if session is None:
        return encode_fetch_response(version, ErrorCode.none, results)
    return encode_fetch_response(
        version, ErrorCode.none, _session_news(session, results, incremental), session.session_id
    )


def _fenced_partitions(state: BrokerState, request: Any) -> dict[tuple[str, int], int]:
    """The request's partitions whose current_leader_epoch fails the check, with the error code."""
    fenced: dict[tuple[str, int], int] = {}
    for t in request.topics:
        for p in t.partitions:
            if p.current_leader_epoch < 0:
                continue
            local_epoch = state.leader_epoch(t.topic, p.partition)
            code = check_current_leader_epoch(local_epoch, p.current_leader_epoch)
            if code != ErrorCode.none:
                fenced[(t.topic, p.partition)] = code.value
    return fenced


def _record_follower_fetch(
    cluster: LeaderHook, request: Any, denied: set[str], errors: dict[tuple[str, int], int]
) -> None:
    """Tell the replica manager where the follower fetches from (its log end); partitions this
    node does not lead for it get the error the manager answers."""
    replica_id = request.replica_id
    for t in request.topics:
        if t.topic in denied:
            continue
        for p in t.partitions:
            key = (t.topic, p.partition)
            if key in errors:
                continue
            code = cluster.on_follower_fetch(t.topic, p.partition, replica_id, p.fetch_offset)
            if code is not None:
                errors[key] = code.value


def open_session(cache: FetchSessionCache, request: Any) -> tuple[FetchSession | None, bool] | ErrorCode:
    """(the request's session or None for a sessionless fetch, whether it is incremental), or its error."""
    session_id, epoch = request.session_id, request.session_epoch
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        if session_id:
            cache.remove(session_id)  # closed, or replaced by the new one
        session = cache.create() if epoch == INITIAL_EPOCH else None
        if session is not None:
            _update(session, request)
        return session, False
    session = cache.get(session_id) if session_id else None
    if session is None:
        return ErrorCode.fetch_session_id_not_found
    if epoch != session.epoch:
        return ErrorCode.invalid_fetch_session_epoch
    session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
    for topic in request.forgotten_topics_data:
        for partition in topic.partitions:
            session.forget(topic.topic, partition)
    _update(session, request)
    return session, True


def _update(session: FetchSession, request: Any) -> None:
    for t in request.topics:
        for p in t.partitions:
            session.upsert(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)


def _maybe_news(
    state: BrokerState, session: FetchSession, denied: set[str], fenced: dict[tuple[str, int], int]
) -> list[_Wanted]:
    """The session partitions an incremental Fetch must read: all but those whose fetch offset is at
    the high watermark, unchanged (as is the log start offset) since the session last answered.

    Those would be read only to find nothing to send (no records, no error, no changed offset),
    and a consumer of thousands of quiet partitions would pay that read for each of them on every
    Fetch and every wake-up of its long poll. The LSO needs no look: it moves only with an append,
    which moves the high watermark too (Kafka's session ignores it as well).
    """
    wanted: list[_Wanted] = []
    for p in session.partitions.values():
        if p.topic not in denied and (p.topic, p.partition) not in fenced:
            log = state.partition_log(p.topic, p.partition)
            if (
                log is not None
                and p.fetch_offset == p.high_watermark == log.high_watermark
                and p.log_start_offset == log.log_start_offset
            ):
                continue
        wanted.append(_Wanted(p.topic, p.partition, p.fetch_offset, p.max_bytes))
    return wanted


def _session_news(
    session: FetchSession, results: list[tuple[str, list[PartitionResult]]], incremental: bool
) -> list[tuple[str, list[PartitionResult]]]:
    """The session's view of a read: its remembered values updated; for an incremental request
    only partitions with records, an error or changed offsets (a full one answers them all)."""
    news: list[tuple[str, list[PartitionResult]]] = []
    served: list[tuple[str, int]] = []
    remembered = session.partitions
    for topic, partitions in results:
        kept: list[PartitionResult] = []
        for p in partitions:
            known = remembered.get((topic, p.index))
            if known is None:  # forgotten meanwhile by a request of a misbehaving client
                kept.append(p)
            # Inlined SessionPartition.changed: this loop runs for every partition of every Fetch.
            elif (
                known.high_watermark != p.high_watermark
                or known.last_stable_offset != p.last_stable_offset
                or known.log_start_offset != p.log_start_offset
            ):
                known.high_watermark = p.high_watermark
                known.last_stable_offset = p.last_stable_offset
                known.log_start_offset = p.log_start_offset
                kept.append(p)
            elif not incremental or p.error or p.records:
                kept.append(p)
            if p.records:
                served.append((topic, p.index))
        if kept:
            news.append((topic, kept))
    session.rotate(served)
    return news


def _read_all(
    state: BrokerState,
    wanted: list[_Wanted],
    max_bytes: int,
    read_committed: bool,
    denied: set[str],
    fenced: dict[tuple[str, int], int],
    cluster: LeaderHook | None = None,
    follower: bool = False,
) -> tuple[list[tuple[str, list[PartitionResult]]], int, bool]:
    """(results grouped by topic in request order, record bytes, whether any partition failed)."""
    grouped: list[tuple[str, list[PartitionResult]]] = []
    remaining = max_bytes
    total = 0
    failed = False
    for w in wanted:
        # KIP-74: the first partition with data returns at least one whole batch
        # even beyond the limits, so a consumer can always make progress.
        if w.topic in denied:
            result = PartitionResult(w.partition, ErrorCode.topic_authorization_failed.value)
        elif fenced and (w.topic, w.partition) in fenced:
            result = PartitionResult(w.partition, fenced[(w.topic, w.partition)])
        else:
            result = _read_partition(
                state, w, min(w.max_bytes, remaining), read_committed, total == 0, cluster, follower
            )
        size = result.size
        total += size
        remaining = max(0, remaining - size)
        failed = failed or result.error != 0
        if grouped and grouped[-1][0] == w.topic:
            grouped[-1][1].append(result)
        else:
            grouped.append((w.topic, [result]))
    return grouped, total, failed


def _read_partition(
    state: BrokerState,
    w: _Wanted,
    max_bytes: int,
    read_committed: bool,
    min_one_batch: bool,
    cluster: LeaderHook | None = None,
    follower: bool = False,
) -> PartitionResult:
    if cluster is not None and not follower and not cluster.is_leader(w.topic, w.partition):
        known = state.partition_registration(w.topic, w.partition) is not None
        code = ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
        return PartitionResult(w.partition, code.value)
    log = state.partition_log(w.topic, w.partition)
    if log is None:
        return PartitionResult(w.partition, ErrorCode.unknown_topic_or_partition.value)
    high_watermark = log.high_watermark
    lso = last_stable_offset(state, log, read_committed)
    result = PartitionResult(
        w.partition,
        0,
        high_watermark,
        lso,
        log.log_start_offset,
        [] if read_committed else None,
    )
    # Out of range only past the log end: between the HW and the log end there is just nothing yet.
    if not log.log_start_offset <= w.offset <= log.log_end_offset:
        result.error = ErrorCode.offset_out_of_range.value
        return result
    try:
        data = log.read(
            w.offset,
            max_bytes,
            # A follower copies the whole log; consumers see what is committed.
            max_offset=None if follower else lso if read_committed else high_watermark,
            min_one_batch=min_one_batch,
        )
    except LogError as exc:
        result.error = exc.code
        return result
    if data.length:
        # Small reads are copied now: a FileSlice keeps its segment's descriptor open until the
        # response is sent, and a Fetch of 10,000 small partitions would hold 10,000 of them.
        result.records = data if data.length >= ZERO_COPY_MIN_BYTES else data.read_bytes()
        if read_committed:
            producer_state = state.producer_states.for_log(log)
            result.aborted = producer_state.aborted_transactions(w.offset, lso, log.log_start_offset)
    return result


# -- encoding --------------------------------------------------------------------


def encode_fetch_response(
    version: int, error: ErrorCode, topics: list[tuple[str, list[PartitionResult]]], session_id: int = 0
) -> RawResponse:
    """The Fetch response body for ``version`` as bytes with each partition's file slice in place."""
    flexible = version >= FIRST_FLEXIBLE
    parts: list[bytes | FileSliceLike] = []
    buf = bytearray()
    buf += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        buf += _I16.pack(error.value) + _I32.pack(session_id)
    buf += _array_length(len(topics), flexible)
    for name, partitions in topics:
        buf += _string(name, flexible)
        buf += _array_length(len(partitions), flexible)
        for p in partitions:
            _partition_head(buf, p, version, flexible)
            if isinstance(p.records, bytes):
                buf += p.records
            else:
                parts.append(bytes(buf))
                parts.append(p.records)
                buf = bytearray()
            if flexible:
                buf += b"\0"  # partition tagged fields
        if flexible:
            buf += b"\0"  # topic tagged fields
    if flexible:
        buf += b"\0"  # response tagged fields
    parts.append(bytes(buf))
    return RawResponse(parts, flexible_header=flexible)


def _partition_head(buf: bytearray, p: PartitionResult, version: int, flexible: bool) -> None:
    """Everything of a partition before its record bytes, including the records' length."""
    buf += _PARTITION_FIXED.pack(p.index, p.error, p.high_watermark, p.last_stable_offset)
    if version >= 5:
        buf += _I64.pack(p.log_start_offset)
    if p.aborted is None:
        buf += b"\0" if flexible else _I32.pack(-1)
    else:
        buf += _array_length(len(p.aborted), flexible)
        for producer_id, first_offset in p.aborted:
            buf += _ABORTED.pack(producer_id, first_offset)
            if flexible:
                buf += b"\0"
    if version >= 11:
        buf += _I32.pack(-1)  # preferred_read_replica
    # Never null records: librdkafka rejects a null record set for an empty partition.
    buf += _uvarint(p.size + 1) if flexible else _I32.pack(p.size)


def _array_length(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode("utf-8")
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


HANDLERS = (ApiHandler(API_KEY, 4, 12, handle_fetch),)
