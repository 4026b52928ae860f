"""The writing side of the ``kafkakit`` data source: ``df.write`` and ``df.writeStream``.

Input columns as in Spark's Kafka sink: ``value`` (required, binary or string),
``key`` (binary or string), ``topic`` (string; the ``topic`` option, when set,
overrides it, as in Spark), ``partition`` (int; null means "by key / sticky"),
``headers`` (array<struct<key string, value binary>>).  Other columns are ignored.

Two guarantees:

- default, at-least-once: each task produces its rows with an idempotent
  producer (acks=all), flushes and fails on any delivery error; Spark retries
  the task, so a retry may write rows again.
- ``exactlyOnce=true`` (with ``transactionalIdPrefix``): each task writes in a
  Kafka transaction that it prepares but does not end; the driver commits them
  all through the control topic protocol of :mod:`kafkakit.spark.two_phase`.

Writers use Spark's Arrow writer classes when the pyspark version has them
(``DataSourceArrowWriter`` 4.0+, ``DataSourceStreamArrowWriter`` 4.1+) and fall
back to row writers otherwise.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

import pyspark.sql.datasource as _ds
from kafkakit import KafkaConfigError, Producer
from kafkakit.spark import runtime
from kafkakit.spark.options import _RENAMED, SourceOptions
from kafkakit.spark.security import SecurityOptions
from kafkakit.spark.two_phase import (
    FAILPOINTS_ENV,
    PreparedWrite,
    TaskIds,
    TaskTransaction,
    TwoPhaseConfig,
    abort_batch,
    commit_batch,
    ensure_control_topic,
    failpoint,
)
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

if TYPE_CHECKING:
    import pyarrow as pa
    from kafkakit.producer import SendBatchFuture
    from pyspark.sql import Row

log = logging.getLogger(__name__)

#: Producer settings the sink sets itself in exactly-once mode.
_TRANSACTION_TIMEOUT = "kafka.transaction.timeout.ms"
#: Default transaction timeout for exactly-once writes: Kafka's default
#: transaction.max.timeout.ms, so a prepared transaction survives as long as the
#: broker allows while the driver commits (or restarts and rolls forward).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
_ROW_CHUNK = 10_000
_HEADER_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each Kafka field comes from in the input schema (column names, None when absent)."""

    value: str
    value_is_string: bool
    key: str | None = None
    key_is_string: bool = False
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


@dataclass(frozen=True, slots=True)
class SinkConfig:
    """Everything a write task needs (plain, picklable data)."""

    bootstrap_servers: str
    topic: str | None
    layout: Layout
    producer_settings: dict[str, Any] = field(default_factory=dict)
    two_phase: TwoPhaseConfig | None = None
    client_id: str = "kafkakit-spark"
    #: TLS/SASL options as strings; each producer builds its SSLContext from them.
    security: SecurityOptions = field(default_factory=SecurityOptions)


@dataclass(frozen=True, slots=True)
class KafkaCommitMessage(WriterCommitMessage):
    """A task's result: the rows it wrote and, in exactly-once mode, its prepared transaction."""

    partition: int
    attempt: int
    count: int
    prepared: PreparedWrite | None = None


# -- options and schema --------------------------------------------------------------------


def _types_by_name(schema: StructType) -> dict[str, tuple[str, DataType]]:
    # Spark resolves column names case-insensitively by default; so do we.
    return {f.name.lower(): (f.name, f.dataType) for f in schema.fields}


def _layout(schema: StructType, topic_option: str | None) -> Layout:
    columns = _types_by_name(schema)

    def column(name: str, *allowed: DataType) -> tuple[str, DataType] | None:
        found = columns.get(name)
        if found is None:
            return None
        if found[1] not in allowed:
            kinds = " or ".join(t.simpleString() for t in allowed)
            raise KafkaConfigError(
                name, f"column {found[0]!r} has type {found[1].simpleString()}; it must be {kinds}"
            )
        return found

    value = column("value", BinaryType(), StringType())
    if value is None:
        raise KafkaConfigError(
            "value", f"the input needs a 'value' column (binary or string); columns: {schema.names}"
        )
    key = column("key", BinaryType(), StringType())
    topic = column("topic", StringType())
    if topic is None and topic_option is None:
        raise KafkaConfigError("topic", "set the 'topic' option or give the input a 'topic' column (string)")
    partition = column("partition", IntegerType())
    headers = column("headers", _HEADER_TYPE)
    return Layout(
        value=value[0],
        value_is_string=isinstance(value[1], StringType),
        key=None if key is None else key[0],
        key_is_string=key is not None and isinstance(key[1], StringType),
        # The topic option overrides the column, as in Spark's Kafka sink.
        topic=None if topic is None or topic_option is not None else topic[0],
        partition=None if partition is None else partition[0],
        headers=None if headers is None else headers[0],
    )


def _producer_settings(opts: SourceOptions, exactly_once: bool) -> tuple[dict[str, Any], int]:
    """``kafka.*`` settings as Producer keywords (checked now), and the transaction timeout."""
    settings = opts.client_settings(Producer, skip=[_TRANSACTION_TIMEOUT])
    timeout = opts.int(_TRANSACTION_TIMEOUT, DEFAULT_TRANSACTION_TIMEOUT_MS, minimum=1)
    assert timeout is not None
    settings.setdefault("acks", "all")
    probe: dict[str, Any] = (
        {"transactional_id": "probe", "transaction_timeout_ms": timeout} if exactly_once else {}
    )
    try:
        Producer(bootstrap_servers=opts.bootstrap_servers(), **settings, **probe)
    except KafkaConfigError as exc:
        raise KafkaConfigError(_option_of(exc.setting), str(exc).split(": ", 1)[-1]) from exc
    return settings, timeout


def _option_of(keyword: str) -> str:
    """The data source option that sets Producer keyword ``keyword``."""
    renamed = {v: k for k, v in _RENAMED.items()}
    if keyword == "transactional_id":
        return "transactionalIdPrefix"
    if keyword == "transaction_timeout_ms":
        return _TRANSACTION_TIMEOUT
    return "kafka." + renamed.get(keyword, keyword.replace("_", "."))


def sink_config(options: Mapping[str, str], schema: StructType) -> SinkConfig:
    """Check options and input schema up front; errors name the option or column."""
    opts = SourceOptions(options)
    bootstrap = opts.bootstrap_servers()
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaConfigError("topic", "must not be empty")
    topic = None if topic is None else topic.strip()
    layout = _layout(schema, topic)
    exactly_once = opts.bool("exactlyOnce", False)
    security = opts.security()
    settings, timeout = _producer_settings(opts, exactly_once)
    client_id = str(settings.pop("client_id", "kafkakit-spark"))
    two_phase = None
    if exactly_once:
        prefix = opts.require("transactionalIdPrefix")
        control = opts.get("exactlyOnce.controlTopic") or f"kafkakit-spark-control-{prefix}"
        two_phase = TwoPhaseConfig(
            bootstrap_servers=bootstrap,
            prefix=prefix,
            control_topic=control.strip(),
            transaction_timeout_ms=timeout,
            producer_settings={k: v for k, v in settings.items() if k != "acks"},
            client_id=client_id,
            security=security,
        )
    elif "transactionalIdPrefix" in opts or "exactlyOnce.controlTopic" in opts:
        raise KafkaConfigError(
            "exactlyOnce", "transactionalIdPrefix/exactlyOnce.controlTopic need exactlyOnce=true"
        )
    return SinkConfig(bootstrap, topic, layout, settings, two_phase, client_id, security)


_ensured: set[tuple[str, str]] = set()
_ensured_lock = threading.Lock()


def _ensure_control_topic(config: SinkConfig) -> None:
    """Create the control topic once per process (writers are created per query and per commit)."""
    tp = config.two_phase
    if tp is None:
        return
    key = (tp.bootstrap_servers, tp.control_topic)
    with _ensured_lock:
        if key in _ensured:
            return
    runtime.run(ensure_control_topic(tp))
    with _ensured_lock:
        _ensured.add(key)


# -- rows to Kafka records -------------------------------------------------------------------


@dataclass(slots=True)
class Chunk:
    """Parallel columns of records to send (None lists: the column is absent)."""

    values: list[bytes | None]
    keys: list[bytes | None] | None = None
    topics: list[str | None] | None = None
    partitions: list[int | None] | None = None
    headers: list[list[tuple[str, bytes | None]] | None] | None = None


def arrow_chunk(batch: pa.RecordBatch, layout: Layout) -> Chunk:
    """One Arrow batch as parallel lists for ``send_batch``.

    Columns that say nothing are left out instead of becoming a list of Nones
    (an all-null key, partition or header column: ``send_batch`` and
    :func:`_groups` would otherwise look at every row to find that out).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def present(name: str | None) -> pa.Array | None:
        if name is None:
            return None
        column = batch.column(name)
        return None if column.null_count == len(column) else column

    def binary(column: pa.Array, is_string: bool) -> list[bytes | None]:
        if is_string:  # utf-8 bytes as they are: the cast only relabels the buffers
            column = pc.cast(column, pa.binary())
        values: list[bytes | None] = column.to_pylist()
        return values

    chunk = Chunk(binary(batch.column(layout.value), layout.value_is_string))
    keys = present(layout.key)
    if keys is not None:
        chunk.keys = binary(keys, layout.key_is_string)
    if layout.topic is not None:
        chunk.topics = batch.column(layout.topic).to_pylist()
    partitions = present(layout.partition)
    if partitions is not None:
        chunk.partitions = partitions.to_pylist()
    headers = present(layout.headers)
    if headers is not None and pc.max(pc.list_value_length(headers)).as_py():
        chunk.headers = [
            None if hs is None else [_header(h["key"], h["value"]) for h in hs] for hs in headers.to_pylist()
        ]
    return chunk


def _header(key: str | None, value: bytes | None) -> tuple[str, bytes | None]:
    if key is None:
        raise ValueError("headers: a header key is null (Kafka header keys are non-null strings)")
    return key, value


def _as_bytes(value: Any, is_string: bool) -> bytes | None:
    if value is None:
        return None
    return value.encode() if is_string else bytes(value)


def row_chunks(rows: Iterator[Row], layout: Layout) -> Iterator[Chunk]:
    """The row writers' path (pyspark without the Arrow writer classes)."""
    while True:
        block = list(islice(rows, _ROW_CHUNK))
        if not block:
            return
        chunk = Chunk([_as_bytes(r[layout.value], layout.value_is_string) for r in block])
        if layout.key is not None:
            chunk.keys = [_as_bytes(r[layout.key], layout.key_is_string) for r in block]
        if layout.topic is not None:
            chunk.topics = [r[layout.topic] for r in block]
        if layout.partition is not None:
            chunk.partitions = [r[layout.partition] for r in block]
        if layout.headers is not None:
            chunk.headers = [
                None if hs is None else [_header(h["key"], _as_bytes(h["value"], False)) for h in hs]
                for r in block
                for hs in (r[layout.headers],)
            ]
        yield chunk


def _groups(chunk: Chunk, default_topic: str | None) -> Iterable[tuple[str, int | None, list[int] | None]]:
    """(topic, partition, row positions) groups; positions None means "every row"."""
    topics = chunk.topics
    partitions = chunk.partitions
    if partitions is not None and partitions.count(None) == len(partitions):
        partitions = None  # "by key / sticky" for every row
    if partitions is None and topics and topics.count(topics[0]) == len(topics) and topics[0] is not None:
        default_topic, topics = topics[0], None  # one topic: no per-row grouping (list.count runs in C)
    if topics is None and partitions is None:
        assert default_topic is not None
        yield default_topic, None, None
        return
    groups: dict[tuple[str, int | None], list[int]] = {}
    for i in range(len(chunk.values)):
        topic = default_topic if topics is None else topics[i]
        if topic is None:
            raise ValueError(
                "topic: a row has a null 'topic' column; set the 'topic' option for a default topic"
            )
        groups.setdefault((topic, None if partitions is None else partitions[i]), []).append(i)
    for (topic, partition), positions in groups.items():
        yield topic, partition, positions


def _pick(items: Sequence[Any] | None, positions: list[int] | None) -> Any:
    if items is None or positions is None:
        return items
    return [items[i] for i in positions]


async def send_chunk(producer: Producer, chunk: Chunk, default_topic: str | None) -> list[SendBatchFuture]:
    """Queue a chunk's records (waits only for buffer room); the futures say how delivery went."""
    futures = []
    for topic, partition, positions in _groups(chunk, default_topic):
        futures.append(
            await producer.send_batch(
                topic,
                _pick(chunk.values, positions),
                keys=_pick(chunk.keys, positions),
                partition=partition,
                headers=_pick(chunk.headers, positions),
            )
        )
    return futures


async def _settle(futures: list[SendBatchFuture], *, wait: bool) -> list[SendBatchFuture]:
    """Raise the first delivery error among ``futures``; returns those still pending."""
    if wait:
        for future in futures:
            await future
        return []
    pending = []
    for future in futures:
        if future.done():
            await future  # raises a delivery error
        else:
            pending.append(future)
    return pending


# -- the write task ------------------------------------------------------------------------------


def _task() -> tuple[int, int, str | None, int | None]:
    """(partition id, attempt number, streaming query id, streaming batch id) of this task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("kafkakit sink: write() must run inside a Spark task")
    query = ctx.getLocalProperty("sql.streaming.queryId")
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), ctx.attemptNumber(), query, None if batch is None else int(batch)


def write_task(config: SinkConfig, chunks: Iterator[Chunk], scope: str | None) -> KafkaCommitMessage:
    """Write one task's rows; ``scope`` is the batch job id (None: the streaming query id)."""
    partition, attempt, query, batch = _task()
    if config.two_phase is None:
        count = _write_at_least_once(config, chunks, batch, partition, attempt)
        return KafkaCommitMessage(partition, attempt, count)
    if scope is None:
        if query is None or batch is None:
            raise RuntimeError("kafkakit sink: a streaming write task without a query or batch id")
        ids = TaskIds(query, batch, partition, attempt)
    else:
        ids = TaskIds(scope, 0, partition, attempt)
    prepared = _write_exactly_once(config, config.two_phase, ids, chunks)
    return KafkaCommitMessage(partition, attempt, prepared.count, prepared)


def _produce(
    producer: Producer, config: SinkConfig, chunks: Iterator[Chunk], where: tuple[int | None, int, int]
) -> int:
    """Send every chunk; the task thread reads the next chunk while the loop delivers."""
    count = 0
    pending: list[SendBatchFuture] = []
    for chunk in chunks:
        futures = runtime.run(send_chunk(producer, chunk, config.topic))
        pending = runtime.run(_settle(pending + futures, wait=False))
        if count == 0 and os.environ.get(FAILPOINTS_ENV):
            runtime.run(_settle(pending, wait=True))  # rows really on the broker before the failpoint
            failpoint("write.after_rows", *where)
        count += len(chunk.values)
    runtime.run(_settle(pending, wait=True))
    return count


# One started idempotent Producer per worker process and sink settings, kept between tasks as
# Spark's own Kafka sink keeps its producers: a task then pays no connection, metadata or
# InitProducerId round trips.  A producer that saw an error is stopped and forgotten.
_producers: dict[tuple[Any, ...], Producer] = {}
_producers_lock = threading.Lock()


def _producer_key(config: SinkConfig) -> tuple[Any, ...]:
    settings = tuple(sorted((k, repr(v)) for k, v in config.producer_settings.items()))
    security = tuple(sorted(config.security.settings.items()))
    return (os.getpid(), config.bootstrap_servers, config.client_id, settings, security)


def _shared_producer(config: SinkConfig) -> tuple[tuple[Any, ...], Producer]:
    key = _producer_key(config)
    with _producers_lock:
        producer = _producers.pop(key, None)  # taken: a concurrent task of this process makes its own
    if producer is None:
        producer = Producer(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            **config.producer_settings,
            **config.security.client_kwargs(),
        )
        runtime.run(producer.start())
    return key, producer


def _give_back(key: tuple[Any, ...], producer: Producer) -> None:
    with _producers_lock:
        spare = _producers.setdefault(key, producer)
    if spare is not producer:  # another task's producer is already kept
        runtime.run(producer.stop())


async def _stop_kept_producers() -> None:
    with _producers_lock:
        kept = list(_producers.values())
        _producers.clear()
    for producer in kept:
        await producer.stop()


runtime.at_exit(_stop_kept_producers)


def _stop_quietly(producer: Producer) -> None:
    try:
        runtime.run(producer.stop())
    except Exception as exc:
        log.warning("stopping the failed task's producer failed: %s", exc)


def _write_at_least_once(
    config: SinkConfig, chunks: Iterator[Chunk], batch: int | None, partition: int, attempt: int
) -> int:
    key, producer = _shared_producer(config)
    try:
        count = _produce(producer, config, chunks, (batch, partition, attempt))
    except BaseException:
        _stop_quietly(producer)  # the task's error is the one to report
        raise
    _give_back(key, producer)  # every record was delivered (_produce waited for them)
    return count


def _write_exactly_once(
    config: SinkConfig, two_phase: TwoPhaseConfig, ids: TaskIds, chunks: Iterator[Chunk]
) -> PreparedWrite:
    txn = TaskTransaction(two_phase, ids)
    # The transaction starts (control topic read, InitProducerId, marker) on the loop while
    # this thread reads Spark's first rows: the task's start-up overlaps its input.
    starting = runtime.submit(txn.start())
    try:
        first = next(chunks, None)
        if not starting.result():
            for _ in chunks:  # consume Spark's input; the rows are already in decided transactions
                pass
            return txn.skipped()
        rows = chunks if first is None else chain((first,), chunks)
        count = _produce(txn.producer, config, rows, (ids.batch, ids.partition, ids.attempt))
        return runtime.run(txn.prepare(count))
    except BaseException:
        concurrent.futures.wait([starting])  # abort only once start() has finished, whatever its outcome
        runtime.run(txn.abort())
        raise


def _prepared(messages: Sequence[WriterCommitMessage | None]) -> list[PreparedWrite]:
    return [m.prepared for m in messages if isinstance(m, KafkaCommitMessage) and m.prepared is not None]


def _scope_of(writes: Sequence[PreparedWrite]) -> str | None:
    scopes = {w.task.scope for w in writes}
    if len(scopes) > 1:
        raise RuntimeError(f"kafkakit sink: commit messages of several queries: {sorted(scopes)}")
    return next(iter(scopes), None)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.count for m in messages if isinstance(m, KafkaCommitMessage))


# -- Spark's writer classes ---------------------------------------------------------------------


class _Writer:
    """Shared by the batch and streaming writers; ``scope`` is set for batch jobs only."""

    def __init__(self, config: SinkConfig, scope: str | None) -> None:
        self.config = config
        self.scope = scope

    def _commit(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> None:
        two_phase = self.config.two_phase
        if two_phase is None:
            log.info("batch %s: %d records written (at-least-once)", batch, _total(messages))
            return
        writes = _prepared(messages)
        scope = self.scope or _scope_of(writes)
        if scope is None:
            return  # no task ran: nothing was written
        runtime.run(commit_batch(two_phase, scope, batch, writes))

    def _abort(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> None:
        two_phase = self.config.two_phase
        if two_phase is None:
            return  # at-least-once: what the tasks wrote stays (Spark re-runs the batch)
        writes = _prepared(messages)
        runtime.run(abort_batch(two_phase, self.scope or _scope_of(writes), batch, writes))


class KafkaBatchRowWriter(_Writer, DataSourceWriter):
    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_task(self.config, row_chunks(iterator, self.config.layout), self.scope)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self._commit(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self._abort(messages, 0)


class KafkaStreamRowWriter(_Writer, DataSourceStreamWriter):
    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return write_task(self.config, row_chunks(iterator, self.config.layout), None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        self._commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        self._abort(messages, batchId)


def _arrow_chunks(batches: Iterator[pa.RecordBatch], layout: Layout) -> Iterator[Chunk]:
    for batch in batches:
        if batch.num_rows:
            yield arrow_chunk(batch, layout)


_BATCH_WRITER: type[DataSourceWriter] = KafkaBatchRowWriter
_STREAM_WRITER: type[DataSourceStreamWriter] = KafkaStreamRowWriter

if hasattr(_ds, "DataSourceArrowWriter"):

    class KafkaBatchArrowWriter(KafkaBatchRowWriter, _ds.DataSourceArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:  # type: ignore[override]
            return write_task(self.config, _arrow_chunks(iterator, self.config.layout), self.scope)

    _BATCH_WRITER = KafkaBatchArrowWriter

if hasattr(_ds, "DataSourceStreamArrowWriter"):

    class KafkaStreamArrowWriter(KafkaStreamRowWriter, _ds.DataSourceStreamArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:  # type: ignore[override]
            return write_task(self.config, _arrow_chunks(iterator, self.config.layout), None)

    _STREAM_WRITER = KafkaStreamArrowWriter


def batch_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceWriter:
    """``df.write.format("kafkakit")``: at-least-once, or one exactly-once job (its own scope).

    ``overwrite`` (mode "overwrite") appends, as Spark's Kafka sink does: a topic
    cannot be truncated.
    """
    config = sink_config(options, schema)
    _ensure_control_topic(config)
    # A job-unique scope: this writer object is pickled to the tasks and to the commit.
    return _BATCH_WRITER(config, f"job-{uuid.uuid4()}")  # type: ignore[call-arg]


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
    """``df.writeStream.format("kafkakit")``; ``overwrite`` (complete mode) re-sends the whole result each batch."""
    config = sink_config(options, schema)
    _ensure_control_topic(config)
    return _STREAM_WRITER(config, None)  # type: ignore[call-arg]
