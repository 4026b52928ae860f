"""Prometheus metrics of the broker, served over HTTP at ``/metrics`` (``metrics_port`` setting).

Design (docs/broker.md "Metrics"):

* Nothing here exists unless ``metrics_port`` is set: the server then hands
  each connection a :class:`ListenerStats` and calls :meth:`BrokerMetrics.request_done`
  once per answered request; without it the request path carries ``None`` and
  skips all of this.
* The request path only bumps plain ``int`` attributes and dict entries.  No
  ``prometheus_client`` metric object (each update takes a lock) is touched per
  request: one :class:`BrokerMetrics` is a custom collector that turns those
  numbers into metric families when scraped.  That is safe without locks because
  the HTTP endpoint (:class:`MetricsServer`) runs on the broker's own event loop,
  so a scrape never interleaves with a request.
* Gauges of the broker's state (log sizes and offsets per partition, groups and
  transactions by state, producer ids) are computed at scrape time from the
  state's public accessors, never maintained per append.
* Each broker has its own :class:`~prometheus_client.CollectorRegistry`, so several
  brokers in one process (tests) do not mix their numbers.

Names are Prometheus style (``kafkakit_broker_`` prefix, base units, ``_total``
counters); each one's help text names the Kafka JMX metric it corresponds to.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
import struct
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kafkakit.broker.coordinators.group import GroupState
from kafkakit.broker.coordinators.transactions import KNOWN_STATE_NAMES, state_name
from kafkakit.broker.handlers import HANDLERS
from kafkakit.broker.handlers.base import CloseConnection
from kafkakit.protocol import ApiKey, RequestHeaderInfo
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker")

PREFIX = "kafkakit_broker_"
#: Upper bounds (seconds) of the request-time histogram: 100 us up to a long poll or a rebalance.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_PRODUCE = int(ApiKey.PRODUCE)
_FETCH = int(ApiKey.FETCH)
# Seconds a scraper may take to send its request line and headers.
HTTP_READ_TIMEOUT = 10.0
# Seconds a scraper may take to read the rest of an answer once the broker has written it.
HTTP_CLOSE_TIMEOUT = 5.0


# Any int16 decodes as an api key or version: requests for keys that are no Kafka API share one
# label, and versions this broker does not serve another, so a client cannot grow the series.
UNKNOWN_API = "Unknown"
UNKNOWN_KEY = -1
_UNSUPPORTED_VERSION = -1


def api_name(api_key: int) -> str:
    """Kafka's request name (``Produce``, ``ApiVersions``): the ``request`` tag of its RequestMetrics."""
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return UNKNOWN_API


def _version_key(api_key: int, version: int) -> int:
    spec = HANDLERS.get(api_key)
    if spec is not None and spec.min_version <= version <= spec.max_version:
        return version
    return _UNSUPPORTED_VERSION


def error_name(code: int) -> str:
    """Kafka's error name (``UNKNOWN_TOPIC_OR_PARTITION``), as in ErrorsPerSec's ``error`` tag."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


class ListenerStats:
    """Counters of one listener; its connections bump the attributes directly."""

    __slots__ = ("connections_created", "connections_closed", "received_bytes", "sent_bytes")

    def __init__(self) -> None:
        self.connections_created = 0
        self.connections_closed = 0
        self.received_bytes = 0
        self.sent_bytes = 0


class _ApiStats:
    """Request counts by version and the handling-time histogram of one API."""

    __slots__ = ("name", "by_version", "buckets", "seconds", "count")

    def __init__(self, name: str) -> None:
        self.name = name
        self.by_version: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, not cumulative; last is +Inf
        self.seconds = 0.0
        self.count = 0


class _TopicStats:
    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0


class BrokerMetrics(Collector):
    """The numbers of one broker, and the collector that exposes them (registered in :attr:`registry`).

    ``state`` returns the running broker's state (None while stopped): the
    scrape-time gauges are computed from it.
    """

    def __init__(self, state: Callable[[], BrokerState | None]) -> None:
        self._state = state
        self._apis: dict[int, _ApiStats] = {}
        self._errors: dict[tuple[int, int], int] = {}
        self._topics: dict[str, _TopicStats] = {}
        # Broker-wide totals survive a topic's deletion (its per-topic series go away).
        self._totals = _TopicStats()
        self._listeners: dict[str, ListenerStats] = {}
        self._auth: dict[tuple[str, str, bool], int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- recording (the request path) ---------------------------------------------------------

    def listener(self, name: str) -> ListenerStats:
        """The counters of listener ``name`` (created on first use)."""
        stats = self._listeners.get(name)
        if stats is None:
            stats = self._listeners[name] = ListenerStats()
        return stats

    def authentication(self, listener: str, mechanism: str, succeeded: bool) -> None:
        """Count one SASL login (a KIP-368 re-authentication counts as a login)."""
        key = (listener, mechanism, succeeded)
        self._auth[key] = self._auth.get(key, 0) + 1

    def request_done(self, header: RequestHeaderInfo, request: Any, response: Any, seconds: float) -> None:
        """Count one request that took ``seconds`` from being read to its response being written
        (``response`` None: nothing was sent, an acks=0 Produce)."""
        key = header.api_key
        api = self._apis.get(key)
        if api is None:
            key, api = self._new_api(key)
        by_version = api.by_version
        version = header.api_version
        count = by_version.get(version)
        if count is None:  # a first: a version this broker does not serve counts as UNSUPPORTED
            version = _version_key(key, version)
            count = by_version.get(version, 0)
        by_version[version] = count + 1
        api.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        api.seconds += seconds
        api.count += 1
        if isinstance(response, CloseConnection):
            return  # answered by closing: nothing was appended or sent
        try:
            if key == _PRODUCE:
                self._produced(request, response)
            elif key == _FETCH:
                self._fetched(version, response)
            elif response is not None:
                self._count_errors(key, response)
        except Exception:  # a response this code does not understand must not cost the connection
            log.debug("metrics could not read an api %d v%d response", key, version, exc_info=True)

    def _new_api(self, key: int) -> tuple[int, _ApiStats]:
        """The stats of a key seen for the first time; every key that is no Kafka API shares one."""
        name = api_name(key)
        if name == UNKNOWN_API:
            key = UNKNOWN_KEY
        api = self._apis.get(key)
        if api is None:
            api = self._apis[key] = _ApiStats(name)
        return key, api

    def _error(self, key: int, code: int) -> None:
        errors = self._errors
        errors[(key, code)] = errors.get((key, code), 0) + 1

    def _topic(self, name: str) -> _TopicStats:
        stats = self._topics.get(name)
        if stats is None:
            stats = self._topics[name] = _TopicStats()
        return stats

    def _produced(self, request: Any, response: Any) -> None:
        """BytesIn/MessagesIn of the partitions appended, and the response's errors."""
        topic_data = getattr(request, "topic_data", None)  # None: Produce v0-2 (refused)
        if topic_data is None:
            return
        answers = None if response is None else response.responses
        totals = self._totals
        for i, topic in enumerate(topic_data):
            stats: _TopicStats | None = None
            answered = None if answers is None else answers[i].partition_responses
            for j, data in enumerate(topic.partition_data):
                if answered is not None:
                    code = answered[j].error_code
                    if code:
                        self._error(_PRODUCE, code)
                        continue
                records = data.records
                if not records:
                    continue
                if stats is None:
                    stats = self._topic(topic.name)
                size = len(records)
                messages = record_count(records)
                stats.bytes_in += size
                stats.messages_in += messages
                totals.bytes_in += size
                totals.messages_in += messages

    def _fetched(self, version: int, response: Any) -> None:
        parts = getattr(response, "parts", None)
        if parts is None:
            return
        for topic, code, size in fetch_response_partitions(version, parts):
            if code:
                self._error(_FETCH, code)
            if size:
                self._topic(topic).bytes_out += size
                self._totals.bytes_out += size

    def _count_errors(self, key: int, response: Any) -> None:
        cls: type = type(response)
        if dataclasses.is_dataclass(cls):
            plan = _plan(cls)
            if plan is not None:
                self._walk(key, response, plan)

    def _walk(self, key: int, entity: Any, plan: _Plan) -> None:
        """Count the error codes of ``entity`` and of the nested entities ``plan`` names."""
        for name in plan.errors:
            code = getattr(entity, name)
            if code:
                self._error(key, code)
        for name in plan.one:
            value = getattr(entity, name)
            if value is not None:
                inner = _plan(type(value))
                if inner is not None:
                    self._walk(key, value, inner)
        for name in plan.many:
            items = getattr(entity, name)
            if items:
                inner = _plan(type(items[0]))
                if inner is not None:
                    for item in items:
                        self._walk(key, item, inner)

    # -- collecting (a scrape) ------------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        """Nothing up front: the registry then asks :meth:`collect` only when scraped."""
        return iter(())

    def collect(self) -> Iterator[Metric]:
        """Every metric family, from the counters above and the broker state as it is now."""
        yield from self._request_families()
        yield from self._topic_families()
        yield from self._listener_families()
        state = self._state()
        if state is not None:
            yield from state_families(state)

    def _request_families(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            PREFIX + "requests",
            "Requests handled, by API and version (Kafka: kafka.network RequestMetrics RequestsPerSec).",
            labels=["api", "version"],
        )
        seconds = HistogramMetricFamily(
            PREFIX + "request_duration_seconds",
            "Time from a request being read to its response being written, by API "
            "(Kafka: kafka.network RequestMetrics TotalTimeMs).",
            labels=["api"],
        )
        for api in sorted(self._apis.values(), key=lambda a: a.name):
            for version, count in sorted(api.by_version.items()):
                requests.add_metric([api.name, str(version) if version >= 0 else "unsupported"], count)
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, LATENCY_BUCKETS), "+Inf"), api.buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            seconds.add_metric([api.name], buckets, api.seconds)
        errors = CounterMetricFamily(
            PREFIX + "request_errors",
            "Error codes in responses (every partition's), by API and error; NONE is not counted "
            "(Kafka: kafka.network RequestMetrics ErrorsPerSec).",
            labels=["api", "error"],
        )
        for (key, code), count in sorted(self._errors.items()):
            errors.add_metric([api_name(key), error_name(code)], count)
        yield requests
        yield seconds
        yield errors

    def _topic_families(self) -> Iterator[Metric]:
        state = self._state()
        if state is not None:  # a deleted topic's series go, as Kafka removes its BrokerTopicMetrics
            for name in [t for t in self._topics if t not in state.topics]:
                del self._topics[name]
        specs = (
            ("bytes_in", "Record bytes appended by Produce requests", "BytesInPerSec"),
            ("messages_in", "Records appended by Produce requests", "MessagesInPerSec"),
            ("bytes_out", "Record bytes sent in Fetch responses", "BytesOutPerSec"),
        )
        for attribute, text, kafka in specs:
            total = CounterMetricFamily(
                PREFIX + attribute, f"{text}, all topics (Kafka: kafka.server BrokerTopicMetrics {kafka})."
            )
            total.add_metric([], getattr(self._totals, attribute))
            per_topic = CounterMetricFamily(
                PREFIX + "topic_" + attribute,
                f"{text}, by topic (Kafka: kafka.server BrokerTopicMetrics {kafka},topic=...).",
                labels=["topic"],
            )
            for name, stats in sorted(self._topics.items()):
                per_topic.add_metric([name], getattr(stats, attribute))
            yield total
            yield per_topic

    def _listener_families(self) -> Iterator[Metric]:
        listeners = sorted(self._listeners.items())
        families: list[tuple[str, str, Callable[[ListenerStats], int], bool]] = [
            ("connections", "Open connections (Kafka: socket-server-metrics connection-count).",
             lambda s: s.connections_created - s.connections_closed, True),
            ("connections_created", "Connections accepted (Kafka: socket-server-metrics connection-creation-total).",
             lambda s: s.connections_created, False),
            ("connections_closed", "Connections closed (Kafka: socket-server-metrics connection-close-total).",
             lambda s: s.connections_closed, False),
            ("network_received_bytes", "Request bytes read, frames included "
             "(Kafka: socket-server-metrics incoming-byte-total).", lambda s: s.received_bytes, False),
            ("network_sent_bytes", "Response bytes written, frames included "
             "(Kafka: socket-server-metrics outgoing-byte-total).", lambda s: s.sent_bytes, False),
        ]  # fmt: skip
        for name, text, value, is_gauge in families:
            family: GaugeMetricFamily | CounterMetricFamily = (
                GaugeMetricFamily(PREFIX + name, text, labels=["listener"])
                if is_gauge
                else CounterMetricFamily(PREFIX + name, text, labels=["listener"])
            )
            for listener, stats in listeners:
                family.add_metric([listener], value(stats))
            yield family
        for succeeded, name, kafka in (
            (True, "successful_authentication", "successful-authentication-total"),
            (False, "failed_authentication", "failed-authentication-total"),
        ):
            family = CounterMetricFamily(
                PREFIX + name,
                f"SASL logins that {'succeeded' if succeeded else 'failed'}, by listener and mechanism "
                f"(Kafka: socket-server-metrics {kafka}).",
                labels=["listener", "mechanism"],
            )
            for (listener, mechanism, ok), count in sorted(self._auth.items()):
                if ok is succeeded:
                    family.add_metric([listener, mechanism], count)
            yield family


# -- scrape-time gauges of the broker state ----------------------------------------------------


def state_families(state: BrokerState) -> Iterator[Metric]:
    """Log sizes and offsets per partition, groups and transactions by state, producer ids."""
    size = GaugeMetricFamily(
        PREFIX + "log_size_bytes", "Bytes of a partition's log segments (Kafka: kafka.log Log Size).",
        labels=["topic", "partition"],
    )  # fmt: skip
    start = GaugeMetricFamily(
        PREFIX + "log_start_offset", "First offset of a partition's log (Kafka: kafka.log Log LogStartOffset).",
        labels=["topic", "partition"],
    )  # fmt: skip
    end = GaugeMetricFamily(
        PREFIX + "log_end_offset", "Next offset of a partition's log (Kafka: kafka.log Log LogEndOffset).",
        labels=["topic", "partition"],
    )  # fmt: skip
    segments = GaugeMetricFamily(
        PREFIX + "log_segments", "Segments of a partition's log (Kafka: kafka.log Log NumLogSegments).",
        labels=["topic", "partition"],
    )  # fmt: skip
    producer_ids = 0
    partitions = state.logs.partitions()
    for (topic, partition), partition_log in sorted(partitions.items()):
        labels = [topic, str(partition)]
        size.add_metric(labels, partition_log.size_in_bytes)
        start.add_metric(labels, partition_log.log_start_offset)
        end.add_metric(labels, partition_log.log_end_offset)
        segments.add_metric(labels, len(partition_log.segments))
        producers = state.producer_states.loaded(partition_log)
        if producers is not None:
            producer_ids += len(producers)
    yield from (size, start, end, segments)
    yield _gauge(
        "partitions", "Partitions (Kafka: kafka.server ReplicaManager PartitionCount).", len(partitions)
    )
    yield _gauge(
        "producer_ids",
        "Producer ids with state kept, summed over partitions (Kafka: kafka.server ReplicaManager ProducerIdCount).",
        producer_ids,
    )
    groups = GaugeMetricFamily(
        PREFIX + "groups",
        "Consumer groups by state (Kafka: GroupMetadataManager NumGroupsStable, NumGroupsEmpty, ...).",
        labels=["state"],
    )
    group_counts = dict.fromkeys((s.value for s in GroupState), 0)
    for _, _, group_state in state.groups.list_groups():
        group_counts[group_state] = group_counts.get(group_state, 0) + 1
    for name, count in sorted(group_counts.items()):
        groups.add_metric([name], count)
    yield groups
    transactions = GaugeMetricFamily(
        PREFIX + "transactions",
        "Transactional ids by transaction state (Ongoing: open transactions) "
        "(Kafka: TransactionStateManager, per state).",
        labels=["state"],
    )
    txn_counts = dict.fromkeys(KNOWN_STATE_NAMES, 0)
    for meta in state.transactions.list_transactions((), ()):
        txn_counts[state_name(meta.state)] += 1
    for name, count in sorted(txn_counts.items()):
        transactions.add_metric([name], count)
    yield transactions


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, text, value=value)


# -- reading responses --------------------------------------------------------------------------

_I32_AT = struct.Struct(">i").unpack_from
_I16_AT = struct.Struct(">h").unpack_from
# A v2 record batch: baseOffset (8), batchLength (4), ..., recordCount at byte 57 of 61.
_BATCH_HEADER = 61


def record_count(records: bytes) -> int:
    """Records in a v2 record set (the ``recordCount`` of each batch header)."""
    count, pos, end = 0, 0, len(records)
    while end - pos >= _BATCH_HEADER:
        count += _I32_AT(records, pos + 57)[0]
        pos += 12 + _I32_AT(records, pos + 8)[0]
    return count


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """Where a response class keeps error codes: its own fields, and nested entities to descend."""

    errors: tuple[str, ...]
    one: tuple[str, ...]
    many: tuple[str, ...]


_PLANS: dict[type, _Plan | None] = {}


def _plan(cls: type) -> _Plan | None:
    """The fields to visit in ``cls`` (None: no error code anywhere below it), worked out once per class."""
    try:
        return _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _make_plan(cls)
        return plan


def _make_plan(cls: type) -> _Plan | None:
    """The fields to visit in ``cls`` (None: no error code anywhere below it)."""
    errors, one, many = [], [], []
    hints = typing.get_type_hints(cls, sys.modules[cls.__module__].__dict__)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name, f.type)
        if kind is ErrorCode:
            errors.append(f.name)
            continue
        args = typing.get_args(kind)
        if typing.get_origin(kind) is tuple and args and dataclasses.is_dataclass(args[0]):
            if _plan(typing.cast(type, args[0])) is not None:
                many.append(f.name)
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind) and _plan(kind) is not None:
            one.append(f.name)
    if not (errors or one or many):
        return None
    return _Plan(tuple(errors), tuple(one), tuple(many))


class _PartsReader:
    """Reads a hand-encoded response body whose record data may be separate file-slice parts.

    Reads in place (``unpack_from``, positions moved past record bytes): a Fetch
    response can carry megabytes of records, none of which may be copied here.
    """

    def __init__(self, parts: Sequence[Any]) -> None:
        self._parts = parts
        self._index = -1
        self._buf = b""
        self._pos = 0
        self._next_bytes()

    def _next_bytes(self) -> None:
        self._index += 1
        part = self._parts[self._index] if self._index < len(self._parts) else b""
        if not isinstance(part, bytes):
            raise ValueError("expected a bytes part")
        self._buf, self._pos = part, 0

    def skip(self, n: int) -> None:
        if n < 0 or self._pos + n > len(self._buf):
            raise ValueError("response ends early")
        self._pos += n

    def int16(self) -> int:
        value: int = _I16_AT(self._buf, self._pos)[0]
        self._pos += 2
        return value

    def int32(self) -> int:
        value: int = _I32_AT(self._buf, self._pos)[0]
        self._pos += 4
        return value

    def text(self, n: int) -> str:
        end = self._pos + n
        if n < 0 or end > len(self._buf):
            raise ValueError("response ends early")
        value = self._buf[self._pos : end].decode("utf-8")
        self._pos = end
        return value

    def uvarint(self) -> int:
        shift = value = 0
        buf = self._buf
        while True:
            byte = buf[self._pos]
            self._pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def skip_records(self, size: int) -> None:
        """Records are inline, or (when this bytes part is used up) the next part is their file slice."""
        if size <= 0:
            return
        if self._pos == len(self._buf):
            self._index += 1
            part = self._parts[self._index]
            if getattr(part, "length", None) != size:
                raise ValueError("file slice does not match the records' length")
            self._next_bytes()
        else:
            self.skip(size)


def fetch_response_partitions(version: int, parts: Sequence[Any]) -> Iterator[tuple[str, int, int]]:
    """(topic, error code, record bytes) of each partition of a Fetch v4-12 response body."""
    reader = _PartsReader(parts)
    flexible = version >= 12
    reader.skip(4)  # throttle_time_ms
    if version >= 7:
        top_error = reader.int16()
        if top_error:
            yield "", top_error, 0
        reader.skip(4)  # session id
    # After the error: high watermark, LSO and (v5+) log start offset.
    offsets = 16 + (8 if version >= 5 else 0)
    for _ in range(reader.uvarint() - 1 if flexible else reader.int32()):
        topic = reader.text(reader.uvarint() - 1 if flexible else reader.int16())
        for _ in range(reader.uvarint() - 1 if flexible else reader.int32()):
            reader.skip(4)  # partition index
            code = reader.int16()
            reader.skip(offsets)
            aborted = reader.uvarint() - 1 if flexible else reader.int32()
            if aborted > 0:
                reader.skip(aborted * (17 if flexible else 16))
            if version >= 11:
                reader.skip(4)  # preferred read replica
            size = reader.uvarint() - 1 if flexible else reader.int32()
            reader.skip_records(size)
            if flexible:
                _skip_tags(reader)
            yield topic, code, max(size, 0)
        if flexible:
            _skip_tags(reader)


def _skip_tags(reader: _PartsReader) -> None:
    for _ in range(reader.uvarint()):
        reader.uvarint()
        reader.skip(reader.uvarint())


# -- the HTTP endpoint --------------------------------------------------------------------------


class MetricsServer:
    """``GET /metrics`` on the broker's event loop: no thread, and :meth:`stop` frees the port."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the endpoint listens on."""
        if self._server is None:
            raise RuntimeError("metrics server is not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (port 0: any free port)."""
        self._server = await asyncio.start_server(self._on_connection, host, port)

    async def stop(self) -> None:
        """Stop listening and end any scrape in progress."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await server.wait_closed()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a scraper that left or sent garbage: nothing to answer
        finally:
            self._tasks.discard(task)
            await _close(writer, graceful=not task.cancelling())  # stopping: no waiting for a scraper

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HTTP_READ_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, _, rest = request_line.partition(" ")
        target = rest.partition(" ")[0].partition("?")[0]
        headers = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if method not in ("GET", "HEAD"):
            status, content_type, body = "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n"
        elif target != "/metrics":
            status, content_type, body = "404 Not Found", "text/plain", b"metrics are at /metrics\n"
        else:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            status, body = "200 OK", encoder(self._registry)
        head_out = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        writer.write(head_out if method == "HEAD" else head_out + body)
        await writer.drain()


async def _close(writer: asyncio.StreamWriter, graceful: bool) -> None:
    """Close after the answer is flushed, or at once (``graceful`` False, or a scraper that stopped reading)."""
    if graceful:
        writer.close()
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            async with asyncio.timeout(HTTP_CLOSE_TIMEOUT):
                await writer.wait_closed()
            return
        except Exception:
            pass
    writer.transport.abort()
