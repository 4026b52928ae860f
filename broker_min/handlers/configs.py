"""Effective topic and broker configs with their sources, for DescribeConfigs and CreateTopics v5+."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkakit.broker.config import SENSITIVE_SETTINGS, BrokerConfig

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState, TopicInfo

# Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's ConfigType values (DescribeConfigs v3+).
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7

# Topic config -> the broker setting that supplies its default.
_BROKER_SETTING = {
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_segment_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "flush.messages": "log_flush_messages",
    "flush.ms": "log_flush_ms",
    "max.message.bytes": "message_max_bytes",
}
_TOPIC_CONFIG_TYPES = {
    "segment.bytes": INT,
    "segment.ms": LONG,
    "retention.ms": LONG,
    "retention.bytes": LONG,
    "flush.messages": LONG,
    "flush.ms": LONG,
    "index.interval.bytes": INT,
    "segment.index.bytes": INT,
    "max.message.bytes": INT,
    "message.timestamp.type": STRING,
    "cleanup.policy": LIST,
}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: int
    config_type: int


def describe_topic_configs(state: BrokerState, info: TopicInfo) -> list[ConfigEntry]:
    """Every effective config of a topic: its overrides, then broker settings, then defaults."""
    effective = state.topic_log_config(info).to_topic_configs()
    broker_overrides = state.config.overridden()
    entries = []
    for name, value in sorted(effective.items()):
        if name in info.configs:
            source = DYNAMIC_TOPIC_CONFIG
        elif _BROKER_SETTING.get(name) in broker_overrides:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, _TOPIC_CONFIG_TYPES.get(name, STRING)))
    return entries


def describe_broker_configs(state: BrokerState) -> list[ConfigEntry]:
    """The broker's settings under Kafka's dotted names."""
    overrides = state.config.overridden()
    entries = []
    for f in dataclasses.fields(BrokerConfig):
        if f.name == "listener_settings":
            continue  # many settings under their own names, each holding secrets (JAAS passwords)
        value = getattr(state.config, f.name)
        if f.name in SENSITIVE_SETTINGS:
            value = None  # Kafka never reveals a password through DescribeConfigs
        if f.name == "cluster_id":
            value = state.cluster_id
        text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        kind = BOOLEAN if isinstance(value, bool) else LONG if isinstance(value, int) else STRING
        source = STATIC_BROKER_CONFIG if f.name in overrides else DEFAULT_CONFIG
        entries.append(ConfigEntry(_kafka_name(f.name), text, source, kind))
    return entries


def _kafka_name(setting: str) -> str:
    return {
        "log_flush_messages": "log.flush.interval.messages",
        "log_flush_ms": "log.flush.interval.ms",
        "log_segment_ms": "log.roll.ms",
    }.get(setting, setting.replace("_", "."))
