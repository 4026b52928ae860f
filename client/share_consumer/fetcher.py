"""ShareFetch (API key 78) with share sessions, and ShareAcknowledge (API key 79).

Each partition leader gets a share session per member: the first ShareFetch
(session epoch 0) names every partition this member reads there; later ones
(epoch 1, 2, ...) name only partitions added or carrying acknowledgements, and
``forgotten_topics_data`` for partitions no longer assigned. A session error
(SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH) starts a new one.

A ShareFetch answers with record batches and the *acquired* offset ranges with
their delivery counts: only records inside an acquired range belong to this
member (the batches may hold more). Acquired offsets without a record
(transaction markers, compacted records) are acknowledged as gaps.

Acknowledgements ride on the next ShareFetch to the partition's leader, or go in
a ShareAcknowledge of their own (``commit_sync`` / ``commit_async``). Closing sends
a final ShareAcknowledge (epoch -1), which ends the session and releases every
record still acquired by this member.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    for_code,
)
from kafkakit.net.connection import BrokerConnection
from kafkakit.protocol.framing import ApiKey
from kafkakit.records import decode_batches_in_ranges
from kafkakit.structs import TopicPartition

from .acknowledgements import GAP, AcknowledgementResult, Acknowledgements, ShareConsumerRecord, gaps
from .membership import not_supported

log = logging.getLogger(__name__)

Deserializer = Callable[[Any], Any]
FINAL_EPOCH = -1
_SESSION_ERRORS = {122, 123}  # SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH
#: Partition errors a metadata refresh fixes (unknown topic, leader moved, fenced epoch...).
_REFRESH_ERRORS = {3, 5, 6, 74, 75, 100, 103}
_RENEW_VERSION = 2


@dataclass(frozen=True, slots=True)
class ShareFetchConfig:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    request_timeout: float
    retry_backoff: float
    check_crcs: bool
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None


@dataclass(slots=True)
class _Session:
    """This member's share session with one broker."""

    epoch: int = 0
    partitions: set[TopicPartition] = field(default_factory=set)

    def next_epoch(self) -> int:
        epoch = self.epoch
        self.epoch = 1 if epoch == 0 else epoch + 1
        return epoch

    def reset(self) -> None:
        self.epoch = 0
        self.partitions.clear()


AckResults = dict[TopicPartition, AcknowledgementResult]


class ShareFetcher:
    """Fetches acquired records for one share-group member and sends its acknowledgements."""

    def __init__(
        self,
        cluster: Cluster,
        config: ShareFetchConfig,
        group_id: str,
        member_id: Callable[[], str],
        on_results: Callable[[AckResults], None],
    ) -> None:
        self._cluster = cluster
        self._config = config
        self._group_id = group_id
        self._member_id = member_id
        self._on_results = on_results
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._buffer: deque[tuple[TopicPartition, list[ShareConsumerRecord]]] = deque()
        self._pending: dict[TopicPartition, Acknowledgements] = {}
        self._sessions: dict[int, _Session] = {}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._node_locks: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._data = asyncio.Event()
        self.error: KafkaError | None = None
        self.closed = False

    # -- buffered records ----------------------------------------------------

    def buffered(self) -> int:
        return sum(len(records) for _, records in self._buffer)

    def drain(self, max_records: int | None) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """Buffered records by partition, up to ``max_records`` in all (None: every buffered one)."""
        out: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        budget = max_records if max_records is not None else -1
        while self._buffer and budget != 0:
            tp, records = self._buffer[0]
            if 0 <= budget < len(records):
                taken, self._buffer[0] = records[:budget], (tp, records[budget:])
            else:
                taken = records
                self._buffer.popleft()
            out.setdefault(tp, []).extend(taken)
            if budget > 0:
                budget -= len(taken)
        return out

    def raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    # -- acknowledgements ----------------------------------------------------

    def queue(self, acks: Mapping[TopicPartition, Acknowledgements]) -> None:
        """Acknowledgements to send with the next request to each partition's leader."""
        for tp, a in acks.items():
            if a:
                self._pending.setdefault(tp, Acknowledgements()).merge(a)

    def has_pending(self) -> bool:
        return any(self._pending.values())

    def _take_pending(
        self, node: int, only: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, Acknowledgements]:
        """The pending acknowledgements of partitions led by ``node`` (of ``only``, when given)."""
        taken = {}
        for tp in list(self._pending):
            if (only is None or tp in only) and self._cluster.metadata.leader_for(tp) == node:
                taken[tp] = self._pending.pop(tp)
        return taken

    # -- fetching --------------------------------------------------------------

    def _nodes(self) -> dict[int, list[TopicPartition]]:
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        missing = False
        for tp in sorted(self.assignment):
            leader = self._cluster.metadata.leader_for(tp)
            if leader is None:
                missing = True
                continue
            by_node[leader].append(tp)
        for tp in self._pending:
            leader = self._cluster.metadata.leader_for(tp)
            if leader is not None:
                by_node.setdefault(leader, [])
        if missing:
            self._cluster.request_metadata_update()
        return by_node

    async def fetch(self, timeout: float) -> None:
        """Start a ShareFetch to every leader without one in flight; wait until records (or an
        error) arrive, or ``timeout`` seconds."""
        if self._cluster.metadata_stale and self.assignment:
            try:
                await self._cluster.refresh_metadata({tp.topic for tp in self.assignment})
            except KafkaError as exc:
                log.debug("share fetch: metadata refresh failed: %s", exc)
        self._data.clear()
        for node, partitions in self._nodes().items():
            if node not in self._in_flight:
                task = asyncio.ensure_future(self._fetch_node(node, partitions))
                self._in_flight[node] = task
                task.add_done_callback(functools.partial(self._fetch_done, node))
        if not self._in_flight:
            await asyncio.sleep(min(timeout, self._config.retry_backoff))
            return
        try:
            async with asyncio.timeout(timeout):
                await self._data.wait()
        except TimeoutError:
            pass

    def _fetch_done(self, node: int, _task: asyncio.Task[None]) -> None:
        self._in_flight.pop(node, None)
        self._data.set()

    async def _fetch_node(self, node: int, partitions: list[TopicPartition]) -> None:
        try:
            async with self._node_locks[node]:
                await self._share_fetch(node, partitions)
        except asyncio.CancelledError:
            raise
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            log.info("share fetch from broker %s failed: %s", node, exc)
            self._cluster.request_metadata_update()
            await asyncio.sleep(self._config.retry_backoff)
        except KafkaError as exc:
            if exc.retriable:
                await asyncio.sleep(self._config.retry_backoff)
            else:
                self.error = exc
        except Exception as exc:
            log.exception("share fetch from broker %s failed", node)
            self.error = KafkaError(f"share fetch failed: {exc!r}")

    async def _connection(self, node: int) -> BrokerConnection:
        conn = await self._cluster.connection(node)
        if not conn.supports(ApiKey.SHARE_FETCH):
            raise not_supported(f"ShareFetch to broker {node}")
        return conn

    async def _share_fetch(self, node: int, partitions: list[TopicPartition]) -> None:
        config = self._config
        conn = await self._connection(node)
        session = self._sessions.setdefault(node, _Session())
        wanted = set(partitions)
        if session.epoch == 0 and not wanted:
            await asyncio.sleep(config.retry_backoff)  # acknowledgements only, and no session for them
            return
        # Acknowledgements ride along for the partitions this fetch reads; those of partitions no
        # longer assigned (records handed out before the assignment changed) go in a ShareAcknowledge
        # after it, so that they do not bring the partition back into the session.
        acks = self._take_pending(node, wanted) if session.epoch > 0 else {}
        renew = any(a.has_renew for a in acks.values())
        if renew and conn.version(ApiKey.SHARE_FETCH) < _RENEW_VERSION:
            self._report_unsent(acks, UnsupportedVersionError("RENEW needs ShareFetch v2 (Apache Kafka 4.2+)"))
            acks = {}
            renew = False
        if session.epoch == 0:
            listed = wanted
            forgotten: set[TopicPartition] = set()
        else:
            listed = (wanted - session.partitions) | set(acks)
            forgotten = session.partitions - wanted - set(acks)
        ids = self._topic_ids({tp.topic for tp in listed | forgotten})
        listed = {tp for tp in listed if tp.topic in ids}
        epoch = session.next_epoch()
        request = conn.request(
            ApiKey.SHARE_FETCH,
            group_id=self._group_id,
            member_id=self._member_id(),
            share_session_epoch=epoch,
            max_wait=config.max_wait_ms,
            min_bytes=config.min_bytes,
            max_bytes=config.max_bytes,
            max_records=config.max_records,
            batch_size=config.max_records,
            share_acquire_mode=0,
            is_renew_ack=renew,
            topics=_topics(listed, acks, ids),
            forgotten_topics_data=_forgotten(forgotten, ids),
        )
        try:
            response = await conn.send(request, timeout=config.request_timeout + config.max_wait_ms / 1000)
        except BaseException as exc:
            session.reset()
            self._report_unsent(acks, exc if isinstance(exc, KafkaError) else KafkaError(repr(exc)))
            raise
        code = int(response.error_code)
        if code:
            session.reset()
            error = for_code(code)(response.error_message or f"ShareFetch to broker {node}")
            self._report_unsent(acks, error)
            if code in _SESSION_ERRORS:
                log.info("share session with broker %s ended (error %s); opening a new one", node, code)
                return
            if code == 35:
                raise not_supported(f"ShareFetch to broker {node}")
            raise error
        session.partitions = (session.partitions | listed) - forgotten
        names = {topic_id: name for name, topic_id in ids.items()}
        results: AckResults = {}
        for topic in response.responses:
            name = names.get(topic.topic_id) or self._name_of(topic.topic_id)
            if name is None:
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, int(p.partition_index))
                if tp in acks:
                    ack_code = int(p.acknowledge_error_code)
                    ack_error: KafkaError | None = None
                    if ack_code:
                        ack_error = for_code(ack_code)(p.acknowledge_error_message or "")
                    results[tp] = AcknowledgementResult(tp, acks[tp].offsets(), ack_error)
                self._take_partition(tp, p)
        for tp, a in acks.items():
            results.setdefault(tp, AcknowledgementResult(tp, a.offsets(), None))
        if results:
            self._on_results(results)
        if session.epoch > 0 and any(
            tp not in wanted and self._cluster.metadata.leader_for(tp) == node for tp in self._pending
        ):
            await self._acknowledge_locked(node, final=False, excluding=wanted)

    def _take_partition(self, tp: TopicPartition, p: Any) -> None:
        code = int(p.error_code)
        if code:
            if code in _REFRESH_ERRORS or self._cluster.is_refresh_error(code):
                self._cluster.request_metadata_update()
                return
            error = for_code(code)
            if not error.retriable:
                self.error = error(p.error_message or f"share fetch of {tp.topic}-{tp.partition}")
                self._data.set()
            return
        acquired = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in p.acquired_records]
        if not acquired:
            return
        data = p.records
        records = []
        if data:
            decoded = decode_batches_in_ranges(
                data, tp.topic, tp.partition, [(first, last) for first, last, _ in acquired],
                check_crc=self._config.check_crcs,
            )  # fmt: skip
            records = _acquired_records(decoded, acquired)
        wanted = sum(last - first + 1 for first, last, _ in acquired)
        missing = []
        if len(records) != wanted:
            missing = gaps(((first, last) for first, last, _ in acquired), {r.offset for r in records})
        if missing:
            gap_acks = Acknowledgements()
            for offset in missing:
                gap_acks.add(offset, GAP)
            self.queue({tp: gap_acks})
        if records:
            records = self._deserialized(records)
            self._buffer.append((tp, records))
            self._data.set()

    def _deserialized(self, records: list[ShareConsumerRecord]) -> list[ShareConsumerRecord]:
        key_des, value_des = self._config.key_deserializer, self._config.value_deserializer
        if key_des is None and value_des is None:
            return records
        return [
            r._replace(
                key=r.key if key_des is None else key_des(r.key),
                value=r.value if value_des is None else value_des(r.value),
            )
            for r in records
        ]

    def _topic_ids(self, topics: Iterable[str]) -> dict[str, Any]:
        ids = {}
        for topic in topics:
            meta = self._cluster.metadata.topics.get(topic)
            if meta is not None and meta.topic_id:
                ids[topic] = meta.topic_id
        return ids

    def _name_of(self, topic_id: Any) -> str | None:
        for name, meta in self._cluster.metadata.topics.items():
            if meta.topic_id == topic_id:
                return name
        return None

    def _report_unsent(self, acks: Mapping[TopicPartition, Acknowledgements], error: BaseException) -> None:
        if not acks:
            return
        err = error if isinstance(error, KafkaError) else KafkaError(repr(error))
        self._on_results({tp: AcknowledgementResult(tp, a.offsets(), err) for tp, a in acks.items()})

    # -- ShareAcknowledge --------------------------------------------------------

    async def acknowledge(self, *, final: bool = False) -> AckResults:
        """Send every pending acknowledgement in ShareAcknowledge requests (one per leader) and
        wait for the answers; ``final`` also closes each share session (epoch -1)."""
        nodes = {n for tp in self._pending if (n := self._cluster.metadata.leader_for(tp)) is not None}
        if final:
            nodes |= {n for n, s in self._sessions.items() if s.epoch > 0}
        results: AckResults = {}
        answers = await asyncio.gather(*(self._acknowledge_node(n, final) for n in nodes), return_exceptions=True)
        for node, answer in zip(nodes, answers, strict=True):
            if isinstance(answer, BaseException):
                log.info("share acknowledge to broker %s failed: %r", node, answer)
                continue
            results.update(answer)
        return results

    async def _acknowledge_node(self, node: int, final: bool) -> AckResults:
        async with self._node_locks[node]:
            return await self._acknowledge_locked(node, final=final)

    async def _acknowledge_locked(
        self, node: int, *, final: bool, excluding: set[TopicPartition] | None = None
    ) -> AckResults:
        """One ShareAcknowledge to ``node`` (its lock held) with its pending acknowledgements (but
        those of the partitions in ``excluding``)."""
        session = self._sessions.setdefault(node, _Session())
        if session.epoch == 0:
            # No session: acknowledgements need one (they wait for the next ShareFetch).
            return {}
        only = None if excluding is None else {tp for tp in self._pending if tp not in excluding}
        acks = self._take_pending(node, only)
        if not acks and not final:
            return {}
        try:
            conn = await self._connection(node)
            renew = any(a.has_renew for a in acks.values())
            if renew and conn.version(ApiKey.SHARE_ACKNOWLEDGE) < _RENEW_VERSION:
                raise UnsupportedVersionError("RENEW needs ShareAcknowledge v2 (Apache Kafka 4.2+)")
            ids = self._topic_ids({tp.topic for tp in acks})
            epoch = FINAL_EPOCH if final else session.next_epoch()
            response = await conn.call(
                ApiKey.SHARE_ACKNOWLEDGE,
                group_id=self._group_id,
                member_id=self._member_id(),
                share_session_epoch=epoch,
                is_renew_ack=renew,
                topics=_topics(set(), acks, ids, key="acknowledgement_batches"),
            )
        except BaseException as exc:
            session.reset()
            self._report_unsent(acks, exc)
            raise
        if final:
            session.reset()
        code = int(response.error_code)
        if code:
            session.reset()
            error = for_code(code)(response.error_message or f"ShareAcknowledge to broker {node}")
            results = {tp: AcknowledgementResult(tp, a.offsets(), error) for tp, a in acks.items()}
            self._on_results(results)
            return results
        names = {topic_id: name for name, topic_id in ids.items()}
        results = {}
        for topic in response.responses:
            name = names.get(topic.topic_id)
            for p in topic.partitions:
                tp = TopicPartition(name or "", int(p.partition_index))
                if tp not in acks:
                    continue
                code = int(p.error_code)
                ack_error: KafkaError | None = for_code(code)(p.error_message or "") if code else None
                results[tp] = AcknowledgementResult(tp, acks[tp].offsets(), ack_error)
        for tp, a in acks.items():
            results.setdefault(tp, AcknowledgementResult(tp, a.offsets(), None))
        if results:
            self._on_results(results)
        return results

    async def close(self, timeout: float) -> None:
        """Send pending acknowledgements and close every share session (releasing what this member
        still holds); best effort within ``timeout``."""
        self.closed = True
        self._data.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # A ShareFetch in flight is answered (within its max wait) rather than cancelled: cancelled,
        # its session would be left open and what it acquired held until the locks time out.
        in_flight = set(self._in_flight.values())
        if in_flight:
            wait = min(timeout / 2, self._config.max_wait_ms / 1000 + 1.0)
            _done, pending = await asyncio.wait(in_flight, timeout=wait)
            for task in pending:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        try:
            async with asyncio.timeout(max(deadline - loop.time(), 0.1)):
                await self.acknowledge(final=True)
        except (KafkaError, TimeoutError) as exc:
            log.info("share consumer close: acknowledging failed: %s", exc)
        self._buffer.clear()


def _acquired_records(
    decoded: list[Any], acquired: list[tuple[int, int, int]]
) -> list[ShareConsumerRecord]:
    """The decoded records (in offset order, of the acquired ranges only) with their range's
    delivery count: find each range by bisection."""
    out: list[ShareConsumerRecord] = []
    of = ShareConsumerRecord.of
    for first, last, count in sorted(acquired):
        lo = bisect_left(decoded, first, key=_OFFSET)
        hi = bisect_right(decoded, last, lo=lo, key=_OFFSET)
        out.extend([of(record, count) for record in decoded[lo:hi]])
    return out


_OFFSET = operator.attrgetter("offset")


def _topics(
    listed: set[TopicPartition],
    acks: Mapping[TopicPartition, Acknowledgements],
    ids: Mapping[str, Any],
    *,
    key: str = "acknowledgement_batches",
) -> list[dict[str, Any]]:
    by_topic: dict[str, set[int]] = defaultdict(set)
    for tp in (*listed, *acks):
        if tp.topic in ids:
            by_topic[tp.topic].add(tp.partition)
    return [
        {
            "topic_id": ids[topic],
            "partitions": [
                {
                    "partition_index": p,
                    key: acks[TopicPartition(topic, p)].batches() if TopicPartition(topic, p) in acks else [],
                }
                for p in sorted(parts)
            ],
        }
        for topic, parts in sorted(by_topic.items())
    ]


def _forgotten(partitions: set[TopicPartition], ids: Mapping[str, Any]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        if tp.topic in ids:
            by_topic[tp.topic].append(tp.partition)
    return [{"topic_id": ids[t], "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]
