"""kafkakit.broker.controller: the KRaft controller (issue 13) and the broker's side of it.

The controller, split as Kafka's org.apache.kafka.controller is:

- ``quorum_controller.py``: :class:`QuorumController`, the facade, active on the Raft leader:
  activation, the write lock, appending each operation's records to the quorum's log as one
  batch, and the background task (session expiry, leaderless partitions, preferred leader
  election). The managers below build the metadata records (:mod:`kafkakit.broker.metadata`)
  from the image; none of them imports the facade.
- ``cluster_control.py``: broker registration, heartbeats and sessions, fencing and
  unfencing, controlled shutdown (ClusterControlManager, BrokerHeartbeatManager).
- ``replication_control.py``: CreateTopics, DeleteTopics, CreatePartitions, AlterPartition
  (ISR change validation) and the partition scans of leader elections
  (ReplicationControlManager).
- ``partition_change.py``: one partition's leader election, clean, unclean or preferred, and
  ISR update (PartitionChangeBuilder).
- ``config_control.py``: IncrementalAlterConfigs and topic config validation
  (ConfigurationControlManager, topics only).
- ``producer_ids.py``: AllocateProducerIds (ProducerIdControlManager).
- ``acl_control.py``: CreateAcls and DeleteAcls (AclControlManager); ``scram_control.py``:
  AlterUserScramCredentials (ScramControlManager).
- ``api_types.py``: the controller's settings, errors and request/result types.
- ``placement.py``: replica placement for new partitions.

And around it:

- ``rpc.py``: :func:`controller_apis`, the API table a :class:`~kafkakit.broker.raft.RaftServer`
  serves next to the quorum APIs (kio requests and responses).
- ``channel.py``: :class:`ControllerChannel`, which sends a request to the active controller.
- ``lifecycle.py``: :class:`BrokerLifecycle`, a broker's registration, heartbeats and
  controlled shutdown.

A cluster node runs it through :mod:`kafkakit.broker.cluster_mode`.
"""

from __future__ import annotations

from .api_types import (
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
    TopicConfig,
)
from .channel import ControllerChannel
from .lifecycle import BrokerLifecycle
from .placement import PlacementError, place
from .quorum_controller import QuorumController
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
