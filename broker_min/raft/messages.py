"""The quorum's wire messages (kio objects) for the ``__cluster_metadata`` partition, and their versions.

Versions: Vote v0, BeginQuorumEpoch v0, EndQuorumEpoch v0 (the KIP-595 forms,
without KIP-853's directory ids and endpoints), FetchSnapshot v0 and Fetch v17, whose tagged
ReplicaState carries the follower's id as Kafka's KafkaRaftClient sends it, with
the metadata topic named by its fixed topic id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafkakit.protocol.build import make_request, make_response, millis

from .log import TOPIC

VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
FETCH = 1
FETCH_SNAPSHOT = 59
API_VERSIONS = 18
#: (api key, version) the quorum sends; the server accepts exactly these (plus ApiVersions 0-3).
VERSIONS: dict[int, int] = {VOTE: 0, BEGIN_QUORUM_EPOCH: 0, END_QUORUM_EPOCH: 0, FETCH: 17, FETCH_SNAPSHOT: 0}
#: Kafka's Uuid.METADATA_TOPIC_ID (AAAAAAAAAAAAAAAAAAAAAQ).
METADATA_TOPIC_ID = uuid.UUID(int=1)
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INCONSISTENT_CLUSTER_ID = 104
UNKNOWN_TOPIC_OR_PARTITION = 3
SNAPSHOT_NOT_FOUND = 98
POSITION_OUT_OF_RANGE = 99


def vote_request(cluster_id: str, epoch: int, candidate: int, last_epoch: int, end_offset: int) -> Any:
    """A candidate's Vote request."""
    partition = {
        "partition_index": 0,
        "replica_epoch": epoch,
        "replica_id": candidate,
        "last_offset_epoch": last_epoch,
        "last_offset": end_offset,
    }
    return make_request(
        VOTE, 0, cluster_id=cluster_id, topics=[{"topic_name": TOPIC, "partitions": [partition]}]
    )


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    """The partition-level answer of Vote/BeginQuorumEpoch/EndQuorumEpoch."""

    error: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool = False


def epoch_response(api_key: int, error: int, leader_id: int, epoch: int, granted: bool = False) -> Any:
    """A Vote, BeginQuorumEpoch or EndQuorumEpoch response for the metadata partition."""
    partition: dict[str, Any] = {
        "partition_index": 0,
        "error_code": error,
        "leader_id": leader_id,
        "leader_epoch": epoch,
    }
    if api_key == VOTE:
        partition["vote_granted"] = granted
    topics = [{"topic_name": TOPIC, "partitions": [partition]}]
    return make_response(api_key, VERSIONS[api_key], error_code=NONE, topics=topics)


def top_error_response(api_key: int, error: int) -> Any:
    """A Vote/BeginQuorumEpoch/EndQuorumEpoch response with only a top-level error."""
    return make_response(api_key, VERSIONS[api_key], error_code=error, topics=[])


def parse_epoch_response(response: Any) -> EpochAnswer:
    """The metadata partition's answer in a Vote/BeginQuorumEpoch/EndQuorumEpoch response."""
    if int(response.error_code) != NONE or not response.topics or not response.topics[0].partitions:
        return EpochAnswer(int(response.error_code) or UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
    p = response.topics[0].partitions[0]
    return EpochAnswer(
        int(p.error_code), int(p.leader_id), int(p.leader_epoch), bool(getattr(p, "vote_granted", False))
    )


def begin_quorum_epoch_request(cluster_id: str, leader: int, epoch: int) -> Any:
    """A new leader's BeginQuorumEpoch."""
    partition = {"partition_index": 0, "leader_id": leader, "leader_epoch": epoch}
    return make_request(
        BEGIN_QUORUM_EPOCH,
        0,
        cluster_id=cluster_id,
        topics=[{"topic_name": TOPIC, "partitions": [partition]}],
    )


def end_quorum_epoch_request(cluster_id: str, leader: int, epoch: int, successors: list[int]) -> Any:
    """A resigning leader's EndQuorumEpoch, naming the preferred successors in order."""
    partition = {
        "partition_index": 0,
        "leader_id": leader,
        "leader_epoch": epoch,
        "preferred_successors": successors,
    }
    return make_request(
        END_QUORUM_EPOCH, 0, cluster_id=cluster_id, topics=[{"topic_name": TOPIC, "partitions": [partition]}]
    )


def epoch_request_partition(request: Any) -> Any | None:
    """The metadata partition's data in a Vote/BeginQuorumEpoch/EndQuorumEpoch request, if present."""
    for topic in request.topics:
        if topic.topic_name == TOPIC:
            for p in topic.partitions:
                if p.partition_index == 0:
                    return p
    return None


@dataclass(frozen=True, slots=True)
class FetchParams:
    """What a follower's Fetch asks."""

    replica_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


def fetch_request(cluster_id: str, params: FetchParams, max_bytes: int = 1 << 20) -> Any:
    """A follower's Fetch of the metadata partition, with its replica state."""
    partition = {
        "partition": 0,
        "current_leader_epoch": params.leader_epoch,
        "fetch_offset": params.fetch_offset,
        "last_fetched_epoch": params.last_fetched_epoch,
        "log_start_offset": 0,
        "partition_max_bytes": max_bytes,
    }
    return make_request(
        FETCH,
        VERSIONS[FETCH],
        cluster_id=cluster_id,
        replica_state={"replica_id": params.replica_id, "replica_epoch": -1},
        max_wait=params.max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[{"topic_id": METADATA_TOPIC_ID, "partitions": [partition]}],
        forgotten_topics_data=[],
    )


def parse_fetch_request(request: Any) -> FetchParams | None:
    """The follower's replica state and position, None when it does not fetch the metadata partition."""
    for topic in request.topics:
        if topic.topic_id == METADATA_TOPIC_ID:
            for p in topic.partitions:
                if p.partition == 0:
                    return FetchParams(
                        int(request.replica_state.replica_id),
                        int(p.current_leader_epoch),
                        int(p.fetch_offset),
                        int(p.last_fetched_epoch),
                        millis(request.max_wait),
                    )
    return None


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The metadata partition's part of a Fetch response."""

    error: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    records: bytes
    diverging: tuple[int, int] | None  # (epoch, end offset)
    snapshot: tuple[int, int] | None = None  # (end offset, epoch): fetch this snapshot first


def fetch_response(answer: FetchAnswer) -> Any:
    """A Fetch response for the metadata partition."""
    partition: dict[str, Any] = {
        "partition_index": 0,
        "error_code": answer.error,
        "high_watermark": answer.high_watermark,
        "last_stable_offset": answer.high_watermark,
        "log_start_offset": 0,
        "current_leader": {"leader_id": answer.leader_id, "leader_epoch": answer.leader_epoch},
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": answer.records,
    }
    if answer.snapshot is not None:
        partition["snapshot_id"] = {"end_offset": answer.snapshot[0], "epoch": answer.snapshot[1]}
    if answer.diverging is not None:
        partition["diverging_epoch"] = {"epoch": answer.diverging[0], "end_offset": answer.diverging[1]}
    return make_response(
        FETCH,
        VERSIONS[FETCH],
        throttle_time=0,
        error_code=NONE,
        session_id=0,
        responses=[{"topic_id": METADATA_TOPIC_ID, "partitions": [partition]}],
    )


def parse_fetch_response(response: Any) -> FetchAnswer:
    """The metadata partition's answer in a Fetch response."""
    if int(response.error_code) != NONE or not response.responses or not response.responses[0].partitions:
        return FetchAnswer(int(response.error_code) or UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, b"", None)
    p = response.responses[0].partitions[0]
    div = p.diverging_epoch
    diverging = (int(div.epoch), int(div.end_offset)) if int(div.end_offset) >= 0 else None
    snap = p.snapshot_id
    snapshot = (int(snap.end_offset), int(snap.epoch)) if int(snap.end_offset) >= 0 else None
    return FetchAnswer(
        int(p.error_code),
        int(p.current_leader.leader_id),
        int(p.current_leader.leader_epoch),
        int(p.high_watermark),
        bytes(p.records or b""),
        diverging,
        snapshot,
    )


@dataclass(frozen=True, slots=True)
class SnapshotChunkRequest:
    """What a FetchSnapshot asks: a byte range of one snapshot."""

    replica_id: int
    leader_epoch: int
    end_offset: int
    epoch: int
    position: int
    max_bytes: int


def fetch_snapshot_request(cluster_id: str, ask: SnapshotChunkRequest) -> Any:
    """A follower's FetchSnapshot of the metadata partition."""
    partition = {
        "partition": 0,
        "current_leader_epoch": ask.leader_epoch,
        "snapshot_id": {"end_offset": ask.end_offset, "epoch": ask.epoch},
        "position": ask.position,
    }
    return make_request(
        FETCH_SNAPSHOT,
        VERSIONS[FETCH_SNAPSHOT],
        cluster_id=cluster_id,
        replica_id=ask.replica_id,
        max_bytes=ask.max_bytes,
        topics=[{"name": TOPIC, "partitions": [partition]}],
    )


def parse_fetch_snapshot_request(request: Any) -> SnapshotChunkRequest | None:
    """The asked snapshot range, None when the request is not for the metadata partition."""
    for topic in request.topics:
        if topic.name == TOPIC:
            for p in topic.partitions:
                if p.partition == 0:
                    return SnapshotChunkRequest(
                        int(request.replica_id),
                        int(p.current_leader_epoch),
                        int(p.snapshot_id.end_offset),
                        int(p.snapshot_id.epoch),
                        int(p.position),
                        int(request.max_bytes),
                    )
    return None


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """A FetchSnapshot answer: the bytes at ``position`` of a snapshot of ``size`` bytes."""

    error: int
    leader_id: int
    leader_epoch: int
    end_offset: int
    epoch: int
    size: int
    position: int
    data: bytes


def fetch_snapshot_response(chunk: SnapshotChunk) -> Any:
    """A FetchSnapshot response for the metadata partition."""
    partition = {
        "index": 0,
        "error_code": chunk.error,
        "snapshot_id": {"end_offset": chunk.end_offset, "epoch": chunk.epoch},
        "current_leader": {"leader_id": chunk.leader_id, "leader_epoch": chunk.leader_epoch},
        "size": chunk.size,
        "position": chunk.position,
        "unaligned_records": chunk.data,
    }
    return make_response(
        FETCH_SNAPSHOT,
        VERSIONS[FETCH_SNAPSHOT],
        throttle_time=0,
        error_code=NONE,
        topics=[{"name": TOPIC, "partitions": [partition]}],
    )


def parse_fetch_snapshot_response(response: Any) -> SnapshotChunk:
    """The metadata partition's answer in a FetchSnapshot response."""
    if int(response.error_code) != NONE or not response.topics or not response.topics[0].partitions:
        return SnapshotChunk(
            int(response.error_code) or UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, -1, 0, 0, b""
        )
    p = response.topics[0].partitions[0]
    return SnapshotChunk(
        int(p.error_code),
        int(p.current_leader.leader_id),
        int(p.current_leader.leader_epoch),
        int(p.snapshot_id.end_offset),
        int(p.snapshot_id.epoch),
        int(p.size),
        int(p.position),
        bytes(p.unaligned_records or b""),
    )
