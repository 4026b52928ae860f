"""OpenTelemetry bridge: client metrics through a Meter, and tracing through record headers.

Needs the ``otel`` extra (``pip install kafkakit[otel]``, i.e. opentelemetry-api);
nothing else in kafkakit imports OpenTelemetry.  An SDK (or none: the API's
no-op providers) is the application's choice.

Metrics::

    from kafkakit.otel import instrument_metrics
    instrument_metrics(producer)            # the global MeterProvider, or meter_provider=...

exports each of ``client.metrics()`` as an observable instrument named
``kafka.<producer|consumer|admin>.<name with "_" for "-">`` (the form of
OpenTelemetry's Java Kafka metrics bridge): ``*-total`` metrics as observable
counters, the rest as observable gauges; tags (``topic``, ``partition``) become
attributes, plus ``client.id`` where the client has one.

Tracing::

    from kafkakit.otel import instrument_tracing
    instrument_tracing(producer)            # a PRODUCER span "<topic> publish" per send()
    instrument_tracing(consumer)            # a CONSUMER span "<topic> receive" per record handed out

The producer injects the span's W3C trace context into the record's headers
(``traceparent``, ``tracestate``: the same headers, with str keys and UTF-8
bytes values, that opentelemetry-python-contrib's kafka-python, aiokafka and
confluent-kafka instrumentations and the Java agent use), so traces continue
across kafkakit and applications using those.  The consumer's span is a child
of the context extracted from the record (a zero-length "receive" span, as the
aiokafka instrumentation makes); :func:`extract_context` gives the same context
to start a "process" span of your own.  Both use the globally configured
propagator (W3C trace context and baggage by default).

Spans follow the messaging semantic conventions: ``messaging.system=kafka``,
``messaging.destination.name``, ``messaging.operation.type`` (``send`` /
``receive``), ``messaging.operation.name``, ``messaging.destination.partition.id``,
``messaging.kafka.offset``, ``messaging.kafka.message.key`` (when UTF-8),
``messaging.consumer.group.name``, ``messaging.client.id``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from kafkakit import __version__
from kafkakit.metrics import parse_key
from kafkakit.structs import ConsumerRecord, Header, RecordMetadata
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

__all__ = [
    "HEADER_GETTER",
    "HEADER_SETTER",
    "MetricsInstrumentation",
    "extract_context",
    "inject_headers",
    "instrument_metrics",
    "instrument_tracing",
]

_SCOPE = "kafkakit"
#: Names that appear only with tags (so may be missing from the first snapshot).
_TAGGED_ONLY = {
    "producer": ("byte-rate", "byte-total", "compression-rate"),
    "consumer": ("records-lag", "records-lead"),
    "admin": (),
}
#: How long one metrics() snapshot serves the instruments of one collection.
_SNAPSHOT_TTL_S = 0.5


class _HeaderGetter(Getter[Sequence[Header]]):
    """Reads W3C trace context from Kafka headers: (str key, bytes value) pairs."""

    def get(self, carrier: Sequence[Header], key: str) -> list[str] | None:
        for name, value in carrier:
            if name == key and value is not None:
                return [value.decode("utf-8", "replace")]
        return None

    def keys(self, carrier: Sequence[Header]) -> list[str]:
        return [name for name, _ in carrier]


class _HeaderSetter(Setter[list[Header]]):
    """Writes trace context as (key, UTF-8 bytes) headers, replacing any of the same key."""

    def set(self, carrier: list[Header], key: str, value: str) -> None:
        carrier[:] = [h for h in carrier if h[0] != key]
        carrier.append((key, value.encode("utf-8")))


HEADER_GETTER = _HeaderGetter()
HEADER_SETTER = _HeaderSetter()


def inject_headers(headers: list[Header], context: otel_context.Context | None = None) -> list[Header]:
    """Add the (current, or ``context``'s) trace context to ``headers`` and return them."""
    propagate.inject(headers, context=context, setter=HEADER_SETTER)
    return headers


def extract_context(record: ConsumerRecord[Any, Any]) -> otel_context.Context:
    """The trace context a producer put in ``record``'s headers (to parent a "process" span)."""
    return propagate.extract(list(record.headers or ()), getter=HEADER_GETTER)


def _kind(client: object) -> str:
    name = type(client).__name__.lower()
    for kind in ("producer", "consumer", "admin"):
        if kind in name:
            return kind
    raise TypeError(f"expected a kafkakit Producer, Consumer or Admin, not {type(client).__name__}")


class MetricsInstrumentation:
    """The instruments exporting one client's metrics; ``stop()`` ends their observations."""

    def __init__(self, client: Any, meter_provider: MeterProvider | None) -> None:
        self._client = client
        self._kind = _kind(client)
        self._stopped = False
        self._cached: tuple[float, dict[str, float]] = (-1.0, {})
        client_id = getattr(client, "client_id", None)
        self._base: dict[str, str] = {"client.id": client_id} if isinstance(client_id, str) else {}
        provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        meter = provider.get_meter(_SCOPE, __version__)
        names = {parse_key(key)[0] for key in client.metrics()}
        names.update(_TAGGED_ONLY[self._kind])
        self.instrument_names: list[str] = []
        for name in sorted(names):
            otel_name = f"kafka.{self._kind}.{name.replace('-', '_')}"
            callback = self._callback(name)
            if name.endswith("-total"):
                meter.create_observable_counter(otel_name, callbacks=[callback])
            else:
                meter.create_observable_gauge(otel_name, callbacks=[callback])
            self.instrument_names.append(otel_name)

    def stop(self) -> None:
        """Observe nothing more (OpenTelemetry has no way to remove an instrument)."""
        self._stopped = True

    def _snapshot(self) -> dict[str, float]:
        now = time.monotonic()
        taken, values = self._cached
        if now - taken > _SNAPSHOT_TTL_S:
            values = self._client.metrics()
            self._cached = (now, values)
        return values

    def _callback(self, wanted: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._stopped:
                return []
            out = []
            for key, value in self._snapshot().items():
                name, tags = parse_key(key)
                if name == wanted and value == value:  # NaN: nothing recorded in the window
                    out.append(Observation(value, {**self._base, **tags}))
            return out

        return observe


def instrument_metrics(client: Any, meter_provider: MeterProvider | None = None) -> MetricsInstrumentation:
    """Export ``client.metrics()`` (a Producer, Consumer or Admin) through an OpenTelemetry Meter."""
    return MetricsInstrumentation(client, meter_provider)


def instrument_tracing(client: Any, tracer_provider: TracerProvider | None = None) -> None:
    """Trace ``client``'s sends (a Producer) or the records it hands out (a Consumer)."""
    tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
    kind = _kind(client)
    if kind == "producer":
        client.add_send_hook(_SendTracer(tracer, getattr(client, "client_id", None)))
    elif kind == "consumer":
        try:
            group: str | None = client.group_metadata().group_id
        except Exception:  # noqa: BLE001 - a consumer without a group
            group = None
        client.add_consume_hook(_ConsumeTracer(tracer, group))
    else:
        raise TypeError("only a Producer or a Consumer can be traced")


def _key_text(key: Any) -> str | None:
    if isinstance(key, bytes):
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None if key is None else str(key)


class _SendTracer:
    """A send hook: a PRODUCER span per record, its context injected into the record's headers."""

    def __init__(self, tracer: trace.Tracer, client_id: str | None) -> None:
        self._tracer = tracer
        self._client_id = client_id

    def __call__(self, topic: str, key: Any, value: Any, partition: int | None, headers: list[Header]) -> Any:
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.destination.name": topic,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if self._client_id is not None:
            attributes["messaging.client.id"] = self._client_id
        if partition is not None:
            attributes["messaging.destination.partition.id"] = str(partition)
        key_text = _key_text(key)
        if key_text is not None:
            attributes["messaging.kafka.message.key"] = key_text
        span = self._tracer.start_span(f"{topic} publish", kind=SpanKind.PRODUCER, attributes=attributes)
        inject_headers(headers, trace.set_span_in_context(span))

        def done(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            if metadata is not None:
                span.set_attribute("messaging.destination.partition.id", str(metadata.partition))
                if metadata.offset >= 0:
                    span.set_attribute("messaging.kafka.offset", metadata.offset)
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()

        return done


class _ConsumeTracer:
    """A consume hook: a CONSUMER "receive" span per record, child of the producer's context."""

    def __init__(self, tracer: trace.Tracer, group: str | None) -> None:
        self._tracer = tracer
        self._group = group

    def __call__(self, records: Sequence[ConsumerRecord[Any, Any]]) -> None:
        tracer = self._tracer
        for record in records:
            parent = propagate.extract(list(record.headers or ()), getter=HEADER_GETTER)
            attributes: dict[str, Any] = {
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.operation.type": "receive",
                "messaging.operation.name": "receive",
                "messaging.destination.partition.id": str(record.partition),
                "messaging.kafka.offset": record.offset,
                "messaging.message.id": f"{record.topic}.{record.partition}.{record.offset}",
            }
            if self._group is not None:
                attributes["messaging.consumer.group.name"] = self._group
            key_text = _key_text(record.key)
            if key_text is not None:
                attributes["messaging.kafka.message.key"] = key_text
            span = tracer.start_span(
                f"{record.topic} receive", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
            )
            span.end()
