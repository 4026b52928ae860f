"""Client metrics: Kafka-named values that are real and move as records flow (both brokers)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
from collections.abc import Sequence
from typing import Any

import pytest
from kafkakit import Admin, Consumer, Producer
from kafkakit.errors import MessageSizeTooLargeError
from kafkakit.metrics import Avg, Max, Metrics, Rate, Total, WindowedCount, format_key, parse_key
from kafkakit.structs import ConsumerRecord, Header, NewTopic, RecordMetadata, TopicPartition

from tests.brokers import BrokerMinProcess, RunningBroker

# -- the stats, on a clock the test controls ------------------------------------------------


def test_rate_spans_at_least_one_full_window_then_the_live_samples() -> None:
    rate = Rate(window_s=30.0, samples=2)
    rate.record(300.0, now=0.0)
    assert rate.measure(now=1.0) == pytest.approx(10.0)  # 300 over Kafka's minimum (samples-1) windows
    rate.record(300.0, now=31.0)  # a second sample
    assert rate.measure(now=45.0) == pytest.approx(600 / 45)
    assert rate.measure(now=61.0) == pytest.approx(300 / 30)  # the first sample aged out
    assert rate.measure(now=200.0) == 0.0


def test_avg_max_count_and_total() -> None:
    avg, peak, count, total = Avg(), Max(), WindowedCount(), Total()
    assert math.isnan(avg.measure(0.0)) and math.isnan(peak.measure(0.0))  # nothing recorded: NaN, as Kafka
    for value, now in ((2.0, 0.0), (4.0, 1.0), (9.0, 2.0)):
        for stat in (avg, peak, count, total):
            stat.record(value, now)
    assert avg.measure(3.0) == pytest.approx(5.0)
    assert peak.measure(3.0) == 9.0
    assert count.measure(3.0) == pytest.approx(3 / 30)
    assert total.measure(1000.0) == 15.0  # cumulative: never ages out
    assert math.isnan(avg.measure(1000.0))


def test_keys_format_and_parse() -> None:
    key = format_key("records-lag", {"topic": "orders", "partition": 3})
    assert key == "records-lag{topic=orders,partition=3}"
    assert parse_key(key) == ("records-lag", {"topic": "orders", "partition": "3"})
    assert parse_key("record-send-rate") == ("record-send-rate", {})


def test_registry_snapshot_has_meters_gauges_and_families() -> None:
    registry = Metrics()
    sensor = registry.sensor("s")
    registry.meter(sensor, "record-send")
    registry.meter(sensor, "request", count=True)
    registry.gauge("buffer-total-bytes", lambda: 7.0)
    registry.family(lambda: [("records-lag{topic=t,partition=0}", 3.0)])
    sensor.record(10.0)
    sensor.record(5.0)
    values = registry.snapshot()
    assert values["record-send-total"] == 15.0 and values["request-total"] == 2.0
    assert values["record-send-rate"] > 0 and values["buffer-total-bytes"] == 7.0
    assert values["records-lag{topic=t,partition=0}"] == 3.0


# -- producer ---------------------------------------------------------------------------------


async def test_producer_metrics_count_what_was_sent(broker: RunningBroker, topic: str) -> None:
    count, size = 500, 100
    async with Producer(bootstrap_servers=broker.bootstrap_servers, client_id="metrics-p") as producer:
        before = producer.metrics()
        assert before["record-send-total"] == 0 and before["buffer-total-bytes"] == 33554432
        for i in range(count):
            await producer.send(topic, b"v" * size, key=str(i % 7).encode())
        await producer.flush()
        values = producer.metrics()
    assert values["record-send-total"] == count
    assert values[f"record-send-total{{topic={topic}}}"] == count
    assert values["record-send-rate"] > 0 and values[f"record-send-rate{{topic={topic}}}"] > 0
    assert values["record-error-total"] == 0 and values["record-retry-total"] == 0
    assert values["batch-size-avg"] > size and values["batch-size-max"] >= values["batch-size-avg"]
    assert 1 <= values["records-per-request-avg"] <= count
    assert values["compression-rate-avg"] == 1.0  # no compression
    assert (
        values["request-latency-avg"] > 0 and values["request-latency-max"] >= values["request-latency-avg"]
    )
    assert values["request-total"] >= 2  # metadata, then at least one Produce
    assert values["outgoing-byte-total"] > count * size and values["incoming-byte-total"] > 0
    assert values[f"byte-total{{topic={topic}}}"] > count * size
    assert values["buffer-available-bytes"] == values["buffer-total-bytes"]  # all delivered
    assert values["connection-count"] >= 1 and values["connection-creation-total"] >= 1
    assert values["network-io-total"] == values["request-total"] + values["response-total"]


async def test_compression_rate_below_one_for_compressible_records(broker: RunningBroker, topic: str) -> None:
    async with Producer(bootstrap_servers=broker.bootstrap_servers, compression_type="gzip") as producer:
        for _ in range(200):
            await producer.send(topic, b"a" * 200)
        await producer.flush()
        values = producer.metrics()
    assert 0 < values["compression-rate-avg"] < 0.5
    assert values[f"compression-rate{{topic={topic}}}"] == values["compression-rate-avg"]


async def test_record_errors_are_counted_per_topic(broker: RunningBroker, topic: str) -> None:
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "3000"})])
        admin_values = admin.metrics()
    assert admin_values["request-total"] >= 2 and admin_values["request-latency-avg"] > 0
    assert admin_values["connection-creation-total"] >= 1 and admin_values["outgoing-byte-total"] > 0
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        failed = await producer.send(topic, b"x" * 5000)
        with pytest.raises(MessageSizeTooLargeError):
            await failed
        await (await producer.send(topic, b"small"))
        values = producer.metrics()
    assert values["record-error-total"] == 1 and values[f"record-error-total{{topic={topic}}}"] == 1
    assert values["record-send-total"] == 2


async def test_retries_are_counted(broker_min_process: BrokerMinProcess, topic: str) -> None:
    """A broker that stops answering for longer than request_timeout_ms makes the producer retry."""
    servers = broker_min_process.bootstrap_servers
    async with Producer(bootstrap_servers=servers, request_timeout_ms=600, retry_backoff_ms=50) as producer:
        await producer.send_and_wait(topic, b"first")
        pid = broker_min_process.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            pending = await producer.send(topic, b"second")
            await asyncio.sleep(1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        metadata = await asyncio.wait_for(pending, 30)
        values = producer.metrics()
    assert metadata.offset >= 1
    assert values["record-retry-total"] >= 1 and values[f"record-retry-total{{topic={topic}}}"] >= 1
    assert values["record-error-total"] == 0
    assert values["connection-close-total"] >= 1  # the timed-out connection was dropped


def test_metrics_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKAKIT_METRICS", "off")
    assert Producer().metrics() == {}
    assert Consumer().metrics() == {}
    assert Admin().metrics() == {}


# -- consumer ---------------------------------------------------------------------------------


async def _produce(servers: str, topic: str, count: int, partition: int = 0) -> None:
    async with Producer(bootstrap_servers=servers) as producer:
        result = await producer.send_batch(topic, [b"r%d" % i for i in range(count)], partition=partition)
        await result


async def test_lag_lead_and_consumed_after_reading_part(broker: RunningBroker, topic: str) -> None:
    produced, read = 300, 120
    await _produce(broker.bootstrap_servers, topic, produced)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = 0
        while got < read:
            batch = await consumer.getmany(timeout_ms=5000, max_records=read - got)
            got += sum(len(records) for records in batch.values())
        values = consumer.metrics()
    tags = f"{{topic={topic},partition=0}}"
    assert values[f"records-lag{tags}"] == produced - read
    assert values[f"records-lead{tags}"] == read
    assert values["records-consumed-total"] == read  # exact, though a whole piece was decoded
    assert values[f"records-consumed-total{{topic={topic}}}"] == read
    assert values["records-lag-max"] >= produced - read
    assert values["bytes-consumed-total"] > 0 and values["bytes-consumed-rate"] > 0
    assert values["fetch-total"] >= 1 and values["fetch-latency-avg"] >= 0
    assert values["fetch-size-max"] > 0
    assert "commit-total" not in values  # no group: no coordinator metrics


async def test_group_metrics_after_join_commit_and_heartbeats(broker: RunningBroker, topic: str) -> None:
    await _produce(broker.bootstrap_servers, topic, 50)
    consumer = Consumer(
        topic,
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
    )
    async with consumer:
        assert consumer.metrics()["last-rebalance-seconds-ago"] == -1  # not joined yet
        seen = 0
        async for _ in consumer:
            seen += 1
            if seen == 50:
                break
        await consumer.commit()
        await asyncio.sleep(0.5)
        values = consumer.metrics()
    assert values["rebalance-total"] == 1 and values["join-total"] >= 1 and values["sync-total"] >= 1
    assert values["rebalance-latency-avg"] > 0 and values["rebalance-latency-total"] > 0
    assert values["rebalance-rate-per-hour"] > 0
    assert 0 <= values["last-rebalance-seconds-ago"] < 60
    assert values["assigned-partitions"] == 1
    assert values["commit-total"] == 1 and values["commit-latency-avg"] > 0
    assert values["heartbeat-total"] >= 1 and 0 <= values["last-heartbeat-seconds-ago"] < 5
    assert values["records-consumed-total"] == 50 and values[f"records-lag{{topic={topic},partition=0}}"] == 0


# -- hooks ------------------------------------------------------------------------------------


async def test_send_and_consume_hooks(broker: RunningBroker, topic: str) -> None:
    outcomes: list[tuple[RecordMetadata | None, BaseException | None]] = []

    def stamp(topic_: str, key: Any, value: Any, partition: int | None, headers: list[Header]) -> Any:
        headers.append(("stamped", value))
        return lambda metadata, error: outcomes.append((metadata, error))

    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        producer.add_send_hook(stamp)
        producer.add_send_hook(lambda t, k, v, p, headers: headers.append(("second", b"2")))
        for i in range(5):
            await producer.send(topic, b"v%d" % i, headers=[("h", b"1")])
        await producer.flush()
        await asyncio.sleep(0)
    assert [m.offset for m, e in outcomes if m is not None] == [0, 1, 2, 3, 4]

    seen: list[Sequence[ConsumerRecord[Any, Any]]] = []
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.add_consume_hook(seen.append)
        records = []
        async for record in consumer:
            records.append(record)
            if len(records) == 5:
                break
    assert [list(r.headers) for r in records] == [
        [("h", b"1"), ("stamped", b"v%d" % i), ("second", b"2")] for i in range(5)
    ]
    assert [r.offset for batch in seen for r in batch] == [0, 1, 2, 3, 4]  # each record once
