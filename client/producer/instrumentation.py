"""The producer's metrics (Kafka's producer-metrics and producer-topic-metrics) and send hooks.

Everything here is recorded once per Produce request, per batch retried or
failed: ``send()``'s per-record path records nothing.  Names follow the Java
client's SenderMetricsRegistry; tagged ones are keyed ``name{topic=...}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kafkakit.metrics import Metrics
from kafkakit.producer.accumulator import Accumulator, PartitionQueue, ProducerBatch
from kafkakit.producer.record_future import RecordFuture
from kafkakit.records import Compression
from kafkakit.structs import Header, RecordMetadata

if TYPE_CHECKING:
    from kafkakit.producer.sender import Sender

__all__ = ["ProducerMetrics", "SendDone", "SendHook", "hooked_send"]

#: Called when a hooked record is delivered (metadata) or fails (error).
SendDone = Callable[[RecordMetadata | None, BaseException | None], None]


class SendHook(Protocol):
    """Called by ``send()`` before a record is queued (see ``Producer.add_send_hook``).

    ``headers`` is the record's header list: a hook may append to it (e.g. a
    ``traceparent``).  It may return a callback, called once the record is
    acknowledged or has failed.
    """

    def __call__(
        self, topic: str, key: Any, value: Any, partition: int | None, headers: list[Header]
    ) -> SendDone | None: ...


class _TopicSensors:
    __slots__ = ("records", "bytes", "compression", "retries", "errors")

    def __init__(self, registry: Metrics, topic: str) -> None:
        tags = {"topic": topic}
        self.records = registry.sensor(f"topic.{topic}.records-per-batch")
        registry.meter(self.records, "record-send", tags)
        self.bytes = registry.sensor(f"topic.{topic}.bytes")
        registry.rate(self.bytes, "byte-rate", tags)
        registry.total(self.bytes, "byte-total", tags)
        self.compression = registry.sensor(f"topic.{topic}.compression-rate")
        registry.avg(self.compression, "compression-rate", tags)
        self.retries = registry.sensor(f"topic.{topic}.record-retries")
        registry.meter(self.retries, "record-retry", tags)
        self.errors = registry.sensor(f"topic.{topic}.record-errors")
        registry.meter(self.errors, "record-error", tags)


class ProducerMetrics:
    """The producer's sensors; the sender and accumulator call it per request and per failed batch."""

    def __init__(self, registry: Metrics, accumulator: Accumulator) -> None:
        self._registry = registry
        self._compressed = accumulator.compression != Compression.NONE
        self._topics: dict[str, _TopicSensors] = {}
        self._batch_size = registry.sensor("batch-size")
        registry.avg(self._batch_size, "batch-size-avg")
        registry.max(self._batch_size, "batch-size-max")
        self._compression = registry.sensor("compression-rate")
        registry.avg(self._compression, "compression-rate-avg")
        self._queue_time = registry.sensor("queue-time")
        registry.avg(self._queue_time, "record-queue-time-avg")
        registry.max(self._queue_time, "record-queue-time-max")
        self._records_per_request = registry.sensor("records-per-request")
        registry.avg(self._records_per_request, "records-per-request-avg")
        self._sent = registry.sensor("record-send")
        registry.meter(self._sent, "record-send")
        self._retries = registry.sensor("record-retries")
        registry.meter(self._retries, "record-retry")
        self._errors = registry.sensor("record-errors")
        registry.meter(self._errors, "record-error")
        acc = accumulator
        registry.gauge("buffer-total-bytes", lambda: float(acc.buffer_memory))
        registry.gauge("buffer-available-bytes", lambda: float(max(acc.buffer_memory - acc.buffered, 0)))
        registry.gauge("bufferpool-wait-time-ns-total", lambda: float(acc.wait_time_ns))
        registry.gauge("waiting-threads", lambda: float(len(acc.room_waiters)))

    def _topic(self, topic: str) -> _TopicSensors:
        sensors = self._topics.get(topic)
        if sensors is None:
            sensors = self._topics[topic] = _TopicSensors(self._registry, topic)
        return sensors

    def produce_request(
        self,
        groups: Sequence[tuple[PartitionQueue, list[ProducerBatch]]],
        payload: Sequence[bytes],
        now: float,
    ) -> None:
        """One Produce request: ``payload[i]`` is the record batch encoded for ``groups[i]``.

        ``now`` is time.monotonic(), the clock of ``ProducerBatch.created`` too.
        """
        total = 0
        for (pq, group), data in zip(groups, payload, strict=True):
            records = 0
            raw = 0
            for batch in group:
                records += batch.record_count
                raw += batch.size
                for follower in batch.followers or ():
                    records += follower.record_count
                    raw += follower.size
                self._queue_time.record((now - batch.created) * 1000.0, now)
            size = len(data)
            total += records
            self._batch_size.record(size, now)
            # Kafka's ratio is compressed / uncompressed bytes: 1.0 exactly without compression.
            ratio = size / raw if raw and self._compressed else 1.0
            self._compression.record(ratio, now)
            topic = self._topic(pq.tp.topic)
            topic.records.record(records, now)
            topic.bytes.record(size, now)
            topic.compression.record(ratio, now)
        self._sent.record(total, now)
        self._records_per_request.record(total, now)

    def batch_retried(self, batch: ProducerBatch) -> None:
        count = _records_of(batch)
        self._retries.record(count)
        self._topic(batch.tp.topic).retries.record(count)

    def batch_failed(self, batch: ProducerBatch) -> None:
        count = _records_of(batch)
        self._errors.record(count)
        self._topic(batch.tp.topic).errors.record(count)


def _records_of(batch: ProducerBatch) -> int:
    # record_count is set when a batch leaves its queue; a batch failed while queued may not have it.
    return batch.record_count or len(batch.values)


SendFunction = Callable[..., Awaitable[RecordFuture]]


async def hooked_send(
    hooks: Sequence[SendHook],
    send: SendFunction,
    topic: str,
    value: Any = None,
    key: Any = None,
    partition: int | None = None,
    timestamp_ms: int | None = None,
    headers: Sequence[Header] | None = None,
) -> RecordFuture:
    """``Producer.send`` with send hooks: the hooks see (and may add to) the headers first.

    Installed by ``Producer.add_send_hook`` in place of the plain ``send``, so a
    producer without hooks pays nothing for them.
    """
    header_list = list(headers) if headers else []
    done: list[SendDone] = []
    for hook in hooks:
        callback = hook(topic, key, value, partition, header_list)
        if callback is not None:
            done.append(callback)
    try:
        future = await send(topic, value, key, partition, timestamp_ms, header_list or None)
    except BaseException as exc:
        for callback in done:
            callback(None, exc)
        raise
    if done:
        future.add_done_callback(lambda f: _report(f, done))
    return future


def _report(future: RecordFuture, done: list[SendDone]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    metadata = None if error is not None else future.result()
    for callback in done:
        callback(metadata, error)


def attach(sender: Sender, accumulator: Accumulator, metrics: ProducerMetrics) -> None:
    """Wire ``metrics`` into the sender (requests, retries) and accumulator (failed batches)."""
    sender.metrics = metrics
    accumulator.on_fail = metrics.batch_failed
