"""Broker settings: one frozen dataclass, validated once at construction.

Keys are snake_case keyword arguments (``log_segment_bytes=...``); Kafka's
dotted names (``log.segment.bytes``) are accepted too, which is what the CLI's
``--config key=value`` passes.  Unknown keys and bad values raise
:class:`~kafkakit.errors.KafkaConfigError` naming the setting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kafkakit.errors import KafkaConfigError

MiB = 1024 * 1024
_LONG_MAX = 2**63 - 1
_DAY_MS = 24 * 3600 * 1000

# Kafka's own spellings whose snake_case form differs from ours.
_ALIASES = {
    "broker_id": "node_id",
    "log_flush_interval_messages": "log_flush_messages",
    "log_flush_interval_ms": "log_flush_ms",
    "log_roll_ms": "log_segment_ms",
    "log_retention_check_interval": "log_retention_check_interval_ms",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Every broker setting with Kafka's default."""

    node_id: int = 1
    cluster_id: str | None = None
    advertised_host: str | None = None
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 100 * MiB
    message_max_bytes: int = 1048588
    log_segment_bytes: int = 1024 * MiB
    log_segment_ms: int = 7 * _DAY_MS
    log_retention_ms: int = 7 * _DAY_MS
    log_retention_bytes: int = -1
    log_flush_messages: int = _LONG_MAX
    log_flush_ms: int = _LONG_MAX
    log_retention_check_interval_ms: int = 300_000
    # Kafka's default is 3000; a small delay lets a new group's first join finish fast.
    group_initial_rebalance_delay_ms: int = 100
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # Kafka's default is 50; one partition is plenty for a single node.
    offsets_topic_num_partitions: int = 1
    # The finalized ``transaction.version`` feature level advertised in ApiVersions (Kafka 4.x: 2).
    transaction_version: int = 2

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        _check_range("node_id", self.node_id, 0)
        _check_range("num_partitions", self.num_partitions, 1)
        if self.default_replication_factor != 1:
            raise KafkaConfigError("default_replication_factor", "a single-node broker only supports 1")
        _check_range("socket_request_max_bytes", self.socket_request_max_bytes, 1024, 2**31 - 1)
        _check_range("message_max_bytes", self.message_max_bytes, 0, 2**31 - 1)
        _check_range("log_segment_bytes", self.log_segment_bytes, 14, 2**31 - 1)
        _check_range("log_segment_ms", self.log_segment_ms, 1)
        _check_range("log_retention_ms", self.log_retention_ms, -1)
        _check_range("log_retention_bytes", self.log_retention_bytes, -1)
        _check_range("log_flush_messages", self.log_flush_messages, 1)
        _check_range("log_flush_ms", self.log_flush_ms, 0)
        _check_range("log_retention_check_interval_ms", self.log_retention_check_interval_ms, 1)
        _check_range("group_initial_rebalance_delay_ms", self.group_initial_rebalance_delay_ms, 0)
        _check_range("group_min_session_timeout_ms", self.group_min_session_timeout_ms, 0, 2**31 - 1)
        _check_range(
            "group_max_session_timeout_ms",
            self.group_max_session_timeout_ms,
            self.group_min_session_timeout_ms,
            2**31 - 1,
        )
        _check_range("offsets_topic_num_partitions", self.offsets_topic_num_partitions, 1, 2**31 - 1)
        _check_range("transaction_version", self.transaction_version, 0, 2)
        if self.cluster_id is not None and not self.cluster_id:
            raise KafkaConfigError("cluster_id", "must not be empty")

    @classmethod
    def from_kwargs(cls, **settings: Any) -> BrokerConfig:
        """Build from keyword settings, accepting Kafka's dotted names as well."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in settings.items():
            name = normalise_key(key)
            if name not in known:
                raise KafkaConfigError(key, "unknown broker setting")
            values[name] = value
        return cls(**values)

    @classmethod
    def from_strings(cls, pairs: dict[str, str]) -> BrokerConfig:
        """Build from ``key -> text`` pairs (the CLI's ``--config key=value``), converting types."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, text in pairs.items():
            name = normalise_key(key)
            if name not in types:
                raise KafkaConfigError(key, "unknown broker setting")
            values[name] = _parse(name, text, str(types[name]))
        return cls(**values)

    def overridden(self) -> set[str]:
        """Names of the settings that differ from Kafka's defaults (DescribeConfigs reports them as static)."""
        default = BrokerConfig()
        return {f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(default, f.name)}


def normalise_key(key: str) -> str:
    """``log.segment.bytes`` / ``log-segment-bytes`` -> ``log_segment_bytes`` (with Kafka's aliases)."""
    name = key.strip().replace(".", "_").replace("-", "_").lower()
    return _ALIASES.get(name, name)


def _check_type(name: str, value: Any, annotation: Any) -> None:
    text = str(annotation)
    if text == "bool":
        ok = isinstance(value, bool)
    elif text == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif text == "str | None":
        ok = value is None or isinstance(value, str)
    else:  # pragma: no cover - a new field type needs a branch here
        raise AssertionError(f"unhandled setting type {text} for {name}")
    if not ok:
        raise KafkaConfigError(name, f"expected {text}, got {type(value).__name__} {value!r}")


def _check_range(name: str, value: int, low: int, high: int = _LONG_MAX) -> None:
    if not low <= value <= high:
        raise KafkaConfigError(name, f"must be between {low} and {high}, got {value}")


def _parse(name: str, text: str, annotation: str) -> Any:
    if annotation == "bool":
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise KafkaConfigError(name, f"expected true or false, got {text!r}")
        return lowered == "true"
    if annotation == "int":
        try:
            return int(text.strip())
        except ValueError:
            raise KafkaConfigError(name, f"expected an integer, got {text!r}") from None
    return text
