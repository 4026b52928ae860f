"""ListOffsets: offsets by timestamp (earliest, latest, or the first at/after a time).

Shared by the consumer (position resets, ``seek_to_*``, ``*_offsets``,
``offsets_for_times``). Requests are grouped by partition leader and sent
concurrently; partitions whose leader moved are retried after a metadata
refresh until the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError, for_code
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

#: ListOffsets timestamps with a special meaning.
EARLIEST = -2
LATEST = -1

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# Errors after which ListOffsets is retried: leadership moves, a leader that is
# not ready yet (OFFSET_NOT_AVAILABLE 78 right after an election), broker restarts.
_RETRY_ERRORS = {3, 5, 6, 7, 13, 56, 74, 75, 76, 78}


class OffsetResult:
    """One ListOffsets answer: ``offset`` -1 means no record at or after the timestamp."""

    __slots__ = ("offset", "timestamp")

    def __init__(self, offset: int, timestamp: int) -> None:
        self.offset = offset
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"OffsetResult(offset={self.offset}, timestamp={self.timestamp})"


async def list_offsets(
    cluster: Cluster,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int = READ_UNCOMMITTED,
    timeout: float,
) -> dict[TopicPartition, OffsetResult]:
    """Look up the offset for each partition's timestamp (``EARLIEST``/``LATEST``/epoch ms).

    Raises UnknownTopicOrPartitionError for a partition the cluster does not
    have, the typed broker error for a non-retriable failure, and
    KafkaTimeoutError when retriable failures outlast ``timeout`` seconds.
    """
    remaining = dict(timestamps)
    results: dict[TopicPartition, OffsetResult] = {}
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while remaining:
        by_node = await _group_by_leader(cluster, remaining)
        outcomes = await asyncio.gather(
            *(_list_on_node(cluster, node, parts, isolation_level) for node, parts in by_node.items()),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, KafkaError) or not outcome.retriable:
                    raise outcome
                last_error = outcome
                continue
            for tp, (code, offset, ts) in outcome.items():
                if code == 0:
                    results[tp] = OffsetResult(offset, ts)
                    remaining.pop(tp, None)
                elif code in _RETRY_ERRORS:
                    last_error = for_code(code)(f"{tp.topic}-{tp.partition}")
                else:
                    raise for_code(code)(f"ListOffsets for {tp.topic}-{tp.partition}")
        if not remaining:
            break
        if time.monotonic() >= deadline:
            raise KafkaTimeoutError(
                f"ListOffsets for {sorted(remaining)} timed out: {last_error}"
            ) from last_error
        cluster.request_metadata_update()
        await asyncio.sleep(cluster.retry_backoff)
    return results


async def _group_by_leader(
    cluster: Cluster, timestamps: Mapping[TopicPartition, int]
) -> dict[int, dict[TopicPartition, int]]:
    """Partitions grouped by leader; refreshes metadata once when a leader is unknown or stale."""
    if cluster.metadata_stale or any(cluster.metadata.leader_for(tp) is None for tp in timestamps):
        await cluster.refresh_metadata({tp.topic for tp in timestamps})
    by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for tp, ts in timestamps.items():
        leader = cluster.metadata.leader_for(tp)
        if leader is None:
            _raise_if_partition_missing(cluster, tp)
            continue  # no leader right now: retried after the backoff
        by_node[leader][tp] = ts
    return by_node


def _raise_if_partition_missing(cluster: Cluster, tp: TopicPartition) -> None:
    meta = cluster.metadata.topics.get(tp.topic)
    if meta is not None and not meta.error_code and meta.partitions and tp.partition not in meta.partitions:
        raise UnknownTopicOrPartitionError(f"{tp.topic} has no partition {tp.partition}")


async def _list_on_node(
    cluster: Cluster, node: int, timestamps: Mapping[TopicPartition, int], isolation_level: int
) -> dict[TopicPartition, tuple[int, int, int]]:
    """One ListOffsets request; returns {tp: (error code, offset, timestamp)}."""
    conn = await cluster.connection(node)
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, ts in timestamps.items():
        info = cluster.metadata.partition(tp)
        # KIP-320: a broker whose leadership moved on answers FENCED_LEADER_EPOCH, not stale offsets.
        epoch = info.leader_epoch if info is not None else -1
        topics[tp.topic].append({"partition_index": tp.partition, "current_leader_epoch": epoch, "timestamp": ts})
    response = await conn.call(
        ApiKey.LIST_OFFSETS,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
    )
    out: dict[TopicPartition, tuple[int, int, int]] = {}
    for topic in response.topics:
        for p in topic.partitions:
            out[TopicPartition(topic.name, int(p.partition_index))] = (
                int(p.error_code),
                int(p.offset),
                int(p.timestamp),
            )
    return out
