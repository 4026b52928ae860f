"""Transaction markers: appended to partitions this node leads, sent to the leaders of the others.

A transaction ends with a COMMIT or ABORT control batch in every partition it wrote
to.  :class:`LocalMarkers` is the one code path that appends a marker here: the
transaction coordinator's own markers for partitions this node leads and the
WriteTxnMarkers requests of other nodes' coordinators (:mod:`kafkakit.broker.handlers.txn_markers`)
both go through it, so the partition's producer state closes the transaction, fetches
waiting on it wake up and, in ``__consumer_offsets``, the transaction's offsets are
committed or dropped (a group partition not loaded here answers NOT_LEADER_OR_FOLLOWER,
Kafka's translation of the group coordinator not being ready, which makes the sender retry).

:class:`RemoteMarkers` sends the markers for partitions led elsewhere as
WriteTxnMarkers v1 (Kafka's ``TransactionMarkerChannelManager``) through a
:class:`BrokerChannel`; :class:`NodeChannel` is one over plain connections to each
node's inter-broker address.  :func:`marker_outcome` classifies an answer as Kafka's
``TransactionMarkerRequestCompletionHandler`` does: written, retried (a new leader, a
slow ISR, a connection problem), or no longer needed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kafkakit.broker.log import LogError, PartitionLog
from kafkakit.broker.metadata import PartitionRegistration
from kafkakit.broker.peer_connection import BrokerConnection
from kafkakit.protocol.build import make_request
from kafkakit.records import build_control_batch
from kio.schema.errors import ErrorCode

from .offsets_topic import OFFSETS_TOPIC

if TYPE_CHECKING:
    from kafkakit.broker.coordinators.group_coordinator import GroupCoordinator
    from kafkakit.broker.producer_state import ProducerStateRegistry

log = logging.getLogger("kafkakit.broker")

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1
#: Seconds to wait for a leader's WriteTxnMarkers answer (Kafka: request.timeout.ms).
MARKER_REQUEST_TIMEOUT = 30.0

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MarkerSpec:
    """What one marker says: whose transaction ends, how, and the coordinator's epoch."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


class LeadershipView(Protocol):
    """Who leads a partition: BrokerState (the metadata image in cluster mode, this node alone otherwise)."""

    def partition_registration(self, topic: str, partition: int) -> PartitionRegistration | None: ...

    def is_local_leader(self, topic: str, partition: int) -> bool: ...


class MarkerLogHost(LeadershipView, Protocol):
    """What :class:`LocalMarkers` needs from the broker."""

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None: ...

    def notify_append(self, topic: str, partition: int) -> None: ...


class LocalMarkers:
    """Appends markers to partitions this node leads (see the module docstring).

    ``leadership`` decides which partitions those are; it is the host unless replaced.
    """

    def __init__(
        self, host: MarkerLogHost, producer_states: ProducerStateRegistry, groups: GroupCoordinator
    ) -> None:
        self._host = host
        self._producer_states = producer_states
        self._groups = groups
        self.leadership: LeadershipView = host

    def append(self, topic: str, partition: int, spec: MarkerSpec, now_ms: int) -> tuple[ErrorCode, int]:
        """Append the marker; (NONE, log end offset after it) or (the error, -1)."""
        if self.leadership.partition_registration(topic, partition) is None:
            return ErrorCode.unknown_topic_or_partition, -1
        if not self.leadership.is_local_leader(topic, partition):
            return ErrorCode.not_leader_or_follower, -1
        partition_log = self._host.partition_log(topic, partition)
        if partition_log is None:
            return ErrorCode.unknown_topic_or_partition, -1
        if topic == OFFSETS_TOPIC and self._groups.partitions.error(partition) is not None:
            return ErrorCode.not_leader_or_follower, -1  # the group coordinator is not ready (yet)
        marker = build_control_batch(
            spec.producer_id, spec.producer_epoch, spec.commit, spec.coordinator_epoch, now_ms
        )
        producer_state = self._producer_states.for_log(partition_log)
        try:
            result = partition_log.append(marker)
        except LogError as exc:
            log.error("writing a transaction marker to %s-%d failed: %s", topic, partition, exc)
            return _error_code(exc.code), -1
        producer_state.record(result.batches)
        producer_state.complete_transaction(spec.producer_id, result.base_offset, spec.commit)
        self._host.notify_append(topic, partition)
        if topic == OFFSETS_TOPIC:
            self._groups.complete_transactional_offsets(spec.producer_id, spec.commit, partition)
        return ErrorCode.none, result.last_offset + 1


class MarkerOutcome(enum.Enum):
    WRITTEN = "written"
    RETRY = "retry"
    #: Not needed any more: the partition is gone, or a newer coordinator or epoch took over.
    DROPPED = "dropped"


_DROPPED = frozenset(
    {
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.producer_fenced,
        ErrorCode.transaction_coordinator_fenced,
    }
)


def marker_outcome(error: ErrorCode, partition_exists: bool) -> MarkerOutcome:
    """What a marker's answer means for the coordinator (an unknown partition is dropped only
    when the metadata says it no longer exists, as Kafka skips partitions without a leader)."""
    if error is ErrorCode.none:
        return MarkerOutcome.WRITTEN
    if error in _DROPPED or (error is ErrorCode.unknown_topic_or_partition and not partition_exists):
        return MarkerOutcome.DROPPED
    return MarkerOutcome.RETRY


class BrokerChannel(Protocol):
    """Requests to other nodes of the cluster (their inter-broker listener)."""

    async def send(self, node_id: int, request: Any, timeout: float) -> Any:
        """``request``'s answer from ``node_id``; raises OSError/TimeoutError/EOFError when it cannot."""
        ...


class NodeChannel:
    """A :class:`BrokerChannel` over one plain connection per node, one request at a time each.

    ``address_of`` says where a node's inter-broker listener is (None: unknown or fenced).
    A failed request drops its connection; the next one reconnects.
    """

    def __init__(self, address_of: Callable[[int], tuple[str, int] | None], client_id: str) -> None:
        self._address_of = address_of
        self._client_id = client_id
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def send(self, node_id: int, request: Any, timeout: float) -> Any:
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            connection = self._connections.get(node_id)
            if connection is None or connection.broken:
                address = self._address_of(node_id)
                if address is None:
                    raise ConnectionRefusedError(f"node {node_id} has no known address")
                connection = await BrokerConnection.open(*address, self._client_id, timeout)
                self._connections[node_id] = connection
            try:
                return await connection.request(request, timeout)
            except BaseException:
                connection.close()
                self._connections.pop(node_id, None)
                raise

    def close(self) -> None:
        """Drop every connection."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


class RemoteMarkers:
    """Sends markers to partition leaders on other nodes as WriteTxnMarkers v1."""

    def __init__(self, channel: BrokerChannel, timeout: float = MARKER_REQUEST_TIMEOUT) -> None:
        self.channel = channel
        self.timeout = timeout

    async def send(
        self, leader: int, spec: MarkerSpec, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer from ``leader``; NETWORK_EXCEPTION for all when there is none."""
        wanted = sorted(set(partitions))
        try:
            response = await self.channel.send(leader, write_txn_markers_request(spec, wanted), self.timeout)
        except (OSError, EOFError, TimeoutError) as exc:
            log.warning(
                "transaction markers to node %d for %d partition(s) failed: %r", leader, len(wanted), exc
            )
            return dict.fromkeys(wanted, ErrorCode.network_exception)
        answers = {
            (topic.name, p.partition_index): p.error_code
            for marker in response.markers
            if marker.producer_id == spec.producer_id
            for topic in marker.topics
            for p in topic.partitions
        }
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in wanted}


def write_txn_markers_request(spec: MarkerSpec, partitions: Iterable[TopicPartition]) -> Any:
    """A WriteTxnMarkers v1 request with one marker for ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    marker = {
        "producer_id": spec.producer_id,
        "producer_epoch": spec.producer_epoch,
        "transaction_result": spec.commit,
        "topics": [{"name": topic, "partition_indexes": ps} for topic, ps in by_topic.items()],
        "coordinator_epoch": spec.coordinator_epoch,
    }
    return make_request(WRITE_TXN_MARKERS, MARKERS_VERSION, markers=[marker])


def group_by_leader(
    partitions: Iterable[TopicPartition], leadership: LeadershipView
) -> tuple[list[TopicPartition], list[TopicPartition], Mapping[int, list[TopicPartition]]]:
    """(partitions led here, partitions that no longer exist, leader -> partitions led elsewhere);
    partitions without a leader are in none of them (retried later)."""
    local: list[TopicPartition] = []
    gone: list[TopicPartition] = []
    remote: dict[int, list[TopicPartition]] = {}
    for topic, partition in partitions:
        registration = leadership.partition_registration(topic, partition)
        if registration is None:
            gone.append((topic, partition))
        elif leadership.is_local_leader(topic, partition):
            local.append((topic, partition))
        elif registration.has_leader:
            remote.setdefault(registration.leader, []).append((topic, partition))
    return local, gone, remote


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.unknown_server_error
