"""Reading a known offset range of one partition: ``Consumer.fetch_range``.

For readers that know their range up front (batch jobs, the Spark source):
Fetch requests go straight to the partition's leader, independent of the
consumer's assignment, positions and prefetching, and each response is handed
out as a :class:`FetchedRange` whose records can be decoded as objects or as
numpy columns. The next Fetch is sent before a response is handed out, so the
network and the broker work while the caller decodes.

Offsets that no visible record carries (transaction markers, aborted records
under read_committed, compacted-away records) are skipped, and the range's end
may fall on such an offset. A start below the log start offset raises
:class:`~kafkakit.errors.OffsetOutOfRangeError`: the caller decides whether that
is data loss.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    KafkaError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    for_code,
)
from kafkakit.protocol.build import make_request
from kafkakit.protocol.framing import ApiKey
from kafkakit.records import (
    BatchHeader,
    RecordColumns,
    decode_batch_list,
    decode_record_columns,
    iter_batch_headers,
    visible_batches,
)
from kafkakit.structs import ConsumerRecord, TopicPartition

from .fetch_session import fetch_topics, fetch_version, topic_ids
from .offsets import READ_COMMITTED

log = logging.getLogger(__name__)

__all__ = ["FetchedRange", "RangeSettings", "read_range"]

_OFFSET_OUT_OF_RANGE = 1


@dataclass(frozen=True)
class RangeSettings:
    """How a range is fetched (taken from the consumer's settings)."""

    isolation_level: int
    max_wait_ms: int
    max_bytes: int
    partition_max_bytes: int
    check_crcs: bool
    request_timeout: float
    retry_backoff: float


@dataclass(frozen=True)
class FetchedRange:
    """One Fetch response's visible records of a range: ``[start, next_offset)`` capped at the range's end.

    ``batches`` are the data batches a reader may see (read_committed
    filtering applied, CRCs checked when the consumer checks them); decode them
    with :meth:`records` or :meth:`columns`.
    """

    topic_partition: TopicPartition
    data: bytes
    batches: list[tuple[int, BatchHeader]]
    start: int
    end: int
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int

    def records(self) -> list[ConsumerRecord[bytes | None, bytes | None]]:
        """The records as :class:`~kafkakit.ConsumerRecord` objects."""
        tp = self.topic_partition
        records = decode_batch_list(self.data, self.batches, tp.topic, tp.partition, check_crc=False, min_offset=self.start)
        return [r for r in records if r.offset < self.end] if records and records[-1].offset >= self.end else records

    def columns(self) -> RecordColumns:
        """The records as numpy columns (no Python object per record)."""
        return decode_record_columns(self.data, self.batches).between(self.start, self.end)


@dataclass
class _Response:
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    records: bytes = b""


async def read_range(
    cluster: Cluster, settings: RangeSettings, tp: TopicPartition, start: int, end: int, wait_timeout: float
) -> AsyncIterator[FetchedRange]:
    """The visible records of ``tp`` in ``[start, end)``, a Fetch response at a time (see the module doc).

    Raises OffsetOutOfRangeError when ``start`` (or a later position) is outside
    the log, KafkaTimeoutError when no progress is possible for ``wait_timeout``
    seconds (records that should exist are not visible, or the leader stays
    unreachable), and the typed error of a refused fetch.
    """
    reader = _RangeReader(cluster, settings, tp, end, wait_timeout)
    position = start
    if position >= end:
        return
    pending = reader.submit(position)
    try:
        while position < end:
            try:
                response = await pending
            except KafkaError as exc:  # a broker restart or a leader move: retry until the deadline
                if not exc.retriable:
                    raise
                reader.check_deadline(position, exc)
                log.info("fetching %s at %s failed (%s); retrying", reader.where, position, exc)
                await asyncio.sleep(settings.retry_backoff)
                pending = reader.submit(position)
                continue
            step = reader.step(response, position)
            if isinstance(step, int):  # nothing visible here: move past a gap, or wait for records
                if step >= end:
                    return
                if step == position:
                    reader.check_deadline(position, None, response)
                    if response.error_code:
                        await asyncio.sleep(settings.retry_backoff)
                else:
                    reader.progressed()
                position = step
                pending = reader.submit(position)
                continue
            batches, next_offset = step
            if next_offset < end:
                pending = reader.submit(next_offset)  # on its way while the caller decodes this one
            reader.progressed()
            if batches:
                yield FetchedRange(
                    tp, response.records, batches, position, end, min(next_offset, end),
                    response.high_watermark, response.last_stable_offset, response.log_start_offset,
                )  # fmt: skip
            position = next_offset
    finally:
        pending.cancel()


class _RangeReader:
    """The state of one range read: fetch size, deadline, and what one response means."""

    def __init__(self, cluster: Cluster, settings: RangeSettings, tp: TopicPartition, end: int, wait_timeout: float) -> None:
        self.cluster = cluster
        self.settings = settings
        self.tp = tp
        self.end = end
        self.where = f"{tp.topic}-{tp.partition}"
        self.wait_timeout = wait_timeout
        self.max_bytes = settings.partition_max_bytes
        self.deadline = time.monotonic() + wait_timeout

    def submit(self, offset: int) -> asyncio.Task[_Response]:
        task = asyncio.ensure_future(self._fetch(offset))
        task.add_done_callback(_retrieve)  # a pipelined fetch the caller stopped waiting for must not warn
        return task

    def progressed(self) -> None:
        self.deadline = time.monotonic() + self.wait_timeout

    def check_deadline(self, position: int, error: BaseException | None, response: _Response | None = None) -> None:
        if time.monotonic() <= self.deadline:
            return
        detail = f"last error: {error}" if error is not None else ""
        if response is not None and not response.error_code:
            detail = f"high watermark {response.high_watermark}, last stable offset {response.last_stable_offset}"
        elif response is not None:
            detail = f"last error: {for_code(response.error_code).__name__}"
        raise KafkaTimeoutError(
            f"no records of {self.where} at offset {position} within {self.wait_timeout:.0f}s "
            f"(range ends at {self.end}; {detail})"
        ) from error

    async def _fetch(self, offset: int) -> _Response:
        settings = self.settings
        conn = await self.cluster.leader_connection(self.tp)
        ids = topic_ids(self.cluster.metadata, [self.tp.topic])
        request = make_request(
            ApiKey.FETCH,
            fetch_version(conn.version(ApiKey.FETCH), ids),
            cluster_id=None,
            replica_id=-1,
            replica_state={"replica_id": -1, "replica_epoch": -1},
            max_wait=settings.max_wait_ms,
            min_bytes=1,
            max_bytes=settings.max_bytes,
            isolation_level=settings.isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=fetch_topics([(self.tp, offset, self.max_bytes, -1)], ids),
            forgotten_topics_data=[],
            rack_id="",
        )
        response = await conn.send(request, timeout=settings.request_timeout + settings.max_wait_ms / 1000)
        if response.error_code:
            return _Response(int(response.error_code))
        return self._partition_response(response)

    def _partition_response(self, response: Any) -> _Response:
        for topic in response.responses:
            for p in topic.partitions:
                if int(p.partition_index) != self.tp.partition:
                    continue
                code = int(p.error_code)
                if code:
                    if Cluster.is_refresh_error(code):
                        self.cluster.request_metadata_update()
                    return _Response(code)
                aborted = None
                if self.settings.isolation_level == READ_COMMITTED and p.aborted_transactions:
                    aborted = [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions]
                data = p.records or b""
                return _Response(
                    0, int(p.high_watermark), int(p.last_stable_offset), int(p.log_start_offset), aborted,
                    data if type(data) is bytes else bytes(data),
                )  # fmt: skip
        self.cluster.request_metadata_update()
        return _Response(3)  # the broker did not answer for the partition: treat it as unknown

    def step(self, response: _Response, position: int) -> tuple[list[tuple[int, BatchHeader]], int] | int:
        """The visible batches and the next offset, or (nothing visible) the offset to fetch next."""
        code = response.error_code
        if code == _OFFSET_OUT_OF_RANGE:
            raise OffsetOutOfRangeError(f"offset {position} of {self.where} is outside the log")
        if code:
            error = for_code(code)
            if not (error.retriable or Cluster.is_refresh_error(code)):
                raise error(f"fetching {self.where} at offset {position}")
            return position
        data = response.records
        headers = list(iter_batch_headers(data)) if data else []
        if not headers:
            if data:  # only part of a batch fit: ask for more, up to fetch_max_bytes
                self._grow(len(data), position)
            return self._no_records(response, position)
        self.max_bytes = self.settings.partition_max_bytes
        last = headers[-1][1]
        next_offset = last.base_offset + last.last_offset_delta + 1
        if next_offset <= position:
            return self._no_records(response, position)
        batches = visible_batches(
            data, headers, response.aborted, position, self.end,
            check_crcs=self.settings.check_crcs, where=self.where,
        )  # fmt: skip
        return batches, next_offset

    def _grow(self, received: int, position: int) -> None:
        limit = self.settings.max_bytes
        if self.max_bytes >= limit:
            raise RecordTooLargeError(
                f"a record batch of {self.where} at offset {position} is larger than fetch_max_bytes={limit}"
            )
        self.max_bytes = min(max(self.max_bytes, received) * 2, limit)

    def _no_records(self, response: _Response, position: int) -> int:
        """An empty answer: the range goes on past a gap (skip it) or records are not visible yet (wait)."""
        visible = (
            response.last_stable_offset
            if self.settings.isolation_level == READ_COMMITTED and response.last_stable_offset >= 0
            else response.high_watermark
        )
        if 0 <= visible <= position:
            return position  # nothing visible at or past here yet: fetch again (the broker long-polls)
        # Offsets [position, visible) hold no records: removed by compaction, or markers only.
        return visible if visible >= 0 else position


def _retrieve(task: asyncio.Task[_Response]) -> None:
    if not task.cancelled():
        task.exception()
