"""kafkakit.broker.raft: the core of the KRaft metadata quorum (KIP-595), for issue 13.

A self-contained library: a broker_min node in cluster mode
(:mod:`kafkakit.broker.cluster_mode`) runs one :class:`RaftNode` whose entries are the
metadata records (:mod:`kafkakit.broker.metadata`), with the controller's APIs served on the
same listener.

What maps to what in Apache Kafka (raft/src/main/java/org/apache/kafka/raft):

- :class:`RaftNode` (``node.py``) is KafkaRaftClient + QuorumState: roles Unattached
  (Voted = Unattached with a vote), Follower, Candidate, Leader and Resigned;
  randomised election timeouts in [T, 2T) for ``controller.quorum.election.timeout.ms``;
  ``controller.quorum.fetch.timeout.ms`` before a follower campaigns;
  ``controller.quorum.election.backoff.max.ms`` after a lost election; one vote per
  epoch; a vote only for a log at least as up to date (last epoch, then end offset);
  a new leader's LEADER_CHANGE control entry; HW = the end offset a majority of voters
  reached once it covers an entry of the leader's epoch (LeaderState); check quorum
  (a leader that hears from no majority for 1.5 x fetch timeout resigns); EndQuorumEpoch
  on a graceful resign, with the successors ordered by how far they got.
- ``quorum_state.py`` is FileQuorumStateStore: ``quorum-state`` JSON (QuorumStateData v0),
  replaced atomically (temp, fsync, rename, fsync dir) before a vote is answered.
- ``log.py`` is KafkaMetadataLog + LeaderEpochFileCache: ``__cluster_metadata-0/`` with
  record batches v2 carrying each entry's epoch; truncation of a divergent tail;
  Fetch's DivergingEpoch from ``endOffsetForEpoch``.
- ``messages.py``: Vote v0, BeginQuorumEpoch v0, EndQuorumEpoch v0 and Fetch v17 (ReplicaState,
  the metadata topic id, LastFetchedEpoch, DivergingEpoch, CurrentLeader) as kio objects.
- ``transport.py``: a Kafka-protocol TCP server per node (plus ApiVersions and FetchSnapshot) and per-peer client
  connections with reconnects and timeouts; the state machine only sees :class:`Transport`.

- ``snapshot.py`` (KIP-630): ``<end offset>-<epoch>.checkpoint`` files written atomically;
  :meth:`RaftNode.snapshot` stores the state machine's records as of a committed offset and
  restarts the log there (a new segment named by its base offset); a leader answers a Fetch
  below its log start with the SnapshotId, and the follower downloads it with FetchSnapshot v0
  in chunks, installs it and hands it to the listeners' ``on_snapshot``.

Public API: :meth:`RaftNode.append` (leader; returns once committed), :meth:`RaftNode.register` /
:meth:`RaftNode.committed` (committed entries in order; ``on_snapshot`` for snapshots),
:meth:`RaftNode.snapshot`, :meth:`RaftNode.leader_and_epoch`, :meth:`RaftNode.wait_for_leader`,
:meth:`RaftNode.resign`; :func:`start_endpoint` starts a node with its own listener;
``python -m kafkakit.broker.raft`` runs one voter as a process (test harness).

Not built yet: the SnapshotHeader/SnapshotFooter control records inside snapshot files and a
snapshot policy (the state machine calls :meth:`RaftNode.snapshot`; the log prefix is dropped at
once rather than kept for lagging followers), observers (non-voter fetchers), voter changes
(KIP-853), pre-vote (KIP-996), fetch sessions, persisting the high watermark (after a restart the
log above the snapshot is replayed once the leader tells the high watermark), the
LeaderChangeMessage body of the control entry, and routing these APIs through the broker's
controller listener. :class:`NotYetSupportedError` marks a listener registered without
``on_snapshot`` on a log that starts from a snapshot, and a leader asking to truncate below the
high watermark.
"""

from __future__ import annotations

from pathlib import Path

from .config import RaftConfig, Voter, parse_voters
from .log import LogEntry, RaftLog, SnapshotId
from .node import (
    CommittedRecord,
    LeaderAndEpoch,
    NotLeaderError,
    NotYetSupportedError,
    RaftNode,
    Role,
    Snapshot,
    Transport,
)
from .quorum_state import ElectionState, QuorumStateStore
from .transport import RaftEndpoint, RaftPeers, RaftServer


async def start_endpoint(config: RaftConfig, directory: Path) -> RaftEndpoint:
    """Open the node's state in ``directory`` and serve it on its voter address."""
    peers = RaftPeers(config.voters)
    node = RaftNode(config, directory, peers)
    me = config.voters[config.node_id]
    endpoint = RaftEndpoint(node, peers, me.host, me.port)
    await endpoint.start()
    return endpoint


__all__ = [
    "CommittedRecord",
    "ElectionState",
    "LeaderAndEpoch",
    "LogEntry",
    "NotLeaderError",
    "NotYetSupportedError",
    "QuorumStateStore",
    "RaftConfig",
    "RaftEndpoint",
    "RaftLog",
    "RaftNode",
    "RaftPeers",
    "RaftServer",
    "Role",
    "Snapshot",
    "SnapshotId",
    "Transport",
    "Voter",
    "parse_voters",
    "start_endpoint",
]
