"""Client metrics: sensors with Kafka's windowed stats, and the registry ``metrics()`` reads.

Every client (Producer, Consumer, Admin) owns one :class:`Metrics` registry.
Instrumented code records into :class:`Sensor` objects once per batch, request
or fetch response (never per record); ``client.metrics()`` returns a plain
``dict[str, float]`` from metric name to value.

Names and semantics follow the Java client's (``record-send-rate``,
``records-lag-max``, ...).  Keys are the bare metric name for client-level
metrics and ``name{tag=value,tag=value}`` for tagged ones, tags in Kafka's order,
e.g. ``"record-send-rate{topic=orders}"`` or
``"records-lag{topic=orders,partition=0}"``; :func:`parse_key` splits a key back.

Windowed stats work like Kafka's ``SampledStat``: ``samples`` (2) samples of
``window_s`` (30 s, Kafka's ``metrics.sample.window.ms``) each; a rate is the
sum over the live samples divided by the time they cover, counted as at least
``samples - 1`` full windows (so a rate is not inflated in its first seconds);
an average or maximum with no recorded value in the window is NaN, as in Kafka.

Why this is written by hand: the values exposed must mean what Kafka's mean
(the same window, sample and rate arithmetic), so that dashboards and alerts
built for Java clients read the same.  prometheus-client and OpenTelemetry are
exporters with their own aggregation (cumulative counters, histograms); they
are where these values go (see :mod:`kafkakit.otel`), not how they are
computed.  The whole thing is ~200 lines and has no dependency.

``KAFKAKIT_METRICS=off`` in the environment when a client is created turns its
instrumentation off (``metrics()`` then returns an empty dict); it exists to
measure the overhead (benchmarks/metrics_overhead.py).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping

__all__ = [
    "Avg",
    "Max",
    "Metrics",
    "Min",
    "Rate",
    "Sensor",
    "Stat",
    "Total",
    "WindowedCount",
    "format_key",
    "metrics_enabled",
    "parse_key",
]

#: Kafka's defaults: metrics.sample.window.ms=30000, metrics.num.samples=2.
SAMPLE_WINDOW_S = 30.0
NUM_SAMPLES = 2
NAN = math.nan


def metrics_enabled() -> bool:
    """False when ``KAFKAKIT_METRICS`` is ``off``/``0``/``false`` (read when a client is created)."""
    return os.environ.get("KAFKAKIT_METRICS", "on").strip().lower() not in ("off", "0", "false", "no")


def format_key(name: str, tags: Mapping[str, object] | None = None) -> str:
    """The ``metrics()`` key of ``name`` with ``tags``: ``name`` or ``name{k=v,k=v}``."""
    if not tags:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in tags.items()) + "}"


def parse_key(key: str) -> tuple[str, dict[str, str]]:
    """Split a ``metrics()`` key into its name and tags (the inverse of :func:`format_key`)."""
    brace = key.find("{")
    if brace < 0 or not key.endswith("}"):
        return key, {}
    tags: dict[str, str] = {}
    for part in key[brace + 1 : -1].split(","):
        k, _, v = part.partition("=")
        tags[k] = v
    return key[:brace], tags


class Stat:
    """One statistic of a sensor's recorded values."""

    def record(self, value: float, now: float) -> None:
        raise NotImplementedError

    def measure(self, now: float) -> float:
        raise NotImplementedError


class Total(Stat):
    """The cumulative sum of every recorded value (Kafka's CumulativeSum: ``*-total``)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0.0

    def record(self, value: float, now: float) -> None:
        self.total += value

    def measure(self, now: float) -> float:
        return self.total


class _Sampled(Stat):
    """Kafka's SampledStat: a ring of ``samples`` windows; old windows are reset, not kept."""

    __slots__ = ("_starts", "_values", "_counts", "_current", "_window", "_n")

    def __init__(self, window_s: float = SAMPLE_WINDOW_S, samples: int = NUM_SAMPLES) -> None:
        self._window = window_s
        self._n = samples
        self._starts = [0.0] * samples
        self._values = [self._initial()] * samples
        self._counts = [0] * samples
        self._current = 0

    def _initial(self) -> float:
        return 0.0

    def _combine(self, old: float, value: float) -> float:
        return old + value

    def record(self, value: float, now: float) -> None:
        i = self._current
        if now - self._starts[i] >= self._window:
            i = self._current = (i + 1) % self._n
            self._starts[i] = now
            self._values[i] = self._initial()
            self._counts[i] = 0
        self._values[i] = self._combine(self._values[i], value)
        self._counts[i] += 1

    def _live(self, now: float) -> list[int]:
        """Indices of the samples still inside the window (obsolete ones are reset)."""
        horizon = self._n * self._window
        live = []
        for i in range(self._n):
            if self._counts[i] and now - self._starts[i] >= horizon:
                self._values[i] = self._initial()
                self._counts[i] = 0
            if self._counts[i]:
                live.append(i)
        return live


class Rate(_Sampled):
    """Sum of recorded values per second over the window (``*-rate``, e.g. bytes per second)."""

    __slots__ = ()

    def measure(self, now: float) -> float:
        live = self._live(now)
        total = sum(self._values[i] for i in live)
        if not live:
            return 0.0
        oldest = min(self._starts[i] for i in live)
        elapsed = now - oldest
        # Kafka's Rate.windowSize: at least samples-1 full windows, so a young rate is not inflated.
        elapsed = max(elapsed, (self._n - 1) * self._window)
        return total / elapsed if elapsed > 0 else 0.0


class WindowedCount(Rate):
    """Events per second over the window (Kafka's Rate(WindowedCount): e.g. ``request-rate``)."""

    __slots__ = ()

    def _combine(self, old: float, value: float) -> float:
        return old + 1.0


class Avg(_Sampled):
    """The mean of the values recorded in the window (NaN when none)."""

    __slots__ = ()

    def measure(self, now: float) -> float:
        live = self._live(now)
        count = sum(self._counts[i] for i in live)
        return sum(self._values[i] for i in live) / count if count else NAN


class Max(_Sampled):
    """The largest value recorded in the window (NaN when none)."""

    __slots__ = ()

    def _initial(self) -> float:
        return -math.inf

    def _combine(self, old: float, value: float) -> float:
        return value if value > old else old

    def measure(self, now: float) -> float:
        live = self._live(now)
        return max(self._values[i] for i in live) if live else NAN


class Min(_Sampled):
    """The smallest value recorded in the window (NaN when none)."""

    __slots__ = ()

    def _initial(self) -> float:
        return math.inf

    def _combine(self, old: float, value: float) -> float:
        return value if value < old else old

    def measure(self, now: float) -> float:
        live = self._live(now)
        return min(self._values[i] for i in live) if live else NAN


class Sensor:
    """A named point where values are recorded; each record updates all its stats."""

    __slots__ = ("name", "_stats")

    def __init__(self, name: str) -> None:
        self.name = name
        self._stats: list[Stat] = []

    def add(self, stat: Stat) -> Sensor:
        self._stats.append(stat)
        return self

    def record(self, value: float = 1.0, now: float | None = None) -> None:
        """Record one value (``now``: time.monotonic(), read here when not given)."""
        if now is None:
            now = time.monotonic()
        for stat in self._stats:
            stat.record(value, now)


class Metrics:
    """A client's registry: named stats of sensors, gauges read on demand, and tagged families."""

    def __init__(self, window_s: float = SAMPLE_WINDOW_S, samples: int = NUM_SAMPLES) -> None:
        self.window_s = window_s
        self.samples = samples
        self._sensors: dict[str, Sensor] = {}
        self._stats: dict[str, Stat] = {}
        self._gauges: dict[str, Callable[[], float]] = {}
        self._families: list[Callable[[], Iterable[tuple[str, float]]]] = []

    def sensor(self, name: str) -> Sensor:
        """The sensor called ``name`` (created empty on first use)."""
        sensor = self._sensors.get(name)
        if sensor is None:
            sensor = self._sensors[name] = Sensor(name)
        return sensor

    def register(self, key: str, stat: Stat) -> Stat:
        """Expose ``stat`` under ``key`` (the caller adds it to the sensor(s) that feed it)."""
        self._stats[key] = stat
        return stat

    def _stat(self, sensor: Sensor, key: str, stat: Stat) -> None:
        sensor.add(stat)
        self._stats[key] = stat

    def meter(
        self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None, *, count: bool = False
    ) -> None:
        """``name-rate`` and ``name-total`` of ``sensor`` (count=True: events, not values, per second)."""
        self._stat(
            sensor,
            format_key(f"{name}-rate", tags),
            WindowedCount(self.window_s, self.samples) if count else Rate(self.window_s, self.samples),
        )
        total = Total()
        if count:
            sensor.add(_CountOf(total))
            self.register(format_key(f"{name}-total", tags), total)
        else:
            self._stat(sensor, format_key(f"{name}-total", tags), total)

    def avg(self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None) -> None:
        self._stat(sensor, format_key(name, tags), Avg(self.window_s, self.samples))

    def max(self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None) -> None:
        self._stat(sensor, format_key(name, tags), Max(self.window_s, self.samples))

    def min(self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None) -> None:
        self._stat(sensor, format_key(name, tags), Min(self.window_s, self.samples))

    def rate(self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None) -> None:
        self._stat(sensor, format_key(name, tags), Rate(self.window_s, self.samples))

    def total(self, sensor: Sensor, name: str, tags: Mapping[str, object] | None = None) -> None:
        self._stat(sensor, format_key(name, tags), Total())

    def gauge(self, name: str, read: Callable[[], float], tags: Mapping[str, object] | None = None) -> None:
        """A value computed when metrics are read (e.g. ``buffer-available-bytes``)."""
        self._gauges[format_key(name, tags)] = read

    def family(self, read: Callable[[], Iterable[tuple[str, float]]]) -> None:
        """Keyed values computed when read, e.g. one ``records-lag{...}`` per assigned partition."""
        self._families.append(read)

    def snapshot(self) -> dict[str, float]:
        """Every metric's current value, by key."""
        now = time.monotonic()
        out: dict[str, float] = {}
        for key, stat in self._stats.items():
            out[key] = float(stat.measure(now))
        for key, read in self._gauges.items():
            out[key] = float(read())
        for family in self._families:
            for key, value in family():
                out[key] = float(value)
        return dict(sorted(out.items()))


class _CountOf(Stat):
    """Adds 1 per recorded event to a Total (``*-total`` of a count meter)."""

    __slots__ = ("_total",)

    def __init__(self, total: Total) -> None:
        self._total = total

    def record(self, value: float, now: float) -> None:
        self._total.total += 1.0

    def measure(self, now: float) -> float:
        return self._total.total


class NetworkMetrics:
    """The connection layer's sensors, shared by every connection of one client.

    Kafka's Selector metrics (``request-rate``, ``outgoing-byte-rate``,
    ``incoming-byte-rate``, ``response-rate``, ``network-io-rate``,
    ``connection-count``, ``connection-creation-rate``, ...) plus
    ``request-latency-avg/max``: for the requests whose API key is in
    ``latency_api_keys`` (a producer: Produce only, as Kafka's), else all.
    Recorded once per request and per response frame.
    """

    __slots__ = ("latency_api_keys", "_sent", "_received", "_latency", "_created", "_closed", "live")

    def __init__(self, registry: Metrics, latency_api_keys: frozenset[int] | None = None) -> None:
        self.latency_api_keys = latency_api_keys
        self.live = 0
        io = WindowedCount(registry.window_s, registry.samples)
        io_total = Total()
        registry.register("network-io-rate", io)
        registry.register("network-io-total", io_total)
        io_count = _CountOf(io_total)

        sent = self._sent = registry.sensor("bytes-sent")
        registry.meter(sent, "outgoing-byte")
        registry.meter(sent, "request", count=True)
        registry.avg(sent, "request-size-avg")
        registry.max(sent, "request-size-max")
        sent.add(io).add(io_count)

        received = self._received = registry.sensor("bytes-received")
        registry.meter(received, "incoming-byte")
        registry.meter(received, "response", count=True)
        received.add(io).add(io_count)

        latency = self._latency = registry.sensor("request-latency")
        registry.avg(latency, "request-latency-avg")
        registry.max(latency, "request-latency-max")

        created = self._created = registry.sensor("connections-created")
        registry.meter(created, "connection-creation", count=True)
        closed = self._closed = registry.sensor("connections-closed")
        registry.meter(closed, "connection-close", count=True)
        registry.gauge("connection-count", lambda: float(self.live))

    def request_sent(self, size: int, now: float) -> None:
        self._sent.record(size, now)

    def response_received(self, size: int, api_key: int, sent_at: float, now: float) -> None:
        self._received.record(size, now)
        keys = self.latency_api_keys
        if keys is None or api_key in keys:
            self._latency.record((now - sent_at) * 1000.0, now)

    def connection_created(self) -> None:
        self.live += 1
        self._created.record()

    def connection_closed(self) -> None:
        self.live -= 1
        self._closed.record()
