"""The controller's APIs on the wire: kio requests in, kio responses out.

:func:`controller_apis` builds the table a :class:`~kafkakit.broker.raft.RaftServer` serves
besides the quorum APIs: ``api_key -> (min_version, max_version, handler(version, request))``.
An inactive controller answers NOT_CONTROLLER where Kafka puts it: the top-level error of
BrokerRegistration, BrokerHeartbeat, AlterPartition and AllocateProducerIds, and each
topic's (or resource's) error of CreateTopics, DeleteTopics, CreatePartitions and
IncrementalAlterConfigs, and each creation's, filter's or user's error of CreateAcls,
DeleteAcls and AlterUserScramCredentials.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.broker.metadata import BrokerEndpoint
from kafkakit.broker.security.authorizer import InvalidAclError
from kafkakit.protocol.build import make_response
from kio.schema.errors import ErrorCode

from .api_types import (
    ConfigOp,
    ConfigResource,
    ControllerError,
    CreateTopicResult,
    IsrChange,
    NewPartitions,
    NewTopic,
)
from .quorum_controller import QuorumController
from .scram_control import ScramDeletion, ScramUpsertion

CREATE_TOPICS = 19
DELETE_TOPICS = 20
CREATE_PARTITIONS = 37
CREATE_ACLS = 30
DELETE_ACLS = 31
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_USER_SCRAM_CREDENTIALS = 51
ALTER_PARTITION = 56
BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
ALLOCATE_PRODUCER_IDS = 67

Handler = Callable[[int, Any], Awaitable[Any]]
ApiTable = dict[int, tuple[int, int, Handler]]
_ZERO_UUID = uuid.UUID(int=0)


def controller_apis(controller: QuorumController) -> ApiTable:
    """The controller's API table for ``controller``."""

    async def broker_registration(version: int, request: Any) -> Any:
        endpoints = [
            BrokerEndpoint(str(e.name), str(e.host), int(e.port), int(e.security_protocol))
            for e in request.listeners
        ]
        incarnation = request.incarnation_id or _ZERO_UUID
        try:
            epoch = await controller.register_broker(
                int(request.broker_id), str(request.cluster_id), incarnation, endpoints, request.rack
            )
        except ControllerError as exc:
            return make_response(
                BROKER_REGISTRATION, version, throttle_time=0, error_code=exc.code, broker_epoch=-1
            )
        return make_response(BROKER_REGISTRATION, version, throttle_time=0, error_code=0, broker_epoch=epoch)

    async def broker_heartbeat(version: int, request: Any) -> Any:
        try:
            reply = await controller.broker_heartbeat(
                int(request.broker_id),
                int(request.broker_epoch),
                int(request.current_metadata_offset),
                bool(request.want_fence),
                bool(request.want_shut_down),
            )
        except ControllerError as exc:
            return make_response(
                BROKER_HEARTBEAT,
                version,
                throttle_time=0,
                error_code=exc.code,
                is_caught_up=False,
                is_fenced=True,
                should_shut_down=False,
            )
        return make_response(
            BROKER_HEARTBEAT,
            version,
            throttle_time=0,
            error_code=0,
            is_caught_up=reply.is_caught_up,
            is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down,
        )

    async def alter_partition(version: int, request: Any) -> Any:
        changes = []
        for topic in request.topics:
            for p in topic.partitions:
                if version >= 3:
                    isr = [(int(b.broker_id), int(b.broker_epoch)) for b in p.new_isr_with_epochs]
                else:
                    isr = [(int(b), -1) for b in p.new_isr]
                changes.append(
                    IsrChange(
                        topic.topic_id or _ZERO_UUID,
                        int(p.partition_index),
                        int(p.leader_epoch),
                        int(p.partition_epoch),
                        isr,
                    )
                )
        try:
            results = await controller.alter_partition(
                int(request.broker_id), int(request.broker_epoch), changes
            )
        except ControllerError as exc:
            return make_response(ALTER_PARTITION, version, throttle_time=0, error_code=exc.code, topics=[])
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for r in results:
            topics.setdefault(r.topic_id, []).append(
                {
                    "partition_index": r.partition,
                    "error_code": r.error,
                    "leader_id": r.leader,
                    "leader_epoch": r.leader_epoch,
                    "isr": list(r.isr),
                    "leader_recovery_state": 0,
                    "partition_epoch": r.partition_epoch,
                }
            )
        return make_response(
            ALTER_PARTITION,
            version,
            throttle_time=0,
            error_code=0,
            topics=[{"topic_id": t, "partitions": parts} for t, parts in topics.items()],
        )

    async def allocate_producer_ids(version: int, request: Any) -> Any:
        try:
            start, size = await controller.allocate_producer_ids(
                int(request.broker_id), int(request.broker_epoch)
            )
        except ControllerError as exc:
            return make_response(
                ALLOCATE_PRODUCER_IDS, version, throttle_time=0, error_code=exc.code, producer_id_start=-1,
                producer_id_len=0,
            )  # fmt: skip
        return make_response(
            ALLOCATE_PRODUCER_IDS, version, throttle_time=0, error_code=0, producer_id_start=start,
            producer_id_len=size,
        )  # fmt: skip

    async def create_topics(version: int, request: Any) -> Any:
        topics = [
            NewTopic(
                str(t.name),
                int(t.num_partitions),
                int(t.replication_factor),
                {int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments},
                {str(c.name): c.value for c in t.configs},
            )
            for t in request.topics
        ]
        try:
            results = await controller.create_topics(topics, bool(request.validate_only))
        except ControllerError as exc:
            results = [CreateTopicResult(t.name, exc.code, exc.message) for t in topics]
        return make_response(
            CREATE_TOPICS, version, throttle_time=0, topics=[_created(r, version) for r in results]
        )

    async def delete_topics(version: int, request: Any) -> Any:
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        try:
            results = [
                {"name": r.name, "topic_id": r.topic_id, "error_code": r.error, "error_message": r.message}
                for r in await controller.delete_topics(wanted)
            ]
        except ControllerError as exc:
            results = [
                {
                    "name": name,
                    "topic_id": topic_id or _ZERO_UUID,
                    "error_code": exc.code,
                    "error_message": exc.message,
                }
                for name, topic_id in wanted
            ]
        return make_response(DELETE_TOPICS, version, throttle_time=0, responses=results)

    async def create_partitions(version: int, request: Any) -> Any:
        topics = [
            NewPartitions(
                str(t.name),
                int(t.count),
                None if t.assignments is None else [[int(b) for b in a.broker_ids] for a in t.assignments],
            )
            for t in request.topics
        ]
        try:
            results = [
                {"name": r.name, "error_code": r.error, "error_message": r.message}
                for r in await controller.create_partitions(topics, bool(request.validate_only))
            ]
        except ControllerError as exc:
            results = [{"name": t.name, "error_code": exc.code, "error_message": exc.message} for t in topics]
        return make_response(CREATE_PARTITIONS, version, throttle_time=0, results=results)

    async def incremental_alter_configs(version: int, request: Any) -> Any:
        resources = [
            ConfigResource(
                int(r.resource_type),
                str(r.resource_name),
                [ConfigOp(str(c.name), int(c.config_operation), c.value) for c in r.configs],
            )
            for r in request.resources
        ]
        try:
            results = [
                {
                    "error_code": r.error,
                    "error_message": r.message,
                    "resource_type": r.resource_type,
                    "resource_name": r.name,
                }
                for r in await controller.incremental_alter_configs(resources, bool(request.validate_only))
            ]
        except ControllerError as exc:
            results = [
                {
                    "error_code": exc.code,
                    "error_message": exc.message,
                    "resource_type": r.resource_type,
                    "resource_name": r.name,
                }
                for r in resources
            ]
        return make_response(INCREMENTAL_ALTER_CONFIGS, version, throttle_time=0, responses=results)

    async def create_acls(version: int, request: Any) -> Any:
        bindings = [_binding(c) for c in request.creations]
        try:
            results = [
                {"error_code": r.error, "error_message": r.message} for r in await controller.create_acls(bindings)
            ]
        except ControllerError as exc:
            results = [{"error_code": exc.code, "error_message": exc.message} for _ in bindings]
        return make_response(CREATE_ACLS, version, throttle_time=0, results=results)

    async def delete_acls(version: int, request: Any) -> Any:
        filters = [_acl_filter(f) for f in request.filters]
        try:
            results = [
                {
                    "error_code": r.error,
                    "error_message": r.message,
                    "matching_acls": [_matching_acl(b) for b in r.deleted],
                }
                for r in await controller.delete_acls(filters)
            ]
        except ControllerError as exc:
            results = [
                {"error_code": exc.code, "error_message": exc.message, "matching_acls": []} for _ in filters
            ]
        return make_response(DELETE_ACLS, version, throttle_time=0, filter_results=results)

    async def alter_user_scram_credentials(version: int, request: Any) -> Any:
        deletions = [ScramDeletion(str(d.name), int(d.mechanism)) for d in request.deletions]
        upsertions = [
            ScramUpsertion(str(u.name), int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
            for u in request.upsertions
        ]
        try:
            results = [
                {"user": r.user, "error_code": r.error, "error_message": r.message}
                for r in await controller.alter_user_scram_credentials(deletions, upsertions)
            ]
        except ControllerError as exc:
            users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
            results = [{"user": u, "error_code": exc.code, "error_message": exc.message} for u in users]
        return make_response(ALTER_USER_SCRAM_CREDENTIALS, version, throttle_time=0, results=results)

    return {
        CREATE_TOPICS: (2, 7, create_topics),
        DELETE_TOPICS: (1, 6, delete_topics),
        CREATE_PARTITIONS: (0, 3, create_partitions),
        INCREMENTAL_ALTER_CONFIGS: (0, 1, incremental_alter_configs),
        ALTER_PARTITION: (2, 3, alter_partition),
        BROKER_REGISTRATION: (0, 4, broker_registration),
        BROKER_HEARTBEAT: (0, 2, broker_heartbeat),
        ALLOCATE_PRODUCER_IDS: (0, 0, allocate_producer_ids),
        CREATE_ACLS: (1, 3, create_acls),
        DELETE_ACLS: (1, 3, delete_acls),
        ALTER_USER_SCRAM_CREDENTIALS: (0, 0, alter_user_scram_credentials),
    }


def _binding(creation: Any) -> AclBinding | InvalidAclError:
    """A CreateAcls creation as an AclBinding; InvalidAclError for a number Kafka does not define."""
    try:
        return AclBinding(
            ResourceType(int(creation.resource_type)),
            str(creation.resource_name),
            str(creation.principal),
            AclOperation(int(creation.operation)),
            AclPermissionType(int(creation.permission_type)),
            PatternType(int(creation.resource_pattern_type)),
            str(creation.host),
        )
    except ValueError as exc:
        return InvalidAclError(str(exc))


def _acl_filter(entry: Any) -> AclBindingFilter | InvalidAclError:
    """A DeleteAcls filter; InvalidAclError for a number Kafka does not define."""
    try:
        return AclBindingFilter(
            ResourceType(int(entry.resource_type_filter)),
            entry.resource_name_filter,
            PatternType(int(entry.pattern_type_filter)),
            entry.principal_filter,
            entry.host_filter,
            AclOperation(int(entry.operation)),
            AclPermissionType(int(entry.permission_type)),
        )
    except ValueError as exc:
        return InvalidAclError(str(exc))


def _matching_acl(binding: AclBinding) -> dict[str, Any]:
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission_type),
    }


def _created(result: CreateTopicResult, version: int) -> dict[str, Any]:
    """One CreatableTopicResult; configs (v5+) only on success, as Kafka sends them."""
    ok = result.error is ErrorCode.none
    configs = None
    if ok and version >= 5:
        configs = [
            {
                "name": c.name,
                "value": c.value,
                "read_only": c.read_only,
                "config_source": c.source,
                "is_sensitive": c.is_sensitive,
            }
            for c in result.configs
        ]
    return {
        "name": result.name,
        "topic_id": result.topic_id,
        "error_code": result.error,
        "error_message": result.message,
        "topic_config_error_code": 0,
        "num_partitions": result.num_partitions,
        "replication_factor": result.replication_factor,
        "configs": configs,
    }


def not_controller(response: Any) -> bool:
    """Whether a controller response says NOT_CONTROLLER (at the top or for any item)."""
    code = ErrorCode.not_controller
    if getattr(response, "error_code", None) == code:
        return True
    for name in ("topics", "responses", "results", "filter_results"):
        for item in getattr(response, name, None) or ():
            if getattr(item, "error_code", None) == code:
                return True
    return False


__all__ = ["ApiTable", "controller_apis", "not_controller"]
