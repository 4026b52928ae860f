"""Reading one offset range on an executor: Fetch requests to the leader, Arrow batches out.

This is the source's ``read(partition)``.  It speaks Fetch itself (through
kafkakit's :class:`~kafkakit.cluster.Cluster`, i.e. its connections, version
negotiation and metadata) instead of going through ``Consumer.getmany``: a
task knows its exact range up front, and handing the raw response bytes to
the columnar decoder in :mod:`kafkakit.spark.arrow` avoids building a Python
record object per Kafka record, which is most of the consumer's cost.

The next Fetch is sent before the current response is decoded, so the
network and the broker work while this thread builds Arrow arrays (the
asyncio client runs on the worker's background loop, see
:mod:`kafkakit.spark.runtime`).

Gaps: offsets that no visible record carries (transaction markers, aborted
records under read_committed, compacted-away records) are skipped, and the
range's end may fall on such an offset; that is not data loss.  Data loss is
only a start below the log start offset (OFFSET_OUT_OF_RANGE), which fails the
task unless ``failOnDataLoss`` is false.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from kafkakit.cluster import Cluster
from kafkakit.consumer.offsets import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, list_offsets
from kafkakit.errors import KafkaError, KafkaTimeoutError, for_code
from kafkakit.net.security import SecurityConfig
from kafkakit.protocol.framing import ApiKey
from kafkakit.records import iter_batch_headers
from kafkakit.spark import runtime
from kafkakit.spark.arrow import select_batches, to_record_batch
from kafkakit.spark.security import SecurityOptions
from kafkakit.structs import TopicPartition

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1
# Errors fixed by a metadata refresh and a retry (leader moved, not ready yet, ...).
_RETRY_ERRORS = {3, 5, 6, 7, 13, 56, 74, 75, 76, 78}

#: Consumer settings (kafkakit keyword names) the reader uses; other accepted ones are ignored.
CONNECTION_SETTINGS = ("client_id", "request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms",
                       "connections_max_idle_ms")


class DataLossError(KafkaError):
    """Records of a planned range are gone (deleted by retention) and failOnDataLoss is true."""


@dataclass(frozen=True)
class FetchSettings:
    """What a read needs besides its range; part of every InputPartition (so picklable)."""

    bootstrap_servers: str
    isolation_level: str = "read_committed"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52428800
    max_partition_fetch_bytes: int = 8388608
    check_crcs: bool = True
    #: How long a task waits for records that should exist before it gives up (kafkaConsumer.pollTimeoutMs).
    poll_timeout_ms: int = 120000
    #: Connection settings as Cluster keyword arguments.
    connection: dict[str, Any] = field(default_factory=dict)
    #: TLS/SASL options as strings; the SSLContext is built in each worker.
    security: SecurityOptions = field(default_factory=SecurityOptions)

    @property
    def isolation(self) -> int:
        return READ_COMMITTED if self.isolation_level == "read_committed" else READ_UNCOMMITTED


# -- one Cluster per worker process and settings ------------------------------------------

_clusters: dict[tuple[int, str, tuple[tuple[str, Any], ...]], Cluster] = {}
_clusters_lock = threading.Lock()


async def _cluster_for(settings: FetchSettings) -> Cluster:
    """A started Cluster shared by every task this Python worker runs (workers are reused)."""
    key = (
        os.getpid(),
        settings.bootstrap_servers,
        tuple(sorted(settings.connection.items())) + tuple(sorted(settings.security.settings.items())),
    )
    with _clusters_lock:
        cluster = _clusters.get(key)
        if cluster is None:
            cluster = _clusters[key] = Cluster(
                settings.bootstrap_servers, security=SecurityConfig(**settings.security.client_kwargs()),
                **settings.connection,
            )  # fmt: skip
            fresh = True
        else:
            fresh = False
    if fresh:
        try:
            await cluster.start()
        except BaseException:
            with _clusters_lock:
                _clusters.pop(key, None)
            raise
    return cluster


# -- one Fetch ------------------------------------------------------------------------------


@dataclass
class _Response:
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[tuple[int, int]] | None = None
    records: bytes = b""


async def _fetch(
    settings: FetchSettings, tp: TopicPartition, offset: int, partition_max_bytes: int
) -> _Response:
    cluster = await _cluster_for(settings)
    conn = await cluster.leader_connection(tp)
    request = conn.request(
        ApiKey.FETCH,
        cluster_id=None,
        replica_id=-1,
        max_wait=settings.fetch_max_wait_ms,
        min_bytes=1,
        max_bytes=settings.fetch_max_bytes,
        isolation_level=settings.isolation,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": tp.topic,
                "partitions": [
                    {
                        "partition": tp.partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    timeout = cluster.request_timeout_ms / 1000 + settings.fetch_max_wait_ms / 1000
    response = await conn.send(request, timeout=timeout)
    if response.error_code:
        return _Response(int(response.error_code))
    for topic in response.responses:
        for p in topic.partitions:
            if int(p.partition_index) != tp.partition:
                continue
            code = int(p.error_code)
            if code:
                if code in _RETRY_ERRORS or Cluster.is_refresh_error(code):
                    cluster.request_metadata_update()
                return _Response(code)
            aborted = None
            if settings.isolation == READ_COMMITTED and p.aborted_transactions:
                aborted = sorted((int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions)
            data = p.records or b""
            return _Response(
                0,
                int(p.high_watermark),
                int(p.last_stable_offset),
                int(p.log_start_offset),
                aborted,
                data if type(data) is bytes else bytes(data),
            )
    return _Response(3)  # the broker did not answer for the partition: treat as unknown


async def _log_bounds(settings: FetchSettings, tp: TopicPartition) -> tuple[int, int]:
    """(log start offset, end offset) of ``tp`` (the end honours the isolation level)."""
    cluster = await _cluster_for(settings)
    timeout = cluster.request_timeout_ms / 1000
    first = await list_offsets(cluster, {tp: EARLIEST}, isolation_level=settings.isolation, timeout=timeout)
    last = await list_offsets(cluster, {tp: LATEST}, isolation_level=settings.isolation, timeout=timeout)
    return first[tp].offset, last[tp].offset


# -- the range reader -----------------------------------------------------------------------


class RangeReader:
    """Reads ``[start, end)`` of one partition as Arrow record batches."""

    def __init__(self, settings: FetchSettings, tp: TopicPartition, start: int, end: int) -> None:
        self.settings = settings
        self.tp = tp
        self.start = start
        self.end = end
        self._where = f"{tp.topic}-{tp.partition}"
        self._max_bytes = settings.max_partition_fetch_bytes

    def _submit(self, offset: int) -> Future[_Response]:
        coro = _fetch(self.settings, self.tp, offset, self._max_bytes)
        return asyncio.run_coroutine_threadsafe(coro, runtime.event_loop())

    def batches(self) -> Iterator[pa.RecordBatch]:
        settings = self.settings
        position = self.start
        if position >= self.end:
            return
        pending = self._submit(position)
        deadline = time.monotonic() + settings.poll_timeout_ms / 1000
        try:
            while position < self.end:
                try:
                    response = pending.result()
                except KafkaError as exc:
                    # A broker restart or leader move: retry until the poll timeout says otherwise.
                    if not exc.retriable or time.monotonic() > deadline:
                        raise
                    log.info("fetching %s at %s failed (%s); retrying", self._where, position, exc)
                    self._backoff()
                    pending = self._submit(position)
                    continue
                step = self._step(response, position)
                if isinstance(step, int):  # no records: retry at the returned offset
                    if step >= self.end:
                        return
                    if step != position:
                        deadline = time.monotonic() + settings.poll_timeout_ms / 1000
                    elif time.monotonic() > deadline:
                        raise KafkaTimeoutError(
                            f"no records of {self._where} at offset {position} within "
                            f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms} (range ends at {self.end}; "
                            f"high watermark {response.high_watermark}, last stable offset "
                            f"{response.last_stable_offset})"
                        )
                    position = step
                    pending = self._submit(position)
                    continue
                selected, next_offset = step
                if next_offset < self.end:
                    pending = self._submit(next_offset)  # on its way while this one is decoded
                if selected:
                    batch = to_record_batch(
                        response.records, selected, self.tp.topic, self.tp.partition,
                        position, self.end, settings.include_headers,
                    )
                    if batch.num_rows:
                        yield batch
                position = next_offset
                deadline = time.monotonic() + settings.poll_timeout_ms / 1000
        finally:
            pending.cancel()

    def _step(self, response: _Response, position: int) -> tuple[list[Any], int] | int:
        """The batches to decode and the next offset, or (no records) the offset to fetch next."""
        code = response.error_code
        if code == _OFFSET_OUT_OF_RANGE:
            return self._out_of_range(position)
        if code:
            error = for_code(code)
            if code not in _RETRY_ERRORS and not error.retriable:
                raise error(f"fetching {self._where} at offset {position}")
            self._backoff()
            return position
        data = response.records
        headers = list(iter_batch_headers(data)) if data else []
        if not headers:
            if data:  # only part of a batch fit: ask for more (at most fetch.max.bytes)
                self._max_bytes = min(self._max_bytes * 2, max(self.settings.fetch_max_bytes, self._max_bytes))
            return self._no_records(response, position)
        last = headers[-1][1]
        next_offset = last.base_offset + last.last_offset_delta + 1
        if next_offset <= position:
            return self._no_records(response, position)
        selected = select_batches(
            data, headers, response.aborted, position, self.end,
            check_crcs=self.settings.check_crcs, where=self._where,
        )
        return selected, next_offset

    def _no_records(self, response: _Response, position: int) -> int:
        """An empty answer: the range ends in a gap (skip it) or records are not visible yet (wait)."""
        visible = (
            response.last_stable_offset
            if self.settings.isolation == READ_COMMITTED and response.last_stable_offset >= 0
            else response.high_watermark
        )
        if 0 <= visible <= position:
            return position  # nothing visible at or past here yet: fetch again (the broker long-polls)
        # Offsets [position, visible) hold no records: removed by compaction, or markers only.
        return visible if visible >= 0 else position

    def _out_of_range(self, position: int) -> int:
        log_start, log_end = runtime.run(_log_bounds(self.settings, self.tp))
        if position < log_start:
            message = (
                f"records {position}..{min(log_start, self.end) - 1} of {self._where} were deleted before "
                f"they were read (log start offset {log_start})"
            )
            if self.settings.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip them")
            log.warning("%s; skipping them (failOnDataLoss=false)", message)
            return log_start
        if position >= log_end:
            message = (
                f"offset {position} of {self._where} is past the end of the log ({log_end}): the topic was "
                "deleted and recreated or the log truncated"
            )
            if self.settings.fail_on_data_loss:
                raise DataLossError(message + "; set failOnDataLoss=false to skip the range")
            log.warning("%s; skipping the rest of the range (failOnDataLoss=false)", message)
            return self.end
        self._backoff()
        return position  # in range again (a leader change): retry

    def _backoff(self) -> None:
        time.sleep(self.settings.connection.get("retry_backoff_ms", 100) / 1000)


def read_range(settings: FetchSettings, tp: TopicPartition, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """``read(partition)``: the visible records of ``tp`` in ``[start, end)`` as Arrow batches."""
    return RangeReader(settings, tp, start, end).batches()
