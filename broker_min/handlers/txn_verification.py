"""Transactional Produce when another node coordinates the transaction (KIP-890, cluster mode).

A partition leader accepts a transactional batch only for a partition in the producer's
ongoing transaction. On a single node (or when this node coordinates the transactional id)
the local coordinator answers at once. Otherwise, as Kafka's AddPartitionsToTxnManager does,
the leader asks the coordinator with one AddPartitionsToTxn v5 (the broker-to-broker form):
``verify_only`` for transaction version 1 (Produce v11 and older: the producer added the
partition itself), an add for version 2 (Produce v12+: the partition joins implicitly). Only
the first batch of a transaction on a partition needs it: once the partition's producer state
holds the producer's open transaction at the batch's epoch, later batches are checked locally
(a newer epoch is a new transaction under transaction version 2, even if the previous one's
marker has not arrived yet).

Coordinator errors that a producer should retry (not available, not coordinator, loading,
no answer) become NOT_ENOUGH_REPLICAS, as in Kafka. Requests of one producer keep their
order: they take the producer's lock in arrival order (uncontended, that does not yield),
so an appended batch never overtakes one still waiting for the coordinator.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kafkakit.broker.coordinators.transactions import TRANSACTION_TOPIC, ImplicitAdd
from kafkakit.broker.coordinators.txn_records import partition_for_transactional_id
from kafkakit.broker.log import read_batch_header
from kafkakit.protocol.build import make_request
from kafkakit.records.header import HEADER_SIZE
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

ADD_PARTITIONS_TO_TXN = 24
BROKER_VERSION = 5
#: Seconds the leader waits for the coordinator's answer.
VERIFY_TIMEOUT = 10.0
_RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.request_timed_out,
    }
)
_locks: dict[int, asyncio.Lock] = {}

Verdicts = dict[tuple[str, int], ErrorCode]


def remote_coordinator(state: BrokerState, transactional_id: str | None) -> bool:
    """Whether a transactional Produce here needs another node's coordinator."""
    return (
        transactional_id is not None
        and state.image is not None
        and state.transactions.coordinator_error(transactional_id) is not None
    )


def producer_lock(producer_id: int) -> asyncio.Lock:
    """The lock that keeps one producer's requests in arrival order while some wait to be verified."""
    lock = _locks.get(producer_id)
    if lock is None:
        if len(_locks) > 10_000:
            for key in [k for k, v in _locks.items() if not v.locked()]:
                del _locks[key]
        lock = _locks[producer_id] = asyncio.Lock()
    return lock


def first_producer(request: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of the request's first transactional batch, if any."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            records = data.records
            if records and len(records) >= HEADER_SIZE:
                header = read_batch_header(records, 0)
                if header.is_transactional:
                    return header.producer_id, header.producer_epoch
    return None


async def verify(state: BrokerState, request: Any, implicit: ImplicitAdd) -> Verdicts:
    """The coordinator's verdict for each partition of ``request`` whose transaction it must confirm
    (partitions not named are fine: their open transaction is already known here)."""
    producer = first_producer(request)
    if producer is None:
        return {}
    producer_id, epoch = producer
    needed: list[tuple[str, int]] = []
    for topic in request.topic_data:
        for data in topic.partition_data:
            log = state.partition_log(topic.name, data.index)
            if log is None or not state.is_local_leader(topic.name, data.index):
                continue  # answered by the append path (unknown partition / not leader)
            if not state.producer_states.for_log(log).in_open_transaction(producer_id, epoch):
                needed.append((topic.name, data.index))
    if not needed:
        return {}
    codes = await _ask_coordinator(state, request.transactional_id, producer_id, epoch, needed, implicit)
    return {tp: _for_produce(code, implicit) for tp, code in codes.items()}


async def confirm_offsets_partition(
    state: BrokerState, transactional_id: str, producer_id: int, epoch: int, partition: tuple[str, int],
    implicit: ImplicitAdd,
) -> ErrorCode:  # fmt: skip
    """TxnOffsetCommit on a group coordinator when another node coordinates the transaction: the
    group's ``__consumer_offsets`` partition must be in it (added for transaction version 2).
    Retriable coordinator trouble is COORDINATOR_NOT_AVAILABLE, which clients retry."""
    log = state.partition_log(*partition)
    if log is not None and state.producer_states.for_log(log).in_open_transaction(producer_id, epoch):
        return ErrorCode.none
    codes = await _ask_coordinator(state, transactional_id, producer_id, epoch, [partition], implicit)
    code = codes.get(partition, ErrorCode.unknown_server_error)
    if code in _RETRIABLE:
        return ErrorCode.coordinator_not_available
    if code is ErrorCode.invalid_txn_state and implicit is ImplicitAdd.ABORTABLE:
        return ErrorCode.transaction_abortable
    return code


async def _ask_coordinator(
    state: BrokerState, transactional_id: str, producer_id: int, epoch: int,
    partitions: list[tuple[str, int]], implicit: ImplicitAdd,
) -> Verdicts:  # fmt: skip
    count = state.transaction_topic_partitions()
    channel = state.inter_broker
    if count is None or channel is None:
        return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
    registration = state.partition_registration(TRANSACTION_TOPIC, partition_for_transactional_id(transactional_id, count))
    if registration is None or not registration.has_leader:
        return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    request = make_request(
        ADD_PARTITIONS_TO_TXN,
        BROKER_VERSION,
        transactions=[
            {
                "transactional_id": transactional_id,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "verify_only": implicit is not ImplicitAdd.ADD,
                "topics": [{"name": name, "partitions": indexes} for name, indexes in topics.items()],
            }
        ],
    )
    try:
        response = await channel.send(registration.leader, request, VERIFY_TIMEOUT)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
    if response.error_code != ErrorCode.none:
        return dict.fromkeys(partitions, ErrorCode(response.error_code))
    codes: Verdicts = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
    for result in response.results_by_transaction:
        for topic_result in result.topic_results:
            for p in topic_result.results_by_partition:
                codes[(topic_result.name, int(p.partition_index))] = ErrorCode(p.partition_error_code)
    return codes


def _for_produce(code: ErrorCode, implicit: ImplicitAdd) -> ErrorCode:
    """The coordinator's answer as the producer must see it."""
    if code in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    if code is ErrorCode.invalid_txn_state and implicit is ImplicitAdd.ABORTABLE:
        return ErrorCode.transaction_abortable
    return code
