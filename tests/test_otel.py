"""kafkakit.otel: metrics through an OTel Meter, and trace context across kafkakit, aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableSequence, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Producer as ConfluentProducer
from kafkakit import Consumer, Producer
from kafkakit.otel import extract_context, inject_headers, instrument_metrics, instrument_tracing
from kafkakit.structs import TopicPartition
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.brokers import RunningBroker


# The header carrier of opentelemetry-python-contrib's aiokafka/kafka-python/confluent-kafka
# instrumentations: a list of (str key, bytes value) pairs, values UTF-8 encoded.
class ContribStyleGetter(Getter[Sequence[tuple[str, bytes | None]]]):
    def get(self, carrier: Sequence[tuple[str, bytes | None]], key: str) -> list[str] | None:
        for name, value in carrier:
            if name == key and value is not None:
                return [value.decode()]
        return None

    def keys(self, carrier: Sequence[tuple[str, bytes | None]]) -> list[str]:
        return [name for name, _ in carrier]


class ContribStyleSetter(Setter[MutableSequence[tuple[str, bytes]]]):
    def set(self, carrier: MutableSequence[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode()))


@pytest.fixture
def tracing() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is kind]


async def _consume_traced(servers: str, topic: str, count: int, provider: TracerProvider) -> list[Any]:
    async with Consumer(bootstrap_servers=servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        instrument_tracing(consumer, tracer_provider=provider)
        records = []
        async for record in consumer:
            records.append(record)
            if len(records) == count:
                return records
    raise AssertionError("unreachable")


async def test_trace_context_round_trips_between_kafkakit_clients(
    broker: RunningBroker, topic: str, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = tracing
    async with Producer(bootstrap_servers=broker.bootstrap_servers, client_id="traced") as producer:
        instrument_tracing(producer, tracer_provider=provider)
        for i in range(3):
            await producer.send(topic, b"v%d" % i, key=b"k", partition=0)
        await producer.flush()
        await asyncio.sleep(0)
    sent = _spans(exporter, SpanKind.PRODUCER)
    assert [s.name for s in sent] == [f"{topic} publish"] * 3
    assert sent[0].attributes is not None
    assert sent[0].attributes["messaging.system"] == "kafka"
    assert sent[0].attributes["messaging.destination.name"] == topic
    assert sent[0].attributes["messaging.client.id"] == "traced"
    assert [s.attributes["messaging.kafka.offset"] for s in sent if s.attributes] == [0, 1, 2]

    records = await _consume_traced(broker.bootstrap_servers, topic, 3, provider)
    received = _spans(exporter, SpanKind.CONSUMER)
    assert [s.name for s in received] == [f"{topic} receive"] * 3
    for record, send_span, receive_span in zip(records, sent, received, strict=True):
        assert [name for name, _ in record.headers] == ["traceparent"]
        assert receive_span.parent is not None and send_span.context is not None
        assert receive_span.parent.span_id == send_span.context.span_id
        assert receive_span.context is not None
        assert receive_span.context.trace_id == send_span.context.trace_id
        extracted = trace.get_current_span(extract_context(record)).get_span_context()
        assert (extracted.trace_id, extracted.span_id) == (
            send_span.context.trace_id,
            send_span.context.span_id,
        )


async def test_kafkakit_headers_read_by_aiokafka_the_contrib_way(
    broker: RunningBroker, topic: str, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = tracing
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        instrument_tracing(producer, tracer_provider=provider)
        await (await producer.send(topic, b"to-aiokafka", partition=0))
    (send_span,) = _spans(exporter, SpanKind.PRODUCER)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    headers = list(record.headers)
    assert headers[0][0] == "traceparent" and isinstance(headers[0][1], bytes)
    extracted = trace.get_current_span(
        propagate.extract(headers, getter=ContribStyleGetter())
    ).get_span_context()
    assert send_span.context is not None
    assert (extracted.trace_id, extracted.span_id) == (send_span.context.trace_id, send_span.context.span_id)


async def test_aiokafka_and_confluent_headers_continue_in_kafkakit(
    broker: RunningBroker, topic: str, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = tracing
    tracer = provider.get_tracer("other-app")
    parents = []
    aio = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await aio.start()
    try:
        with tracer.start_as_current_span("aiokafka send", kind=SpanKind.PRODUCER) as span:
            headers: list[tuple[str, bytes]] = []
            propagate.inject(headers, setter=ContribStyleSetter())
            await aio.send_and_wait(topic, b"from-aiokafka", partition=0, headers=headers)
            parents.append(span.get_span_context())
    finally:
        await aio.stop()
    confluent = ConfluentProducer({"bootstrap.servers": broker.bootstrap_servers})
    with tracer.start_as_current_span("confluent send", kind=SpanKind.PRODUCER) as span:
        confluent_headers: list[tuple[str, bytes]] = []
        propagate.inject(confluent_headers, setter=ContribStyleSetter())
        confluent.produce(topic, b"from-confluent", partition=0, headers=list(confluent_headers))
        assert confluent.flush(30) == 0
        parents.append(span.get_span_context())

    await _consume_traced(broker.bootstrap_servers, topic, 2, provider)
    received = _spans(exporter, SpanKind.CONSUMER)
    assert [s.parent.span_id for s in received if s.parent] == [p.span_id for p in parents]
    assert [s.context.trace_id for s in received if s.context] == [p.trace_id for p in parents]


def test_inject_replaces_an_existing_traceparent(
    tracing: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = tracing
    headers = [("traceparent", b"00-00000000000000000000000000000001-0000000000000001-01"), ("x", b"y")]
    with provider.get_tracer("t").start_as_current_span("s") as span:
        inject_headers(headers)
    traceparents = [value for name, value in headers if name == "traceparent"]
    assert len(traceparents) == 1 and traceparents[0] is not None
    assert format(span.get_span_context().trace_id, "032x") in traceparents[0].decode()
    assert ("x", b"y") in headers


async def test_metrics_exported_through_a_meter(broker: RunningBroker, topic: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        async with Producer(bootstrap_servers=broker.bootstrap_servers, client_id="metered") as producer:
            handle = instrument_metrics(producer, meter_provider=provider)
            assert "kafka.producer.record_send_rate" in handle.instrument_names
            for i in range(40):
                await producer.send(topic, b"m%d" % i)
            await producer.flush()
            data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "kafkakit"
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    by_attributes = {
        tuple(sorted(p.attributes.items())): p.value for p in points["kafka.producer.record_send_total"]
    }
    # The client-level point (no topic attribute) and the per-topic one share the instrument.
    assert by_attributes == {
        (("client.id", "metered"),): 40,
        (("client.id", "metered"), ("topic", topic)): 40,
    }
    (per_topic,) = points["kafka.producer.byte_total"]
    assert dict(per_topic.attributes) == {"client.id": "metered", "topic": topic} and per_topic.value > 0
    (latency,) = points["kafka.producer.request_latency_avg"]
    assert latency.value > 0
