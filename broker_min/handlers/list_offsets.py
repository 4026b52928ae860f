"""ListOffsets (key 2), v1-7: earliest, latest, max timestamp, or the first offset at a timestamp.

"Latest" is the high watermark (the LSO for read_committed) and a timestamp
lookup ignores offsets at or above it, as Kafka does for consumers.  Each answer
carries the leader epoch of its offset from the partition's epoch cache (the
current epoch for "latest"); ``current_leader_epoch`` (v4+) is checked as Fetch does.
In cluster mode only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere),
except for the debugging replica id -2, which Kafka lets any replica answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.handlers.fetch import READ_COMMITTED, last_stable_offset
from kafkakit.broker.handlers.leader_epochs import check_current_leader_epoch
from kafkakit.broker.log.errors import LogError
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState

API_KEY = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
DEBUGGING_REPLICA_ID = -2


async def handle_list_offsets(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Resolve each partition's timestamp query to (offset, timestamp)."""
    cls = response_class(API_KEY, header.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    partition_cls = nested(cls, "ListOffsetsPartitionResponse")
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    leader_only = state.replicas is not None and request.replica_id != DEBUGGING_REPLICA_ID
    topics = []
    for topic in request.topics:
        partitions = []
        described = state.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            current_epoch = getattr(p, "current_leader_epoch", -1)
            if not described:
                code, offset, timestamp, epoch = ErrorCode.topic_authorization_failed, -1, -1, -1
            elif leader_only and (refused := _not_leader(state, topic.name, p.partition_index)) is not None:
                code, offset, timestamp, epoch = refused, -1, -1, -1
            else:
                code, offset, timestamp, epoch = _lookup(
                    state, topic.name, p.partition_index, p.timestamp, read_committed, current_epoch
                )
            partitions.append(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _not_leader(state: BrokerState, topic: str, partition: int) -> ErrorCode | None:
    """Cluster mode: the error for a partition this node does not lead, None when it does."""
    if state.replicas is None or state.replicas.is_leader(topic, partition):
        return None
    if state.partition_registration(topic, partition) is None:
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.not_leader_or_follower


def _lookup(
    state: BrokerState, topic: str, partition: int, timestamp: int, read_committed: bool, current_epoch: int
) -> tuple[ErrorCode, int, int, int]:
    """(error, offset, timestamp, leader epoch); offset -1 when no record has a timestamp that late."""
    log = state.partition_log(topic, partition)
    if log is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, -1
    code = check_current_leader_epoch(log.leader_epoch, current_epoch)
    if code != ErrorCode.none:
        return code, -1, -1, -1
    if timestamp < 0 and timestamp not in (LATEST, EARLIEST, MAX_TIMESTAMP):
        # -4 (earliest local) and -5 (earliest tiered) come with v8+, which is not advertised.
        return ErrorCode.invalid_request, -1, -1, -1
    try:
        return (ErrorCode.none, *_resolve(state, log, timestamp, read_committed))
    except LogError as exc:
        return ErrorCode(exc.code), -1, -1, -1


def _resolve(
    state: BrokerState, log: PartitionLog, timestamp: int, read_committed: bool
) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) of the answer, every offset bounded by the HW (or LSO)."""
    bound = last_stable_offset(state, log) if read_committed else log.high_watermark
    if timestamp == LATEST:
        return bound, -1, log.leader_epoch
    if timestamp == EARLIEST:
        start = log.log_start_offset
        return start, -1, log.epoch_for_offset(start)
    found = log.max_timestamp_offset() if timestamp == MAX_TIMESTAMP else log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= bound:
        return -1, -1, -1
    offset, ts = found
    return offset, ts, log.epoch_for_offset(offset)


HANDLERS = (ApiHandler(API_KEY, 1, 7, handle_list_offsets),)
