"""Effective topic and broker configs with their sources, for DescribeConfigs and CreateTopics v5+,
and IncrementalAlterConfigs (key 44) v0-1 for topics and share groups' configs (GROUP resources,
see :func:`kafkakit.broker.handlers.share_groups.alter_group_configs`).

In cluster mode a topic's configs live in the metadata image: the broker authorizes and
validates the change, then forwards it to the active controller, which writes the
ConfigRecords every node applies."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.config import SENSITIVE_SETTINGS, BrokerConfig
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.log.config import LogConfig
from kafkakit.errors import KafkaConfigError
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState, TopicInfo

INCREMENTAL_ALTER_CONFIGS = 44
#: Seconds a forwarding broker waits for the controller's change to reach its own image.
_PROPAGATION_WAIT = 5.0
_TOPIC_RESOURCE = 2
_GROUP_RESOURCE = 32
# Kafka's AlterConfigOp.OpType.
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3

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


async def handle_incremental_alter_configs(
    state: BrokerState, header: RequestHeaderInfo, request: Any
) -> Any:
    """Set, delete, append to or subtract from a topic's config overrides, applied to its live logs.

    Each resource is all-or-nothing: the new overrides are validated as a whole
    (as CreateTopics validates them) before anything is persisted.
    """
    cls = response_class(INCREMENTAL_ALTER_CONFIGS, header.api_version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    forward = []
    in_cluster = state.controller_channel is not None
    for resource in request.resources:
        # In cluster mode the broker checks (as validate_only) and the controller applies.
        code, message = _alter_resource(state, resource, bool(request.validate_only) or in_cluster)
        if in_cluster and code == ErrorCode.none and not request.validate_only:
            forward.append(resource)
            continue
        results.append(
            make(
                result_cls,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    if forward:
        results.extend(await _forward(state, request, forward, result_cls))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


async def _forward(state: BrokerState, request: Any, resources: list[Any], result_cls: type) -> list[Any]:
    """Cluster mode: the controller writes the topics' new configs; wait until this node's image
    has them (so that a DescribeConfigs here right after sees them)."""
    channel = state.controller_channel
    assert channel is not None
    try:
        answer = await channel.send(dataclasses.replace(request, resources=tuple(resources)), 30.0)
    except (TimeoutError, ConnectionError) as exc:
        return [
            make(result_cls, error_code=ErrorCode.request_timed_out, error_message=f"controller: {exc!r}",
                 resource_type=r.resource_type, resource_name=r.resource_name)  # fmt: skip
            for r in resources
        ]
    offset = getattr(state.image, "offset", -1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _PROPAGATION_WAIT
    while state.image is not None and state.image.offset <= offset and loop.time() < deadline:
        await asyncio.sleep(0.01)  # the controller's records reach this node's image
    return list(answer.responses)


def _alter_resource(state: BrokerState, resource: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    name = resource.resource_name
    if resource.resource_type == _GROUP_RESOURCE:  # share group configs (KIP-932)
        from kafkakit.broker.handlers.share_groups import alter_group_configs

        return alter_group_configs(state, resource, validate_only)
    if resource.resource_type != _TOPIC_RESOURCE:
        return ErrorCode.invalid_request, "broker_min alters topic configs only (broker settings are static)"
    if not state.allowed(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name):
        return ErrorCode.topic_authorization_failed, "Authorization failed."
    info = state.topics.get(name)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
    configs = dict(info.configs)
    effective = state.topic_log_config(info).to_topic_configs()
    for change in resource.configs:
        operation = int(change.config_operation)
        key, value = change.name, change.value
        if operation == _DELETE:
            configs.pop(key, None)
        elif value is None:
            return ErrorCode.invalid_request, f"config {key!r}: a value is required for operation {operation}"
        elif operation == _SET:
            configs[key] = value
        elif operation in (_APPEND, _SUBTRACT):
            if _TOPIC_CONFIG_TYPES.get(key) != LIST:
                return ErrorCode.invalid_config, f"config {key!r} is not a list: it cannot be appended to"
            items = [i for i in configs.get(key, effective.get(key, "")).split(",") if i]
            for item in (i for i in value.split(",") if i):
                if operation == _APPEND and item not in items:
                    items.append(item)
                elif operation == _SUBTRACT and item in items:
                    items.remove(item)
            configs[key] = ",".join(items)
        else:
            return ErrorCode.invalid_request, f"config {key!r}: unknown operation {operation}"
    try:
        log_config = LogConfig.from_topic_configs(configs, state.default_log_config)
    except KafkaConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    if not validate_only:
        info.configs = configs
        state.topics.add(info)  # rewrites the topic's registry file: the commit point
        state.logs.update_topic_config(name, log_config)
    return ErrorCode.none, None


HANDLERS = (ApiHandler(INCREMENTAL_ALTER_CONFIGS, 0, 1, handle_incremental_alter_configs),)
