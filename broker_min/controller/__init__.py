"""kafkakit.broker.controller: the KRaft controller (issue 13) and the broker's side of it.

- ``quorum_controller.py``: :class:`QuorumController`, active on the Raft leader; it turns
  broker registrations and heartbeats, ISR changes and topic admin requests into metadata
  records (:mod:`kafkakit.broker.metadata`) appended to the quorum's log.
- ``rpc.py``: :func:`controller_apis`, the API table a :class:`~kafkakit.broker.raft.RaftServer`
  serves next to the quorum APIs (kio requests and responses).
- ``channel.py``: :class:`ControllerChannel`, which sends a request to the active controller.
- ``lifecycle.py``: :class:`BrokerLifecycle`, a broker's registration, heartbeats and
  controlled shutdown.
- ``placement.py``: replica placement for new partitions.

Not wired into the broker yet.
"""

from __future__ import annotations

from .channel import ControllerChannel
from .lifecycle import BrokerLifecycle
from .placement import PlacementError, place
from .quorum_controller import (
    ConfigOp,
    ConfigResource,
    ControllerError,
    ControllerSettings,
    CreateTopicResult,
    DeleteTopicResult,
    HeartbeatReply,
    IsrChange,
    IsrChangeResult,
    NamedResult,
    NewPartitions,
    NewTopic,
    NotControllerError,
    QuorumController,
    TopicConfig,
)
from .rpc import ApiTable, controller_apis, not_controller

__all__ = [
    "ApiTable",
    "BrokerLifecycle",
    "ConfigOp",
    "ConfigResource",
    "ControllerChannel",
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
    "PlacementError",
    "QuorumController",
    "TopicConfig",
    "controller_apis",
    "not_controller",
    "place",
]
