"""kafkakit.broker.replication: partition replication in cluster mode (KRaft, issue 13).

:class:`ReplicaManager` leads and follows this node's partitions as the metadata
image says (:mod:`.manager`), keeping per-leader state in :mod:`.leader` (follower
positions, ISR, HW, acks=all waiters) and one :class:`~.fetcher.FollowerFetcher`
per leader node that truncates and fetches (:mod:`.fetcher`).  The request
handlers reach it as ``state.replicas`` (:mod:`.hooks`); on a single node that is
None and nothing here runs.

Layering: below the broker's server and above the log, the metadata image and
BrokerState; the controller is reached only through the ``isr_channel`` callable.
"""

from __future__ import annotations

from .fetcher import FollowerFetcher, truncation_offset
from .hooks import LeaderHook, cluster_hook
from .leader import FollowerState, LeaderPartition
from .manager import ReplicaManager
from .settings import ReplicationSettings

__all__ = [
    "FollowerFetcher",
    "FollowerState",
    "LeaderHook",
    "LeaderPartition",
    "ReplicaManager",
    "ReplicationSettings",
    "cluster_hook",
    "truncation_offset",
]
