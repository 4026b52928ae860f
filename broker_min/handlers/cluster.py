"""DescribeCluster (key 60) v0-1 and DescribeConfigs (key 32) v1-4 for TOPIC and BROKER resources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.handlers.configs import ConfigEntry, describe_broker_configs, describe_topic_configs
from kafkakit.broker.handlers.metadata import controller_id, live_brokers
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

DESCRIBE_CLUSTER = 60
DESCRIBE_CONFIGS = 32
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


async def handle_describe_cluster(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """The live brokers and the controller id (the same view Metadata gives, see metadata.py)."""
    cls = response_class(DESCRIBE_CLUSTER, header.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    brokers = tuple(
        make(broker_cls, broker_id=node_id, host=host, port=port, rack=rack)
        for node_id, host, port, rack in live_brokers(state)
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=getattr(request, "endpoint_type", 1),
        cluster_id=state.cluster_id,
        controller_id=controller_id(state),
        brokers=brokers,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


async def handle_describe_configs(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Effective configs (with sources) of each requested topic or broker."""
    cls = response_class(DESCRIBE_CONFIGS, header.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        code, message, entries = _resource_configs(state, resource.resource_type, resource.resource_name)
        keys = resource.configuration_keys
        if keys is not None:
            entries = [e for e in entries if e.name in keys]
        configs = tuple(_entry(entry_cls, e) for e in entries)
        results.append(
            make(
                result_cls,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _resource_configs(
    state: BrokerState, resource_type: int, name: str
) -> tuple[ErrorCode, str | None, list[ConfigEntry]]:
    if resource_type == TOPIC_RESOURCE:
        if not state.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed, "Authorization failed.", []
        info = state.topics.get(name)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist", []
        return ErrorCode.none, None, describe_topic_configs(state, info)
    if resource_type == BROKER_RESOURCE:
        if not state.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, "kafka-cluster"):
            return ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", []
        if name not in ("", str(state.node_id)):
            return ErrorCode.invalid_request, f"unknown broker {name!r}", []
        return ErrorCode.none, None, describe_broker_configs(state)
    return ErrorCode.invalid_request, f"resource type {resource_type} is not supported", []


def _entry(entry_cls: type, e: ConfigEntry) -> Any:
    return make(
        entry_cls,
        name=e.name,
        value=e.value,
        read_only=False,
        config_source=e.source,
        is_sensitive=False,
        synonyms=(),
        config_type=e.config_type,
        documentation=None,
    )


HANDLERS = (
    ApiHandler(DESCRIBE_CLUSTER, 0, 1, handle_describe_cluster),
    ApiHandler(DESCRIBE_CONFIGS, 1, 4, handle_describe_configs),
)
