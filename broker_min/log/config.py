"""Per-topic log settings, named and defaulted as Apache Kafka's topic configs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kafkakit.errors import KafkaConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
_WEEK_MS = 7 * 24 * 3600 * 1000
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

# Kafka topic config name -> LogConfig field.
_FIELD_BY_KEY = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}
_STRING_FIELDS = {"message_timestamp_type", "cleanup_policy"}
_FLOAT_FIELDS = {"min_cleanable_dirty_ratio"}
_DAY_MS = 24 * 3600 * 1000


@dataclass
class LogConfig:
    """How one partition log rolls, retains and flushes (Kafka topic config semantics).

    ``flush_messages``/``flush_ms`` of None leave flushing to the OS; Kafka's
    ``Long.MAX_VALUE`` is accepted as a synonym.  ``cleanup_policy`` is kept
    for DescribeConfigs but the log only implements "delete".  Other topic
    configs live in ``extra`` unchanged so that they round-trip.
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = _WEEK_MS
    retention_ms: int = _WEEK_MS  # -1 = keep forever
    retention_bytes: int = -1  # -1 = no size limit
    flush_messages: int | None = None
    flush_ms: int | None = None
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 << 20
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    delete_retention_ms: int = _DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flush_messages is not None and self.flush_messages >= LONG_MAX:
            self.flush_messages = None
        if self.flush_ms is not None and self.flush_ms >= LONG_MAX:
            self.flush_ms = None
        _check_range("segment.bytes", self.segment_bytes, 14, INT_MAX)
        _check_range("segment.ms", self.segment_ms, 1, LONG_MAX)
        _check_range("retention.ms", self.retention_ms, -1, LONG_MAX)
        _check_range("retention.bytes", self.retention_bytes, -1, LONG_MAX)
        if self.flush_messages is not None:
            _check_range("flush.messages", self.flush_messages, 1, LONG_MAX)
        if self.flush_ms is not None:
            _check_range("flush.ms", self.flush_ms, 0, LONG_MAX)
        _check_range("index.interval.bytes", self.index_interval_bytes, 0, INT_MAX)
        _check_range("segment.index.bytes", self.segment_index_bytes, 4, INT_MAX)
        _check_range("max.message.bytes", self.max_message_bytes, 0, INT_MAX)
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise KafkaConfigError(
                "message.timestamp.type",
                f"must be one of {', '.join(TIMESTAMP_TYPES)}, got {self.message_timestamp_type!r}",
            )
        policies = {p.strip() for p in self.cleanup_policy.split(",")}
        if not policies or not policies <= {"delete", "compact"}:
            raise KafkaConfigError(
                "cleanup.policy", f"must be delete, compact or both, got {self.cleanup_policy!r}"
            )
        _check_range("delete.retention.ms", self.delete_retention_ms, 0, LONG_MAX)
        _check_range("min.compaction.lag.ms", self.min_compaction_lag_ms, 0, LONG_MAX)
        _check_range("max.compaction.lag.ms", self.max_compaction_lag_ms, 1, LONG_MAX)
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise KafkaConfigError("min.cleanable.dirty.ratio", f"must be between 0 and 1, got {ratio!r}")
        self.min_cleanable_dirty_ratio = float(ratio)

    @property
    def compact(self) -> bool:
        """cleanup.policy includes "compact": the log cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy includes "delete": retention.ms / retention.bytes delete old segments."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """Segment age that forces a roll: a compacted log also rolls by max.compaction.lag.ms
        (Kafka's maxSegmentMs), so that no record stays in the uncleanable active segment longer."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps batches with its own clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_configs(cls, configs: dict[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Apply Kafka topic configs (``{"retention.ms": "60000", ...}``) over ``defaults``.

        Raises :class:`~kafkakit.errors.KafkaConfigError` naming the bad key.
        """
        base = defaults if defaults is not None else cls()
        values: dict[str, Any] = {}
        extra = dict(base.extra)
        for key, raw in configs.items():
            name = _FIELD_BY_KEY.get(key)
            if name is None:
                extra[key] = raw
            elif name in _STRING_FIELDS:
                values[name] = raw
            elif name in _FLOAT_FIELDS:
                values[name] = _parse_double(key, raw)
            else:
                values[name] = _parse_long(key, raw)
        return dataclasses.replace(base, extra=extra, **values)

    def to_topic_configs(self) -> dict[str, str]:
        """Every setting under its Kafka name, as strings (None flush settings as Long.MAX_VALUE)."""
        out: dict[str, str] = {}
        for key, name in _FIELD_BY_KEY.items():
            value = getattr(self, name)
            out[key] = str(LONG_MAX if value is None else value)
        out.update(self.extra)
        return out


def _parse_long(key: str, raw: str) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        raise KafkaConfigError(key, f"expected an integer, got {raw!r}") from None


def _parse_double(key: str, raw: str) -> float:
    try:
        return float(str(raw).strip())
    except ValueError:
        raise KafkaConfigError(key, f"expected a number, got {raw!r}") from None


def _check_range(key: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KafkaConfigError(key, f"expected an integer, got {value!r}")
    if not low <= value <= high:
        raise KafkaConfigError(key, f"must be between {low} and {high}, got {value}")
