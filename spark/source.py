"""The reading side of the ``kafkakit`` data source: batch and streaming readers.

Options follow Spark's own Kafka connector (see docs/spark.md) and are all
checked when the DataFrame is defined, so a bad option fails at ``load()``
(``endingOffsets`` on a stream: at ``start()``) with a KafkaConfigError naming
it.  Planning (which partitions, which offsets) runs on the driver with an
Admin (topic discovery) and a Consumer (ListOffsets honouring the isolation
level: under read_committed a range never goes past the last stable offset);
``read()`` runs on executors, see :mod:`kafkakit.spark.reader`.

Offsets travel through Spark as ``{"topic": {"0": 42}}`` dicts built in sorted
order (:func:`kafkakit.spark.offsets.to_dict`): the next offset to read per
partition.  Streaming: partitions that appear between micro-batches start at
their earliest offset; an offset never moves backwards;
``maxOffsetsPerTrigger`` is shared across partitions in proportion to their
backlog.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kafkakit import Admin, Consumer
from kafkakit.errors import KafkaConfigError, NotYetSupportedError
from kafkakit.spark import runtime
from kafkakit.spark.fetch_settings import CONNECTION_SETTINGS, FetchSettings
from kafkakit.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OffsetSpec,
    PartitionOffsets,
    from_dict,
    limit_offsets,
    parse_assign,
    parse_offset_spec,
    parse_timestamp,
    parse_timestamps,
    split_ranges,
    to_dict,
)
from kafkakit.spark.options import SourceOptions
from kafkakit.structs import TopicPartition
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

try:  # pyspark >= 4.2: read limits and Trigger.AvailableNow
    import pyspark.sql.streaming.datasource as _limits
except ImportError:  # pyspark 4.0/4.1: latestOffset() without arguments
    _limits = None  # type: ignore[assignment]

_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
_ISOLATION = "kafka.isolation.level"
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
#: Fetch-related consumer settings (kafkakit names) the reader honours.
_FETCH_SETTINGS = ("fetch_max_wait_ms", "fetch_max_bytes", "max_partition_fetch_bytes", "check_crcs")
#: Larger than the consumer's 1 MiB default: a task reads one partition, and bigger fetches
#: mean fewer round trips per record (the Java connector prefetches for the same reason).
_DEFAULT_PARTITION_FETCH_BYTES = 8 << 20

# As Spark's connector declares it (array items nullable).
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


# -- options ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: listed topics, a topic name pattern, or fixed partitions."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.partitions)


@dataclass(frozen=True)
class SourceConfig:
    """Every source option, parsed and checked (picklable: shipped to executors)."""

    subscription: Subscription
    fetch: FetchSettings
    starting: OffsetSpec
    ending: OffsetSpec
    ending_given: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    client: dict[str, Any] = field(default_factory=dict)


def parse_options(options: Any) -> SourceConfig:
    """Check every option; raises KafkaConfigError naming the first bad one."""
    opts = SourceOptions(options)
    bootstrap = opts.bootstrap_servers()
    subscription = _subscription(opts)
    isolation = (opts.get(_ISOLATION) or "read_committed").strip().lower()
    if isolation not in _ISOLATION_LEVELS:
        raise KafkaConfigError(_ISOLATION, f"must be one of {_ISOLATION_LEVELS}, got {isolation!r}")
    security = opts.security()
    client = _client_settings(opts, isolation)
    connection = {k: v for k, v in client.items() if k in CONNECTION_SETTINGS}
    fetch_kwargs = {k: v for k, v in client.items() if k in _FETCH_SETTINGS}
    fetch_kwargs.setdefault("max_partition_fetch_bytes", _DEFAULT_PARTITION_FETCH_BYTES)
    fetch = FetchSettings(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        include_headers=opts.bool("includeHeaders", False),
        fail_on_data_loss=opts.bool("failOnDataLoss", True),
        poll_timeout_ms=opts.int("kafkaConsumer.pollTimeoutMs", 120000, minimum=1) or 120000,
        connection=connection,
        security=security,
        **fetch_kwargs,
    )
    return SourceConfig(
        subscription=subscription,
        fetch=fetch,
        starting=_starting_spec(opts),
        ending=parse_offset_spec(opts.get("endingOffsets"), "endingOffsets", "latest", ending=True),
        ending_given="endingOffsets" in opts,
        max_offsets_per_trigger=opts.int("maxOffsetsPerTrigger", None, minimum=1),
        min_partitions=opts.int("minPartitions", None, minimum=1),
        client=client,
    )


def _subscription(opts: SourceOptions) -> Subscription:
    given = [name for name in _SUBSCRIPTIONS if name in opts]
    if len(given) != 1:
        found = " and ".join(given) if given else "none"
        raise KafkaConfigError(
            "/".join(_SUBSCRIPTIONS),
            f"exactly one of subscribe, subscribePattern or assign must be set, got {found}",
        )
    kind = given[0]
    raw = opts.require(kind)
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise KafkaConfigError("subscribe", f"must list at least one topic, got {raw!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise KafkaConfigError(
                "subscribePattern", f"is not a valid regular expression ({exc}): {raw!r}"
            ) from None
        return Subscription("subscribePattern", pattern=raw)
    return Subscription("assign", partitions=tuple(parse_assign(raw)))


def _starting_spec(opts: SourceOptions) -> OffsetSpec:
    """startingOffsetsByTimestamp / startingTimestamp win over startingOffsets (as in Spark)."""
    by_timestamp = opts.get("startingOffsetsByTimestamp")
    if by_timestamp is not None:
        return OffsetSpec(
            "timestamps", per_partition=parse_timestamps(by_timestamp, "startingOffsetsByTimestamp")
        )
    timestamp = opts.get("startingTimestamp")
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp=parse_timestamp(timestamp, "startingTimestamp"))
    return parse_offset_spec(opts.get("startingOffsets"), "startingOffsets", "latest", ending=False)


def _client_settings(opts: SourceOptions, isolation: str) -> dict[str, Any]:
    """``kafka.*`` options as Consumer keyword arguments, checked by building (not starting) one."""
    settings = opts.client_settings(Consumer, skip=(_ISOLATION,))
    try:
        Consumer(bootstrap_servers=opts.bootstrap_servers(), isolation_level=isolation, **settings)
    except KafkaConfigError as exc:
        raise KafkaConfigError(_option_name(exc.setting), str(exc)) from None
    return settings


def _option_name(keyword: str) -> str:
    return "kafka." + keyword.replace("_", ".")


def source_schema(options: Any) -> StructType:
    """Spark's Kafka connector schema (plus ``headers`` with includeHeaders); checks the options."""
    config = parse_options(options)
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if config.fetch.include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


# -- planning on the driver -------------------------------------------------------------------


class Planner:
    """Topic discovery and ListOffsets for the driver (clients started on first use)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._admin: Admin | None = None
        self._consumer: Consumer | None = None

    def _run(self, coro: Any) -> Any:
        timeout = self.config.fetch.connection.get("request_timeout_ms", 40000) / 1000 * 3
        return runtime.run(coro, timeout)

    async def _clients(self) -> tuple[Admin, Consumer]:
        if self._admin is None or self._consumer is None:
            fetch = self.config.fetch
            conn = fetch.connection
            security = fetch.security.client_kwargs()
            admin = Admin(
                bootstrap_servers=fetch.bootstrap_servers,
                **{
                    k: v
                    for k, v in conn.items()
                    if k in ("client_id", "request_timeout_ms", "retry_backoff_ms")
                },
                **security,
            )
            consumer = Consumer(
                bootstrap_servers=fetch.bootstrap_servers,
                isolation_level=fetch.isolation_level,
                enable_auto_commit=False,
                allow_auto_create_topics=False,
                **conn,
                **security,
            )
            await admin.start()
            await consumer.start()
            self._admin, self._consumer = admin, consumer
        return self._admin, self._consumer

    def close(self) -> None:
        admin, consumer = self._admin, self._consumer
        self._admin = self._consumer = None

        async def close_all() -> None:
            if consumer is not None:
                await consumer.stop()
            if admin is not None:
                await admin.close()

        if admin is not None or consumer is not None:
            self._run(close_all())

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers right now."""
        subscription = self.config.subscription
        if subscription.kind == "assign":
            return list(subscription.partitions)

        async def discover() -> list[TopicPartition]:
            admin, _ = await self._clients()
            topics = await admin.describe_topics()
            return sorted(
                TopicPartition(t.name, p.partition)
                for t in topics
                if subscription.matches(t.name)
                for p in t.partitions
            )

        result: list[TopicPartition] = self._run(discover())
        return result

    def earliest(self, tps: Sequence[TopicPartition]) -> PartitionOffsets:
        return self._lookup(tps, "beginning")

    def latest(self, tps: Sequence[TopicPartition]) -> PartitionOffsets:
        """End offsets: the last stable offset under read_committed, else the high watermark."""
        return self._lookup(tps, "end")

    def _lookup(self, tps: Sequence[TopicPartition], which: str) -> PartitionOffsets:
        if not tps:
            return {}

        async def lookup() -> PartitionOffsets:
            _, consumer = await self._clients()
            if which == "beginning":
                return await consumer.beginning_offsets(tps)
            return await consumer.end_offsets(tps)

        result: PartitionOffsets = self._run(lookup())
        return result

    def for_times(self, timestamps: dict[TopicPartition, int]) -> PartitionOffsets:
        """The first offset at/after each timestamp; the end offset where no record is that late."""
        if not timestamps:
            return {}

        async def lookup() -> PartitionOffsets:
            _, consumer = await self._clients()
            found = await consumer.offsets_for_times(timestamps)
            missing = [tp for tp, hit in found.items() if hit is None]
            ends = await consumer.end_offsets(missing) if missing else {}
            return {tp: ends[tp] if hit is None else hit.offset for tp, hit in found.items()}

        result: PartitionOffsets = self._run(lookup())
        return result

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], option: str) -> PartitionOffsets:
        """Offsets of ``tps`` for a starting/ending spec."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "timestamp":
            assert spec.timestamp is not None
            return self.for_times(dict.fromkeys(tps, spec.timestamp))
        given = spec.per_partition or {}
        _check_covers(given, tps, option)
        if spec.kind == "timestamps":
            return self.for_times({tp: given[tp] for tp in tps})
        offsets = {tp: given[tp] for tp in tps}
        earliest = self.earliest([tp for tp, o in offsets.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in offsets.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in offsets.items()}


def _check_covers(given: PartitionOffsets, tps: list[TopicPartition], option: str) -> None:
    """JSON offsets must name exactly the partitions being read (as Spark's connector requires)."""
    missing = sorted(set(tps) - set(given))
    if missing:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
        raise KafkaConfigError(option, f"must give an offset for every partition read; missing {names}")
    extra = sorted(set(given) - set(tps))
    if extra:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra)
        raise KafkaConfigError(option, f"names partitions that are not read (or do not exist): {names}")


# -- input partitions and read() ------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One task: records ``[start, end)`` of one topic-partition, and how to fetch them."""

    settings: FetchSettings
    topic: str
    partition: int
    start: int
    end: int


def _input_partitions(config: SourceConfig, ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
    return [
        KafkaInputPartition(config.fetch, r.tp.topic, r.tp.partition, r.start, r.end)
        for r in split_ranges(ranges, config.min_partitions)
    ]


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Imported here: pyarrow and the columnar decoder are the tasks' (see fetch_settings).
    from kafkakit.spark.reader import read_range

    assert isinstance(partition, KafkaInputPartition)
    tp = TopicPartition(partition.topic, partition.partition)
    return read_range(partition.settings, tp, partition.start, partition.end)


# -- batch -------------------------------------------------------------------------------------------


class KafkaBatchReader(DataSourceReader):
    """``spark.read.format("kafkakit")``: startingOffsets (default earliest) to endingOffsets (latest)."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.config)
        try:
            tps = planner.partitions()
            start = planner.resolve(self.config.starting, tps, "startingOffsets")
            end = planner.resolve(self.config.ending, tps, "endingOffsets")
        finally:
            planner.close()
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise KafkaConfigError(
                    "startingOffsets",
                    f"starts {tp.topic}-{tp.partition} at {start[tp]}, after its end offset {end[tp]}",
                )
            ranges.append(OffsetRange(tp, start[tp], end[tp]))
        return _input_partitions(self.config, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return _read(partition)


def batch_reader(options: Any, schema: StructType) -> DataSourceReader:
    config = parse_options(options)
    opts = SourceOptions(options)
    if "startingOffsets" not in opts and config.starting.kind == "latest":
        config = _replace_starting(config, OffsetSpec("earliest"))  # batch default: everything
    elif config.starting.kind == "latest" or _has(config.starting, LATEST):
        raise KafkaConfigError("startingOffsets", "cannot be latest (-1) for a batch query")
    return KafkaBatchReader(config)


def _has(spec: OffsetSpec, special: int) -> bool:
    return spec.kind == "offsets" and special in (spec.per_partition or {}).values()


def _replace_starting(config: SourceConfig, spec: OffsetSpec) -> SourceConfig:
    from dataclasses import replace

    return replace(config, starting=spec)


# -- streaming ---------------------------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("kafkakit")``: micro-batches of offset ranges.

    Planning methods run in one long-lived Python process per query, so the
    driver clients and the last offsets are kept between calls (but nothing
    here is needed for correctness after a restart: Spark's offset log is).
    """

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._planner: Planner | None = None
        self._initial: dict[str, dict[str, int]] | None = None
        self._last_end: PartitionOffsets | None = None
        self._last_latest: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow: nothing past this

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None  # live clients stay in the planning process
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.config)
        return self._planner

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 (Spark's name)
        if self._initial is None:  # Spark asks twice on a first run; "latest" must not move between
            planner = self.planner
            start = planner.resolve(self.config.starting, planner.partitions(), "startingOffsets")
            self._initial = to_dict(start)
        return self._initial

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        if _limits is None:
            raise NotYetSupportedError("read limits need pyspark >= 4.2")
        if self.config.max_offsets_per_trigger is None:
            return _limits.ReadAllAvailable()
        return _limits.ReadMaxRows(self.config.max_offsets_per_trigger)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, dict[str, int]]:  # noqa: N802
        """The end of the next micro-batch: the latest offsets, capped by the read limit.

        pyspark 4.0/4.1 call this without arguments: the start is then the last
        end this process returned and ``maxOffsetsPerTrigger`` applies to it.
        """
        if start is not None:
            begin = from_dict(start)
        elif self._last_end is not None:
            begin = dict(self._last_end)
        else:
            begin = from_dict(self.initialOffset())
        max_rows = self._max_rows(limit, start is None)
        planner = self.planner
        current = planner.partitions()
        new = [tp for tp in current if tp not in begin]
        begin.update(planner.earliest(new))  # partitions that appeared start at their earliest offset
        latest = planner.latest(current)
        if self._target is not None:
            latest = {tp: min(o, self._target[tp]) for tp, o in latest.items() if tp in self._target}
        # Never backwards: a partition that shrank, vanished or (AvailableNow) appeared after the
        # target was taken stays where it is.
        latest = {tp: max(latest.get(tp, o), o) for tp, o in begin.items()}
        self._last_latest = latest
        end = latest if max_rows is None else limit_offsets(begin, latest, max_rows)
        self._last_end = end
        return to_dict(end)

    def _max_rows(self, limit: Any, legacy: bool) -> int | None:
        if legacy or _limits is None:
            return self.config.max_offsets_per_trigger
        if isinstance(limit, _limits.ReadMaxRows):
            return int(limit.max_rows)
        if limit is None or isinstance(limit, _limits.ReadAllAvailable):
            return None
        raise NotYetSupportedError(
            f"the kafkakit source supports ReadMaxRows and ReadAllAvailable, not {limit!r}"
        )

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:  # noqa: N802
        return None if self._last_latest is None else to_dict(self._last_latest)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        planner = self.planner
        self._target = planner.latest(planner.partitions())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_dict(start), from_dict(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.planner.earliest(new))
        self._last_end = stop
        ranges = [OffsetRange(tp, min(begin[tp], o), o) for tp, o in stop.items()]
        return _input_partitions(self.config, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


if _limits is not None:

    class KafkaStreamReaderAvailableNow(KafkaStreamReader, _limits.SupportsTriggerAvailableNow):  # type: ignore[misc]
        """The stream reader with Trigger.AvailableNow (pyspark >= 4.2)."""


def stream_reader(options: Any, schema: StructType) -> DataSourceStreamReader:
    config = parse_options(options)
    if config.ending_given:
        raise KafkaConfigError("endingOffsets", "is for batch queries only (a stream has no end)")
    if _limits is not None:
        return KafkaStreamReaderAvailableNow(config)
    return KafkaStreamReader(config)
