"""WriteTxnMarkers (key 27) v1-2: transaction coordinators ending transactions in partitions this node leads.

A coordinator on another node (or this one, see
:class:`~kafkakit.broker.coordinators.markers.RemoteMarkers`) sends one entry per
producer: its id and epoch, COMMIT or ABORT, the coordinator's epoch and the
partitions.  Each partition this node leads gets the control batch through the same
code path as the coordinator's own markers
(:class:`~kafkakit.broker.coordinators.markers.LocalMarkers`: producer state,
waiting fetches, and in ``__consumer_offsets`` the transaction's offsets), and is
answered once the marker is replicated, as Kafka appends markers with acks=all.
A partition led elsewhere is NOT_LEADER_OR_FOLLOWER, an unknown one
UNKNOWN_TOPIC_OR_PARTITION; the coordinator retries the former.

Only brokers send this: with an authorizer the caller needs ALTER or CLUSTER_ACTION on
the cluster (Kafka's check), otherwise every partition is CLUSTER_AUTHORIZATION_FAILED.
v0 (removed in Kafka 4.0) is not served; v2 adds the transaction version, which the
marker itself does not carry.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.markers import WRITE_TXN_MARKERS, MarkerSpec
from kafkakit.broker.handlers.base import ApiHandler, make, nested
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

CLUSTER = "kafka-cluster"
#: Seconds a marker may take to reach the ISR (Kafka: request.timeout.ms).
REPLICATION_TIMEOUT = 30.0


def _may_write_markers(state: BrokerState) -> bool:
    return state.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER) or state.allowed(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER
    )


async def handle_write_txn_markers(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Append each marker to the partitions this node leads; one error code per partition."""
    cls = response_class(WRITE_TXN_MARKERS, header.api_version)
    allowed = _may_write_markers(state)
    now = time.time_ns() // 1_000_000
    results: list[dict[tuple[str, int], ErrorCode]] = []
    waits: list[tuple[dict[tuple[str, int], ErrorCode], tuple[str, int], Any]] = []
    for marker in request.markers:
        spec = MarkerSpec(
            marker.producer_id, marker.producer_epoch, bool(marker.transaction_result), marker.coordinator_epoch
        )
        codes: dict[tuple[str, int], ErrorCode] = {}
        for topic in marker.topics:
            for partition in topic.partition_indexes:
                key = (topic.name, int(partition))
                if not allowed:
                    codes[key] = ErrorCode.cluster_authorization_failed
                    continue
                error, end = state.transactions.local_markers.append(topic.name, int(partition), spec, now)
                codes[key] = error
                if error is ErrorCode.none:
                    waits.append((codes, key, state.wait_committed(topic.name, int(partition), end, REPLICATION_TIMEOUT)))
        results.append(codes)
    if waits:
        replicated = await asyncio.gather(*(wait for _, _, wait in waits))
        for (codes, key, _), error in zip(waits, replicated, strict=True):
            if error is not None and error is not ErrorCode.none:
                codes[key] = error
    marker_cls = nested(cls, "WritableTxnMarkerResult")
    topic_cls = nested(cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    answers = []
    for marker, codes in zip(request.markers, results, strict=True):
        by_topic: dict[str, list[Any]] = {}
        for (topic_name, partition), code in codes.items():
            by_topic.setdefault(topic_name, []).append(make(partition_cls, partition_index=partition, error_code=code))
        topics = tuple(make(topic_cls, name=name, partitions=tuple(ps)) for name, ps in by_topic.items())
        answers.append(make(marker_cls, producer_id=marker.producer_id, topics=topics))
    return make(cls, markers=tuple(answers))


HANDLERS = (ApiHandler(WRITE_TXN_MARKERS, 1, 2, handle_write_txn_markers),)
