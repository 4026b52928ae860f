"""The controller's settings, errors and request/result types (shared by every manager and rpc.py).

Plain data: what :class:`~kafkakit.broker.controller.QuorumController`'s methods take and
answer, and :class:`ControllerError`, which carries the Kafka error code to answer with.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kafkakit.broker.metadata import NO_LEADER, TOPIC_RESOURCE
from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The controller's settings, with Kafka's defaults."""

    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    broker_heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.ms
    producer_id_block_size: int = 1000  # ProducerIdManager's block size (not configurable in Kafka)


class ControllerError(Exception):
    """A request the controller refuses, with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class NotControllerError(ControllerError):
    """This node is not the active controller (NOT_CONTROLLER): ask the quorum leader."""

    def __init__(self, message: str = "this node is not the active controller") -> None:
        super().__init__(ErrorCode.not_controller, message)


# -- request and result shapes -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """What a BrokerHeartbeat answers."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


@dataclass(slots=True)
class NewTopic:
    """One topic of a CreateTopics request (-1 = the controller's default)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    #: Manual assignment: partition index -> replicas (then both counts must be -1).
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One effective topic config as CreateTopics v5+ reports it."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(slots=True)
class CreateTopicResult:
    """The answer for one topic of a CreateTopics request."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topic_id: uuid.UUID = uuid.UUID(int=0)
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[TopicConfig] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """The answer for one topic of a DeleteTopics request."""

    name: str | None
    topic_id: uuid.UUID
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """One topic of a CreatePartitions request: the new total ``count``."""

    name: str
    count: int
    #: Replicas of each new partition, in order (None: placed by the controller).
    assignments: list[list[int]] | None = None


@dataclass(frozen=True, slots=True)
class NamedResult:
    """An error (or none) for one named item: a CreatePartitions topic, a config resource."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    resource_type: int = TOPIC_RESOURCE


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One IncrementalAlterConfigs change: SET, DELETE, APPEND or SUBTRACT."""

    name: str
    op: int
    value: str | None


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """One resource of an IncrementalAlterConfigs request."""

    resource_type: int
    name: str
    ops: list[ConfigOp]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request (``new_isr``: (broker id, broker epoch or -1))."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    """The answer for one partition of an AlterPartition request."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


__all__ = [
    "ConfigOp",
    "ConfigResource",
    "ControllerError",
    "ControllerSettings",
    "CreateTopicResult",
    "DeleteTopicResult",
    "HeartbeatReply",
    "IsrChange",
    "IsrChangeResult",
    "NamedResult",
    "NewPartitions",
    "NewTopic",
    "NotControllerError",
    "TopicConfig",
]
