"""OffsetForLeaderEpoch (key 23), v2-4: where a leader epoch ends in a partition's log (KIP-101, KIP-320).

A follower asks it before fetching, to truncate a log that diverged from the
leader's; a consumer asks it to check that its position (the epoch of the last
record it read) is still in the leader's log.  The answer comes from the
partition's leader-epoch cache (:mod:`kafkakit.broker.log.leader_epochs`): the
largest epoch <= the requested one and the offset where the next epoch starts,
or the log end offset for the current epoch; ``(-1, -1)`` without an error when
the log knows no such epoch.

Authorization is Kafka's: CLUSTER_ACTION on the cluster (brokers) allows every
topic, otherwise each topic needs DESCRIBE (consumers).  ``current_leader_epoch``
fences requests made with old or too new metadata (:func:`check_current_leader_epoch`,
shared with Fetch and ListOffsets).  v0-1 were removed in Kafka 4.0 (KIP-896).
In cluster mode only the partition's leader answers, for followers (replica_id >= 0,
truncating before they fetch) and consumers alike: NOT_LEADER_OR_FOLLOWER elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 23
CLUSTER_NAME = "kafka-cluster"
NO_EPOCH = -1  # RecordBatch.NO_PARTITION_LEADER_EPOCH: "no current leader epoch given"


def check_current_leader_epoch(local_epoch: int, current_leader_epoch: int) -> ErrorCode:
    """Kafka's Partition.checkCurrentLeaderEpoch: the client's epoch against this leader's.

    -1 skips the check; an older epoch is FENCED_LEADER_EPOCH (the client's metadata
    is stale), a newer one UNKNOWN_LEADER_EPOCH (this broker has not caught up yet).
    """
    if current_leader_epoch == NO_EPOCH or current_leader_epoch == local_epoch:
        return ErrorCode.none
    if current_leader_epoch < local_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


async def handle_offset_for_leader_epoch(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Answer each (partition, leader_epoch, current_leader_epoch) from the partition's epoch cache."""
    cls = response_class(API_KEY, header.api_version)
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    partition_cls = nested(cls, "EpochEndOffset")
    cluster_action = state.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    topics = []
    for topic in request.topics:
        allowed = cluster_action or state.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        partitions = []
        for p in topic.partitions:
            code, epoch, end_offset = (
                _end_offset(state, topic.topic, p.partition, p.leader_epoch, p.current_leader_epoch)
                if allowed
                else (ErrorCode.topic_authorization_failed, -1, -1)
            )
            partitions.append(
                make(
                    partition_cls,
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _end_offset(
    state: BrokerState, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
) -> tuple[ErrorCode, int, int]:
    if state.replicas is not None and not state.replicas.is_leader(topic, partition):
        known = state.partition_registration(topic, partition) is not None
        return (ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition), -1, -1
    log = state.partition_log(topic, partition)
    if log is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    code = check_current_leader_epoch(log.leader_epoch, current_leader_epoch)
    if code != ErrorCode.none:
        return code, -1, -1
    epoch, end_offset = log.end_offset_for_epoch(leader_epoch)
    return ErrorCode.none, epoch, end_offset


HANDLERS = (ApiHandler(API_KEY, 2, 4, handle_offset_for_leader_epoch),)
