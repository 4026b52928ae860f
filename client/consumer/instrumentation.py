"""The consumer's metrics (Kafka's consumer-fetch-manager-metrics and consumer-coordinator-metrics).

Recorded once per Fetch response, per decoded piece of records (up to ~4,096
records: see ``partition_state.PIECE_RECORDS``), per commit, heartbeat and
rebalance; the per-record ``async for`` path records nothing.  Lag and lead
are computed when ``metrics()`` is read, from the positions the consumer keeps
anyway.  Names follow the Java client's FetchMetricsRegistry and
ConsumerCoordinator; per-topic ones are keyed ``name{topic=t}``, per-partition
ones ``name{topic=t,partition=p}``.

``records-consumed-rate`` and ``bytes-consumed-*`` count records when they are
decoded for the application, a piece at a time (Kafka counts them when poll()
returns them), so the rate may run a piece ahead; records decoded and then
dropped by a seek or a rebalance are taken off again.  ``records-consumed-total``
is exact: it leaves out the decoded records not handed out yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kafkakit.consumer.partition_state import Chunk, PartitionState, Record
from kafkakit.metrics import Metrics, Sensor, Total, WindowedCount, format_key
from kafkakit.records import BatchHeader

if TYPE_CHECKING:
    from kafkakit.consumer.fetcher import Fetcher
    from kafkakit.consumer.group import GroupCoordinator

__all__ = ["ConsumeHook", "FetchMetrics", "GroupMetrics", "attach", "run_consume_hooks"]

#: Called with the records getmany()/getone()/async for hand out (see Consumer.add_consume_hook).
ConsumeHook = Callable[[Sequence[Record]], None]

#: Bytes of a record batch's log entry before batch_length counts (base offset + length field).
_LOG_OVERHEAD = 12


class _TopicSensors:
    __slots__ = ("records", "bytes")

    def __init__(self, registry: Metrics, topic: str, unread: Callable[[str | None], int]) -> None:
        tags = {"topic": topic}
        self.records = _consumed_meter(registry, f"topic.{topic}.records", tags, lambda: unread(topic))
        self.bytes = registry.sensor(f"topic.{topic}.bytes-consumed")
        registry.meter(self.bytes, "bytes-consumed", tags)


class FetchMetrics:
    """Fetch and consumption sensors; the fetcher calls it per response and per decoded piece."""

    def __init__(self, registry: Metrics, fetcher: Fetcher, read_committed: bool) -> None:
        self._registry = registry
        self._fetcher = fetcher
        self._read_committed = read_committed
        self._topics: dict[str, _TopicSensors] = {}
        self._latency = registry.sensor("fetch-latency")
        registry.avg(self._latency, "fetch-latency-avg")
        registry.max(self._latency, "fetch-latency-max")
        registry.meter(self._latency, "fetch", count=True)
        self._size = registry.sensor("fetch-size")
        registry.avg(self._size, "fetch-size-avg")
        registry.max(self._size, "fetch-size-max")
        self._throttle = registry.sensor("fetch-throttle-time")
        registry.avg(self._throttle, "fetch-throttle-time-avg")
        registry.max(self._throttle, "fetch-throttle-time-max")
        self._records = _consumed_meter(registry, "records-consumed", None, lambda: self._unread(None))
        self._bytes = registry.sensor("bytes-consumed")
        registry.meter(self._bytes, "bytes-consumed")
        self._lag = registry.sensor("records-lag")
        registry.max(self._lag, "records-lag-max")
        self._lead = registry.sensor("records-lead")
        registry.min(self._lead, "records-lead-min")
        registry.family(self._partition_values)

    def _topic(self, topic: str) -> _TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = self._topics[topic] = _TopicSensors(self._registry, topic, self._unread)
        return sensors

    def _lag_of(self, state: PartitionState) -> int | None:
        end = state.last_stable_offset if self._read_committed else state.highwater
        if end is None or state.position is None:
            return None
        return max(end - state.position, 0)

    def fetch_response(self, states: Iterable[PartitionState], response: Any, sent_at: float) -> None:
        """One Fetch response (``states``: the partitions the request asked for)."""
        now = time.monotonic()
        self._latency.record((now - sent_at) * 1000.0, now)
        size = 0
        for topic in response.responses:
            for p in topic.partitions:
                data = p.records
                if data:
                    size += len(data)
        self._size.record(size, now)
        self._throttle.record(int(getattr(response, "throttle_time_ms", 0)), now)
        for state in states:
            lag = self._lag_of(state)
            if lag is not None:
                self._lag.record(lag, now)
            if state.position is not None and state.log_start_offset is not None:
                self._lead.record(state.position - state.log_start_offset, now)

    def decoded(self, topic: str, records: int, batches: Sequence[tuple[int, BatchHeader]]) -> None:
        """``records`` records were decoded for the application from ``batches``."""
        size = sum(header.batch_length for _, header in batches) + _LOG_OVERHEAD * len(batches)
        now = time.monotonic()
        self._records.record(records, now)
        self._bytes.record(size, now)
        sensors = self._topic(topic)
        sensors.records.record(records, now)
        sensors.bytes.record(size, now)

    def discarded(self, state: PartitionState) -> None:
        """``state``'s buffer is being dropped (seek, unassignment): un-count its unread records."""
        unread = sum(_unread(chunk) for chunk in state.chunks)
        if unread:
            now = time.monotonic()
            self._records.record(-unread, now)
            self._topic(state.tp.topic).records.record(-unread, now)

    def _unread(self, topic: str | None) -> int:
        """Records decoded (so counted) but not handed out yet, of ``topic`` or of all."""
        return sum(
            _unread(chunk)
            for state in self._fetcher.states()
            if topic is None or state.tp.topic == topic
            for chunk in state.chunks
        )

    def _partition_values(self) -> Iterable[tuple[str, float]]:
        for state in self._fetcher.states():
            tags = {"topic": state.tp.topic, "partition": state.tp.partition}
            lag = self._lag_of(state)
            if lag is not None:
                yield format_key("records-lag", tags), float(lag)
            if state.position is not None and state.log_start_offset is not None:
                yield format_key("records-lead", tags), float(state.position - state.log_start_offset)


def _consumed_meter(
    registry: Metrics, name: str, tags: Mapping[str, object] | None, unread: Callable[[], int]
) -> Sensor:
    """records-consumed-rate and -total; the total leaves out records decoded but not handed out yet."""
    sensor = registry.sensor(name)
    registry.rate(sensor, "records-consumed-rate", tags)
    total = Total()
    sensor.add(total)
    registry.gauge("records-consumed-total", lambda: total.total - unread(), tags)
    return sensor


def _unread(chunk: Chunk) -> int:
    return len(chunk.records) - chunk.index


class GroupMetrics:
    """Coordinator sensors: commits, heartbeats, joins, syncs and rebalances."""

    def __init__(self, registry: Metrics, assigned: Callable[[], int]) -> None:
        self._commit = registry.sensor("commit-latency")
        registry.avg(self._commit, "commit-latency-avg")
        registry.max(self._commit, "commit-latency-max")
        registry.meter(self._commit, "commit", count=True)
        self._join = self._timed(registry, "join")
        self._sync = self._timed(registry, "sync")
        self._heartbeat = registry.sensor("heartbeat-latency")
        registry.max(self._heartbeat, "heartbeat-response-time-max")
        registry.meter(self._heartbeat, "heartbeat", count=True)
        self._rebalance = registry.sensor("rebalance-latency")
        registry.avg(self._rebalance, "rebalance-latency-avg")
        registry.max(self._rebalance, "rebalance-latency-max")
        registry.total(self._rebalance, "rebalance-latency-total")
        per_second = WindowedCount(registry.window_s, registry.samples)
        self._rebalance.add(per_second)
        registry.gauge("rebalance-rate-per-hour", lambda: per_second.measure(time.monotonic()) * 3600.0)
        self.rebalances = 0
        self.last_rebalance_end: float | None = None
        self.last_heartbeat_sent: float | None = None
        registry.gauge("rebalance-total", lambda: float(self.rebalances))
        registry.gauge("last-rebalance-seconds-ago", lambda: _seconds_ago(self.last_rebalance_end))
        registry.gauge("last-heartbeat-seconds-ago", lambda: _seconds_ago(self.last_heartbeat_sent))
        registry.gauge("assigned-partitions", lambda: float(assigned()))

    @staticmethod
    def _timed(registry: Metrics, name: str) -> Sensor:
        sensor = registry.sensor(f"{name}-latency")
        registry.avg(sensor, f"{name}-time-avg")
        registry.max(sensor, f"{name}-time-max")
        registry.meter(sensor, name, count=True)
        return sensor

    def committed(self, started: float) -> None:
        now = time.monotonic()
        self._commit.record((now - started) * 1000.0, now)

    def joined(self, started: float) -> None:
        now = time.monotonic()
        self._join.record((now - started) * 1000.0, now)

    def synced(self, started: float) -> None:
        now = time.monotonic()
        self._sync.record((now - started) * 1000.0, now)

    def heartbeat_sent(self) -> float:
        self.last_heartbeat_sent = now = time.monotonic()
        return now

    def heartbeat_answered(self, sent_at: float) -> None:
        now = time.monotonic()
        self._heartbeat.record((now - sent_at) * 1000.0, now)

    def rebalanced(self, started: float) -> None:
        now = time.monotonic()
        self.rebalances += 1
        self.last_rebalance_end = now
        self._rebalance.record((now - started) * 1000.0, now)


def _seconds_ago(when: float | None) -> float:
    # Kafka reports -1 until the event first happens.
    return -1.0 if when is None else time.monotonic() - when


def run_consume_hooks(hooks: Sequence[ConsumeHook], batches: Iterable[Sequence[Record]]) -> None:
    """Give each non-empty list of records handed out to every hook."""
    for records in batches:
        if records:
            for hook in hooks:
                hook(records)


def attach(
    registry: Metrics, fetcher: Fetcher, group: GroupCoordinator | None, *, read_committed: bool
) -> None:
    """Give the fetcher (and the group coordinator, if any) their sensors in ``registry``."""
    fetcher.metrics = FetchMetrics(registry, fetcher, read_committed)
    if group is not None:
        group.metrics = GroupMetrics(registry, lambda: len(fetcher.assignment()))
