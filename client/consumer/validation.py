"""KIP-320: checking a consumer's position against a partition's current leader.

A consumer's position carries the leader epoch of the record before it. When
a partition gets a new leader (its leader epoch in metadata moves on), or the
position comes from a committed offset that carries an epoch, the consumer asks
the leader with OffsetForLeaderEpoch where that epoch ends in its log. If it
ends before the position, the new leader's log lost records the consumer has
already read: an unclean leader election truncated it. Then, as in the Java
consumer, a consumer with a reset policy goes on from the divergence point (the
end of its epoch in the leader's log), and one with ``auto_offset_reset="none"``
gets :class:`~kafkakit.errors.LogTruncationError`. When the leader knows
nothing of the epoch at all, the position is reset by the policy.

Brokers without OffsetForLeaderEpoch (or without leader epochs) skip the check.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError, LogTruncationError, for_code
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import TopicPartition

from .partition_state import PartitionState

__all__ = ["EpochEnd", "PositionValidator", "Verdict", "end_offsets_for_epochs", "judge"]

log = logging.getLogger(__name__)

#: Partition errors that mean "ask again once metadata is fresh": not leader, unknown topic or
#: leader, fenced or unknown leader epoch, and the broker not knowing the partition yet.
RETRY_ERRORS = frozenset({3, 5, 6, 74, 75})


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """The leader's answer for one partition: where ``leader_epoch`` ends (``end_offset``)."""

    error_code: int
    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a checked position needs: ``ok``, ``diverged`` (go on from ``offset``), or ``unknown``."""

    kind: str
    offset: int = -1
    leader_epoch: int = -1


def judge(position: int, end: EpochEnd) -> Verdict:
    """Compare a position with the leader's end offset of the position's epoch (no error)."""
    if end.end_offset < 0 or end.leader_epoch < 0:
        return Verdict("unknown")  # the leader has nothing of that epoch or before it
    if end.end_offset < position:
        return Verdict("diverged", end.end_offset, end.leader_epoch)
    return Verdict("ok")


async def end_offsets_for_epochs(
    cluster: Cluster, node: int, wanted: Mapping[TopicPartition, tuple[int, int]], timeout: float
) -> dict[TopicPartition, EpochEnd] | None:
    """Ask broker ``node`` (the partitions' leader) where each epoch ends.

    ``wanted`` maps a partition to (current leader epoch, the position's epoch). None when the
    broker does not speak OffsetForLeaderEpoch (v2+, the first with a current leader epoch).
    """
    conn = await cluster.connection(node)
    if not conn.supports(ApiKey.OFFSET_FOR_LEADER_EPOCH):
        return None
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, (current, epoch) in wanted.items():
        topics[tp.topic].append({"partition": tp.partition, "current_leader_epoch": current, "leader_epoch": epoch})
    request = conn.request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        replica_id=-1,  # a consumer, not a follower
        topics=[{"topic": name, "partitions": parts} for name, parts in topics.items()],
    )
    response = await conn.send(request, timeout=timeout)
    return {
        TopicPartition(topic.topic, int(p.partition)): EpochEnd(int(p.error_code), int(p.leader_epoch), int(p.end_offset))
        for topic in response.topics
        for p in topic.partitions
    }


class PositionValidator:
    """Checks consumer positions against their partitions' current leaders (for the fetcher)."""

    def __init__(
        self,
        cluster: Cluster,
        auto_offset_reset: str,
        retry_backoff: float,
        request_timeout: float,
        data_ready: asyncio.Event,
    ) -> None:
        self._cluster = cluster
        self._auto_offset_reset = auto_offset_reset
        self._retry_backoff = retry_backoff
        self._request_timeout = request_timeout
        self._data_ready = data_ready  # set when an error is stored for the application

    async def validate(self, states: list[PartitionState]) -> None:
        """Check positions against their leaders' logs (OffsetForLeaderEpoch), node by node."""
        metadata = self._cluster.metadata
        by_node: dict[int, list[tuple[PartitionState, int, int, int, int]]] = {}
        for state in states:
            info = metadata.partition(state.tp)
            offset_epoch = state.position_epoch()
            if info is None or info.leader < 0 or state.position is None:
                continue
            if offset_epoch is None or info.leader_epoch < 0:
                state.validating, state.leader_epoch = False, info.leader_epoch  # nothing to compare
                continue
            entry = (state, state.epoch, state.position, info.leader_epoch, offset_epoch)
            by_node.setdefault(info.leader, []).append(entry)
        retry = False
        for node, entries in by_node.items():
            wanted = {state.tp: (leader_epoch, offset_epoch) for state, _, _, leader_epoch, offset_epoch in entries}
            try:
                ends = await end_offsets_for_epochs(self._cluster, node, wanted, self._request_timeout)
            except KafkaError as exc:
                log.info("validating positions on broker %s failed: %s", node, exc)
                self._cluster.request_metadata_update()
                retry = True
                continue
            for state, seeks, position, leader_epoch, _ in entries:
                if state.epoch != seeks or state.position != position:
                    continue  # seeked meanwhile: the new position is checked on its own
                end = None if ends is None else ends.get(state.tp)
                retry |= self._apply_validation(state, leader_epoch, end)
        if retry:
            await asyncio.sleep(self._retry_backoff)

    def _apply_validation(self, state: PartitionState, leader_epoch: int, end: EpochEnd | None) -> bool:
        """Act on a leader's answer for one position; True when it must be asked again."""
        if end is not None and end.error_code:
            if end.error_code in RETRY_ERRORS or for_code(end.error_code).retriable:
                self._cluster.request_metadata_update()
                return True
            state.error = for_code(end.error_code)(f"validating the position of {state.tp.topic}-{state.tp.partition}")
            self._data_ready.set()
            return False
        verdict = judge(state.position or 0, end) if end is not None else None
        state.validating, state.leader_epoch = False, leader_epoch
        if verdict is None or verdict.kind == "ok":
            return False  # the broker has no OffsetForLeaderEpoch, or the log holds our position
        tp = state.tp
        divergent = verdict.offset if verdict.kind == "diverged" else None
        if self._auto_offset_reset == "none":
            state.validating = True  # asked again (and raised again) until the application seeks
            state.error = LogTruncationError(
                f"{tp.topic}-{tp.partition}: the leader's log (epoch {leader_epoch}) diverges from the "
                f"consumer's before position {state.position} (at offset {divergent})",
                {tp: divergent},
            )
            self._data_ready.set()
        elif divergent is not None:
            log.warning(
                "%s-%s: log truncation detected (position %s, leader's log ends at %s): going on from there",
                tp.topic, tp.partition, state.position, divergent,
            )  # fmt: skip
            state.seek(divergent)
            state.epoch_marks = [(divergent - 1, verdict.leader_epoch)]
            state.leader_epoch = leader_epoch
        else:
            log.warning("%s-%s: the leader knows nothing of the position's epoch: resetting", tp.topic, tp.partition)
            state.seek(None)
            state.reset_by_policy = True
        return False
