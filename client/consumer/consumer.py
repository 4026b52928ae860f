"""The public consumer: consumer groups or manual assignment, positions, prefetching reads.

Method names follow aiokafka's ``AIOKafkaConsumer``. With a ``group_id``,
``subscribe()`` (or topics given to the constructor) lets the group share the
partitions (see :mod:`kafkakit.consumer.group`); ``assign()`` reads chosen
partitions and may still commit offsets for the group.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeAlias

from kafkakit.cluster import Cluster
from kafkakit.config import INT32_MAX, check_int
from kafkakit.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigError,
    KafkaError,
)
from kafkakit.metrics import Metrics, NetworkMetrics, metrics_enabled
from kafkakit.net.security import OAuthTokenProvider, SecurityConfig
from kafkakit.protocol.framing import ApiKey, request_class, response_class
from kafkakit.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

from .fetcher import Deserializer, Fetcher, FetcherConfig
from .group import GroupCoordinator, GroupMetadata
from .group_config import group_config_from_settings
from .instrumentation import ConsumeHook, run_consume_hooks
from .instrumentation import attach as attach_metrics
from .offsets import EARLIEST, LATEST, READ_COMMITTED, READ_UNCOMMITTED, list_offsets
from .partition_state import PartitionState
from .range_reader import FetchedRange, RangeSettings, read_range
from .subscription import ConsumerRebalanceListener, SubscriptionState

Record: TypeAlias = ConsumerRecord[Any, Any]
log = logging.getLogger(__name__)

_RESET_POLICIES = ("earliest", "latest", "none")
_ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
_NEEDS_GROUP = "needs a group_id (a consumer without one can only assign() partitions)"


def _check_int(setting: str, value: Any, minimum: int, maximum: int = INT32_MAX) -> int:
    return check_int(setting, value, minimum, maximum)


def _check_deserializer(setting: str, value: Any) -> Deserializer | None:
    if value is not None and not callable(value):
        raise KafkaConfigError(setting, f"must be callable or None, got {value!r}")
    return value  # type: ignore[no-any-return]


def _check_group_id(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise KafkaConfigError("group_id", f"must be a non-empty string or None, got {value!r}")
    return value  # type: ignore[no-any-return]


def _check_listener(listener: Any) -> ConsumerRebalanceListener | None:
    if listener is None or isinstance(listener, ConsumerRebalanceListener):
        return listener
    if callable(getattr(listener, "on_partitions_revoked", None)) and callable(
        getattr(listener, "on_partitions_assigned", None)
    ):
        return listener  # type: ignore[no-any-return]  # duck-typed listener
    raise TypeError(
        f"listener must be a ConsumerRebalanceListener (or have on_partitions_revoked/on_partitions_assigned), "
        f"got {listener!r}"
    )


class Consumer:
    """An asyncio Kafka consumer: a member of a consumer group, or a reader of assigned partitions.

    ``getmany`` is the fast path: a background fetcher keeps the next Fetch for
    every broker in flight while the application works, and records are decoded
    only when handed out. Use it as ``async with Consumer(...) as consumer:``.

    Group settings (see docs/consumer.md, "Consumer groups"): ``group_id``,
    ``group_instance_id`` (static membership), ``partition_assignment_strategy``
    (default cooperative-sticky, then range), ``session_timeout_ms``,
    ``heartbeat_interval_ms``, ``rebalance_timeout_ms`` (default
    ``max_poll_interval_ms``), ``max_poll_interval_ms``, ``enable_auto_commit``,
    ``auto_commit_interval_ms`` and ``leave_group_on_close`` (default: True for
    dynamic members, False for static ones).

    ``group_protocol="consumer"`` joins with KIP-848's protocol (the broker
    assigns, no stop-the-world rebalance; docs/groups.md), with
    ``group_remote_assignor`` (None: the broker's default, ``"uniform"`` or
    ``"range"``); the classic-only settings ``partition_assignment_strategy``,
    ``session_timeout_ms`` and ``heartbeat_interval_ms`` are refused with it.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str | Iterable[str] = "localhost:9092",
        client_id: str = "kafkakit",
        group_id: str | None = None,
        group_instance_id: str | None = None,
        partition_assignment_strategy: Any = None,
        session_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        rebalance_timeout_ms: int | None = None,
        max_poll_interval_ms: int = 300000,
        leave_group_on_close: bool | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        request_timeout_ms: int = 40000,
        default_api_timeout_ms: int = 60000,
        retry_backoff_ms: int = 100,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        check_crcs: bool = True,
        metadata_max_age_ms: int = 300000,
        isolation_level: str = "read_uncommitted",
        max_poll_records: int | None = None,
        allow_auto_create_topics: bool = True,
        connections_max_idle_ms: int = 540000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: OAuthTokenProvider | None = None,
        sasl_oauth_extensions: Mapping[str, str] | None = None,
    ) -> None:
        group_id = _check_group_id(group_id)
        if topics and group_id is None:
            raise KafkaConfigError("group_id", f"subscribing to {list(topics)} {_NEEDS_GROUP}")
        if not isinstance(client_id, str):
            raise KafkaConfigError("client_id", f"must be a string, got {client_id!r}")
        fetch_max_wait_ms = _check_int("fetch_max_wait_ms", fetch_max_wait_ms, 0)
        request_timeout_ms = _check_int("request_timeout_ms", request_timeout_ms, 1)
        if request_timeout_ms <= fetch_max_wait_ms:
            raise KafkaConfigError("request_timeout_ms", "must be larger than fetch_max_wait_ms")
        default_api_timeout_ms = _check_int("default_api_timeout_ms", default_api_timeout_ms, 1)
        if auto_offset_reset not in _RESET_POLICIES:
            raise KafkaConfigError(
                "auto_offset_reset", f"must be one of {_RESET_POLICIES}, got {auto_offset_reset!r}"
            )
        if isolation_level not in _ISOLATION_LEVELS:
            raise KafkaConfigError(
                "isolation_level", f"must be one of {tuple(_ISOLATION_LEVELS)}, got {isolation_level!r}"
            )
        if max_poll_records is not None:
            _check_int("max_poll_records", max_poll_records, 1)
        _check_int("auto_commit_interval_ms", auto_commit_interval_ms, 0)
        self._group_config = group_config_from_settings(
            group_id,
            group_instance_id,
            partition_assignment_strategy,
            session_timeout_ms,
            heartbeat_interval_ms,
            rebalance_timeout_ms,
            max_poll_interval_ms,
            bool(enable_auto_commit),
            auto_commit_interval_ms,
            leave_group_on_close,
            request_timeout_ms,
            retry_backoff_ms,
            default_api_timeout_ms,
            group_protocol,
            group_remote_assignor,
        )
        self._isolation_level = _ISOLATION_LEVELS[isolation_level]
        self._request_timeout = request_timeout_ms / 1000
        self._max_poll_records = max_poll_records
        self._metrics = Metrics() if metrics_enabled() else None
        self._consume_hooks: list[ConsumeHook] = []
        self._cluster = Cluster(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            connections_max_idle_ms=_check_int("connections_max_idle_ms", connections_max_idle_ms, 1),
            metadata_max_age_ms=_check_int("metadata_max_age_ms", metadata_max_age_ms, 0),
            retry_backoff_ms=_check_int("retry_backoff_ms", retry_backoff_ms, 0),
            allow_auto_create_topics=allow_auto_create_topics,
            security=SecurityConfig(
                security_protocol=security_protocol,
                ssl_context=ssl_context,
                sasl_mechanism=sasl_mechanism,
                sasl_plain_username=sasl_plain_username,
                sasl_plain_password=sasl_plain_password,
                sasl_oauth_token_provider=sasl_oauth_token_provider,
                sasl_oauth_extensions=sasl_oauth_extensions or {},
            ),
            network_metrics=None if self._metrics is None else NetworkMetrics(self._metrics),
        )
        self._fetcher = Fetcher(
            self._cluster,
            FetcherConfig(
                max_wait_ms=fetch_max_wait_ms,
                min_bytes=_check_int("fetch_min_bytes", fetch_min_bytes, 0),
                max_bytes=_check_int("fetch_max_bytes", fetch_max_bytes, 1),
                partition_max_bytes=_check_int("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
                isolation_level=self._isolation_level,
                auto_offset_reset=auto_offset_reset,
                check_crcs=bool(check_crcs),
                retry_backoff=retry_backoff_ms / 1000,
                request_timeout=request_timeout_ms / 1000,
                key_deserializer=_check_deserializer("key_deserializer", key_deserializer),
                value_deserializer=_check_deserializer("value_deserializer", value_deserializer),
            ),
        )
        self._range_settings = RangeSettings(
            isolation_level=self._isolation_level,
            max_wait_ms=fetch_max_wait_ms,
            max_bytes=fetch_max_bytes,
            partition_max_bytes=max_partition_fetch_bytes,
            check_crcs=bool(check_crcs),
            request_timeout=request_timeout_ms / 1000,
            retry_backoff=retry_backoff_ms / 1000,
        )
        self._subscription = SubscriptionState()
        self._group: GroupCoordinator | None = None
        if self._group_config is not None:
            self._group = GroupCoordinator(
                self._cluster, self._subscription, self._fetcher, self._group_config
            )
            self._fetcher.committed_lookup = self._group.committed_positions
        if self._metrics is not None:
            attach_metrics(
                self._metrics,
                self._fetcher,
                self._group,
                read_committed=self._isolation_level == READ_COMMITTED,
            )
        self._started = False
        self._stopping = False
        self._closed = False
        self._iterating: PartitionState | None = None  # async for: the partition of the last record
        if topics:
            self.subscribe(topics)

    # -- lifecycle -------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the background fetcher."""
        if self._closed:
            raise IllegalStateError("a stopped consumer cannot be restarted")
        if self._started:
            return
        await self._cluster.start()
        await self._load_codecs()
        self._fetcher.start()
        if self._group is not None:
            self._group.start()
        self._started = True

    async def _load_codecs(self) -> None:
        """Load the Fetch and ListOffsets schemas now, not inside the first ``getmany``.

        kio imports a schema module on first use: some 50 ms for these two,
        which would otherwise delay the first records. Best effort: a broker
        that cannot be reached now is handled by the fetcher later.
        """
        try:
            conn = await self._cluster.any_connection()
            for api_key in (ApiKey.FETCH, ApiKey.LIST_OFFSETS):
                version = conn.version(api_key)
                request_class(api_key, version)
                response_class(api_key, version)
        except KafkaError:
            pass

    async def stop(self, timeout: float = 30.0) -> None:
        """Leave the group (committing and revoking first, see ``leave_group_on_close``), stop
        fetching and close every connection; waiting calls raise ConsumerStoppedError.

        The group's goodbye (commit, listener, LeaveGroup) gets ``timeout`` seconds (Java's
        close() default: 30 s); past it, as when the cluster is unreachable, the consumer
        stops without it and the group notices through the session timeout.
        """
        if self._closed or self._stopping:
            return
        self._stopping = True
        if self._group is not None and self._started:
            # Before _closed: the listener may still commit() the partitions it gives up.
            try:
                async with asyncio.timeout(timeout):
                    await self._group.close()
            except TimeoutError:
                log.warning("consumer stopped without leaving its group: no answer within %ss", timeout)
                await self._group.abort()
        self._closed = True
        await self._fetcher.close()
        await self._cluster.close()

    async def _abort(self) -> None:
        """Stop like a crashed process would: no commit, no listener call, no LeaveGroup (tests)."""
        self._closed = True
        if self._group is not None:
            await self._group.abort()
        await self._fetcher.close()
        await self._cluster.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _check_running(self) -> None:
        if self._closed:
            raise ConsumerStoppedError("the consumer was stopped")
        if not self._started:
            raise IllegalStateError("call await consumer.start() first")

    # -- assignment ------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group for ``topics`` or every topic whose whole name matches ``pattern``.

        The group decides which partitions this consumer reads; ``listener``
        hears about every change. A pattern is re-evaluated on every metadata
        refresh (``metadata_max_age_ms``). Calling it again replaces the
        subscription (and rebalances).
        """
        if self._group is None:
            raise KafkaConfigError("group_id", f"subscribe() {_NEEDS_GROUP}")
        if isinstance(topics, (str, bytes)):
            raise TypeError("subscribe() takes a list of topics (or pattern=...), not a string")
        topics = list(topics)
        if bool(topics) == (pattern is not None):
            raise ValueError("subscribe() takes either topics or a pattern")
        checked = _check_listener(listener)
        if pattern is not None:
            self._subscription.subscribe_pattern(pattern, checked)
        else:
            self._subscription.subscribe_topics(topics, checked)
        self._group.subscription_changed()

    def unsubscribe(self) -> None:
        """Stop reading: give up the group's partitions (the listener's ``on_partitions_revoked``
        and the LeaveGroup run in the background) or drop a manual assignment."""
        if self._group is not None and self._subscription.group_managed:
            listener = self._subscription.listener
            self._subscription.unsubscribe()
            if self._started and not self._closed:
                self._group.unsubscribe(listener)
            self._group.subscription_changed()
            return
        self._subscription.unsubscribe()
        self._fetcher.assign([])

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` (no group rebalancing); those not assigned before start at
        their committed offset (with a ``group_id``), else at the reset policy."""
        if isinstance(partitions, (str, bytes, TopicPartition)):
            raise TypeError("assign() takes a list of TopicPartition")
        checked = []
        for tp in partitions:
            if (
                not isinstance(tp, tuple)
                or len(tp) != 2
                or not isinstance(tp[0], str)
                or not isinstance(tp[1], int)
            ):
                raise TypeError(f"assign() takes TopicPartition(topic, partition) items, got {tp!r}")
            if tp[1] < 0:
                raise ValueError(f"negative partition in {tp!r}")
            checked.append(TopicPartition(tp[0], tp[1]))
        self._subscription.assign_from_user()
        self._fetcher.assign(checked)

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned (by the group, or by ``assign()``)."""
        return self._fetcher.assignment()

    # -- group offsets -------------------------------------------------------

    def _require_group(self, what: str) -> GroupCoordinator:
        if self._group is None:
            raise KafkaConfigError("group_id", f"{what} needs a group_id")
        self._check_running()
        return self._group

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit offsets for the group and wait for the broker's answer.

        ``offsets`` maps partitions to the offset of the *next* record to read
        (``record.offset + 1``), as an int or ``OffsetAndMetadata(offset,
        metadata)``; None commits the current positions of every assigned
        partition (what ``getmany`` handed out). Raises
        :class:`~kafkakit.errors.RebalanceInProgressError` while the group
        rebalances (commit revoked partitions in ``on_partitions_revoked``),
        :class:`~kafkakit.errors.CommitFailedError` when this member's
        generation is over, and :class:`~kafkakit.errors.FencedInstanceIdError`
        when another consumer took over its ``group_instance_id``.
        """
        group = self._require_group("commit()")
        if offsets is None:
            checked = self._fetcher.committable(self._fetcher.assignment())
        else:
            checked = _check_offsets(offsets)
        await group.commit(checked)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for ``partition`` (None when there is none)."""
        found = await self.committed_offsets([partition])
        result = found.get(partition)
        return None if result is None else result.offset

    async def committed_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets with their metadata; partitions without one are left out."""
        group = self._require_group("committed()")
        tps = [TopicPartition(tp[0], tp[1]) for tp in partitions]
        return await group.fetch_committed(tps)

    def group_metadata(self) -> GroupMetadata:
        """group_id, generation_id, member_id and group_instance_id of this member right now
        (with ``group_protocol="consumer"``, generation_id is the member epoch)."""
        if self._group is None:
            raise KafkaConfigError("group_id", f"group_metadata() {_NEEDS_GROUP}")
        return self._group.group_metadata()

    def _state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self._fetcher.state(tp)
        except KeyError:
            raise IllegalStateError(f"partition {tp} is not assigned") from None

    def _states(self, tps: tuple[TopicPartition, ...]) -> list[PartitionState]:
        if tps:
            return [self._state(tp) for tp in tps]
        return list(self._fetcher.states())

    # -- positions -------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next; buffered records of it are dropped."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
        self._state(partition)
        self._fetcher.seek(partition, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek each of ``partitions`` (default: all assigned) to its log start offset."""
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek each of ``partitions`` (default: all assigned) to its end (the LSO under read_committed)."""
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, timestamp: int, partitions: tuple[TopicPartition, ...]) -> None:
        self._check_running()
        states = self._states(partitions)
        epochs = {s.tp: s.epoch for s in states}
        found = await self._list_offsets(dict.fromkeys(epochs, timestamp))
        for state in states:
            # A seek() made while we waited wins over this one.
            if state.epoch == epochs[state.tp] and self._fetcher.state(state.tp) is state:
                self._fetcher.seek(state.tp, found[state.tp].offset)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``getmany`` returns for ``partition``.

        Waits, as the Java consumer does, until the position is known and checked against the
        partition's current leader (KIP-320; this raises LogTruncationError where getmany would).
        """
        self._check_running()
        state = self._state(partition)
        while state.position is None or state.validating:
            await self._fetcher.ensure_positions([state])
            await self._fetcher.ensure_validated(state)
        return state.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark from the last fetch of ``partition`` (None before one)."""
        return self._state(partition).highwater

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The last stable offset from the last fetch of ``partition`` (None before one)."""
        return self._state(partition).last_stable_offset

    # -- offsets lookups ---------------------------------------------------

    async def _list_offsets(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, Any]:
        return await list_offsets(
            self._cluster, timestamps, isolation_level=self._isolation_level, timeout=self._request_timeout
        )

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset of each partition (assigned or not)."""
        self._check_running()
        found = await self._list_offsets(dict.fromkeys(partitions, EARLIEST))
        return {tp: r.offset for tp, r in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (the LSO under read_committed)."""
        self._check_running()
        found = await self._list_offsets(dict.fromkeys(partitions, LATEST))
        return {tp: r.offset for tp, r in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record at or after the timestamp (ms), or None if there is none."""
        self._check_running()
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be a non-negative integer (ms), got {ts!r}")
        found = await self._list_offsets(timestamps)
        return {
            tp: None if r.offset < 0 else OffsetAndTimestamp(r.offset, r.timestamp) for tp, r in found.items()
        }

    # -- flow control ------------------------------------------------------

    def fetch_range(
        self, partition: TopicPartition, start: int, end: int, *, wait_timeout_ms: int = 120000
    ) -> AsyncIterator[FetchedRange]:
        """The records of ``partition`` with offsets in ``[start, end)``, one Fetch response at a time.

        For readers that know their range (batch jobs, the Spark source): the
        fetches go straight to the leader, apart from this consumer's assignment,
        positions and prefetching, with the next request sent before each
        :class:`FetchedRange` is handed out. Each piece decodes as records
        (``piece.records()``) or numpy columns (``piece.columns()``), filtered by
        this consumer's ``isolation_level``. Offsets without visible records
        (markers, aborted or compacted records) are skipped. Raises
        OffsetOutOfRangeError when the range starts outside the log, and
        KafkaTimeoutError when no progress is possible for ``wait_timeout_ms``.
        """
        self._check_running()
        if start < 0 or end < start:
            raise ValueError(f"fetch_range needs 0 <= start <= end, got [{start}, {end})")
        return read_range(self._cluster, self._range_settings, partition, start, end, wait_timeout_ms / 1000)

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer metrics by name (``records-lag{topic=t,partition=0}``...): docs/metrics.md."""
        return self._metrics.snapshot() if self._metrics is not None else {}

    def add_consume_hook(self, hook: ConsumeHook) -> None:
        """Call ``hook(records)`` with the records each getmany() (per partition), getone() and
        ``async for`` step hands out (kafkakit.otel traces with it); costs nothing until added.
        """
        self._consume_hooks.append(hook)
        self._iterating = None  # async for's per-record fast path skips hooks: leave it

    def fetch_session_stats(self) -> dict[str, int]:
        """What this consumer's KIP-227 fetch sessions did: requests (full and incremental),
        partitions sent in them, and sessions restarted after an error (diagnostics)."""
        return self._fetcher.session_stats.as_dict()

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning and fetching records of ``partitions`` (buffered ones are kept)."""
        for tp in partitions:
            self._state(tp)
            self._fetcher.pause(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo :meth:`pause`."""
        for tp in partitions:
            self._state(tp)
            self._fetcher.resume(tp)

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions that are paused."""
        return {s.tp for s in self._fetcher.states() if s.paused}

    # -- metadata ----------------------------------------------------------

    async def topics(self) -> set[str]:
        """Every topic of the cluster, internal ones excluded."""
        self._check_running()
        response = await self._cluster.fetch_all_topics_metadata()
        return {
            t.name for t in response.topics if not int(t.error_code) and not getattr(t, "is_internal", False)
        }

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partition numbers of ``topic`` from cached metadata (None when unknown)."""
        parts = self._cluster.metadata.partitions_for(topic)
        return None if parts is None else set(parts)

    # -- reading -----------------------------------------------------------

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Record]]:
        """Buffered records by partition, waiting up to ``timeout_ms`` when none are buffered.

        ``max_records`` (default ``max_poll_records``) caps the total; without
        a cap each partition gives its next decoded piece (whole batches, about
        4,096 records), not everything buffered, so the records are still in
        the CPU cache when the application reads them. Raises a stored fetch
        error (e.g. OffsetOutOfRangeError with ``auto_offset_reset="none"``) once.
        """
        self._check_running()
        if max_records is None:
            max_records = self._max_poll_records
        elif max_records < 1:
            raise ValueError(f"max_records must be positive, got {max_records}")
        group = self._group
        if group is None:
            records = await self._getmany(partitions, timeout_ms, max_records)
        else:
            group.poll_started()
            try:
                records = await self._getmany(partitions, timeout_ms, max_records)
            finally:
                group.poll_ended()
        if self._consume_hooks:
            run_consume_hooks(self._consume_hooks, records.values())
        return records

    async def _getmany(
        self, partitions: tuple[TopicPartition, ...], timeout_ms: int, max_records: int | None
    ) -> dict[TopicPartition, list[Record]]:
        fetcher = self._fetcher
        if fetcher.has_in_flight():
            await asyncio.sleep(0)  # let a response that has arrived be read while we drain
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            states = self._states(partitions)
            fetcher.raise_pending_error(states)
            fetcher.clear_data_ready()
            records = fetcher.drain(states, max_records)
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return records
            await fetcher.wait_for_data(remaining)
            if fetcher.closed:
                raise ConsumerStoppedError("the consumer was stopped")
            self._raise_group_error()

    async def getone(self, *partitions: TopicPartition) -> Record:
        """The next record (from ``partitions`` if given), waiting as long as it takes."""
        self._check_running()
        group = self._group
        if group is None:
            record = await self._getone(partitions)
        else:
            group.poll_started()
            try:
                record = await self._getone(partitions)
            finally:
                group.poll_ended()
        if self._consume_hooks:
            run_consume_hooks(self._consume_hooks, ((record,),))
        return record

    async def _getone(self, partitions: tuple[TopicPartition, ...]) -> Record:
        fetcher = self._fetcher
        while True:
            states = self._states(partitions)
            fetcher.raise_pending_error(states)
            fetcher.clear_data_ready()
            records = fetcher.drain(states, 1)
            for batch in records.values():
                return batch[0]
            await fetcher.wait_for_data(None)
            if fetcher.closed:
                raise ConsumerStoppedError("the consumer was stopped")
            self._raise_group_error()

    def _raise_group_error(self) -> None:
        if self._group is not None and self._group.fatal_error is not None:
            raise self._group.fatal_error

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Record:
        # The rest of the piece getone() last decoded, record by record: no per-record
        # drain() or coroutine. Each miss goes through getone() (errors, group checks).
        state = self._iterating
        if state is not None:
            record = self._fetcher.next_decoded(state)
            if record is not None:
                if self._group is not None:
                    self._group.polled()
                return record
        try:
            record = await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None
        if self._consume_hooks:
            return record  # with hooks, every record comes through getone(), which runs them
        try:
            self._iterating = self._fetcher.state(TopicPartition(record.topic, record.partition))
        except KeyError:  # unassigned meanwhile
            self._iterating = None
        return record


def _check_offsets(
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    if not isinstance(offsets, Mapping):
        raise TypeError(f"commit() takes a dict of TopicPartition -> offset, got {offsets!r}")
    checked: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or not isinstance(tp[1], int)
        ):
            raise TypeError(f"commit() keys must be TopicPartition, got {tp!r}")
        epoch = None
        if isinstance(value, OffsetAndMetadata):
            offset, metadata, epoch = value.offset, value.metadata, value.leader_epoch
        else:
            offset, metadata = value, ""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset for {tp} must be a non-negative integer, got {offset!r}")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"commit metadata for {tp} must be a string, got {metadata!r}")
        checked[TopicPartition(tp[0], tp[1])] = OffsetAndMetadata(offset, metadata or "", epoch)
    return checked
