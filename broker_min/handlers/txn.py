"""Transaction APIs: AddPartitionsToTxn (24) v0-5, AddOffsetsToTxn (25) v0-4, EndTxn (26) v0-5 and
TxnOffsetCommit (28) v0-5.

The work is the transaction coordinator's
(:mod:`kafkakit.broker.coordinators.transactions`); these handlers map
requests onto it and errors back.  PRODUCER_FENCED exists from AddPartitions/
AddOffsets/EndTxn v2 (Kafka 2.7); older versions get INVALID_PRODUCER_EPOCH, as
Kafka's KafkaApis maps it.  Transaction version 2 (KIP-890) goes by request
version, as in Kafka: EndTxn v5 bumps the epoch and answers the new producer id
and epoch; TxnOffsetCommit v5 adds the group's offsets partition to the
transaction itself, v4 answers TRANSACTION_ABORTABLE where older versions get
INVALID_TXN_STATE.  AddPartitionsToTxn v4+ is the broker-to-broker batch form a
partition leader sends when another node coordinates the producer's transaction
(:mod:`kafkakit.broker.handlers.txn_verification`): verify only, or add (transaction
version 2).  DescribeProducers (61) v0, DescribeTransactions (65) v0 and
ListTransactions (66) v0-1 serve the admin tools.

A transactional id whose ``__transaction_state`` partition this node does not
lead gets NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads;
ListTransactions answers that as a whole), and a request that logged a state
change is answered once the record is replicated (:func:`txn_settled`;
immediately on a single node).
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.group_offsets import OffsetToCommit
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC
from kafkakit.broker.coordinators.transactions import KNOWN_STATE_NAMES, ImplicitAdd, TxnError, state_name
from kafkakit.broker.handlers import txn_verification
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.handlers.groups import may_use_group, settled
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker")

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
FIRST_FENCED_VERSION = 2
FIRST_BROKER_VERSION = 4  # AddPartitionsToTxn v4+: the broker-to-broker batch form (KIP-890)
FIRST_EPOCH_BUMP_END_TXN_VERSION = 5  # transaction version 2
FIRST_ABORTABLE_TXN_OFFSET_COMMIT_VERSION = 4
FIRST_IMPLICIT_TXN_OFFSET_COMMIT_VERSION = 5
NO_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_EPOCH = -1


async def txn_settled(state: BrokerState, transactional_id: str, error: ErrorCode) -> ErrorCode:
    """``error``, or, when it is NONE, whatever making the coordinator's writes to the id's
    ``__transaction_state`` partition durable failed with (Kafka's mapping)."""
    if error is not ErrorCode.none:
        return error
    return await state.transactions.settle(transactional_id) or ErrorCode.none


def fenced_for_version(
    code: ErrorCode, version: int, first_fenced_version: int = FIRST_FENCED_VERSION
) -> ErrorCode:
    """PRODUCER_FENCED for clients that know it, INVALID_PRODUCER_EPOCH for older ones."""
    if code == ErrorCode.producer_fenced and version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return code


async def handle_add_partitions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Add partitions to the transaction; unknown partitions fail the request (others OPERATION_NOT_ATTEMPTED)."""
    cls = response_class(ADD_PARTITIONS_TO_TXN, header.api_version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    if header.api_version >= FIRST_BROKER_VERSION:
        return await _add_partitions_for_brokers(state, cls, request)
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    # Known to the cluster, not necessarily hosted here (the coordinator need not be a replica).
    unknown = {tp for tp in wanted if state.partition_registration(*tp) is None}
    unwritable = {t.name for t in request.v3_and_below_topics if not _may_write_topic(state, t.name)}
    codes: dict[tuple[str, int], ErrorCode] = {}
    if not _may_write_txn(state, request.v3_and_below_transactional_id):
        codes = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    elif unwritable:
        for tp in wanted:
            codes[tp] = (
                ErrorCode.topic_authorization_failed if tp[0] in unwritable else ErrorCode.operation_not_attempted
            )
    elif unknown:
        for tp in wanted:
            codes[tp] = (
                ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
            )
    else:
        try:
            state.transactions.add_partitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                wanted,
            )
            code = await txn_settled(state, request.v3_and_below_transactional_id, ErrorCode.none)
        except TxnError as exc:
            code = fenced_for_version(exc.code, header.api_version)
        codes = dict.fromkeys(wanted, code)
    topics = tuple(
        make(
            topic_cls,
            name=t.name,
            results_by_partition=tuple(
                make(partition_cls, partition_index=p, partition_error_code=codes[(t.name, p)])
                for p in t.partitions
            ),
        )
        for t in request.v3_and_below_topics
    )
    return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topics)


async def _add_partitions_for_brokers(state: BrokerState, cls: type, request: Any) -> Any:
    """AddPartitionsToTxn v4+: a partition leader asks on a producer's behalf (KIP-890), in a
    batch of transactions: ``verify_only`` checks that the partitions are in the ongoing
    transaction, otherwise they are added (transaction version 2). Brokers only: it needs
    CLUSTER_ACTION on the cluster."""
    if not state.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster"):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    results_by_transaction=())  # fmt: skip
    result_cls = nested(cls, "AddPartitionsToTxnResult")
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    results = []
    for txn in request.transactions:
        codes = await _verify_or_add(state, txn)
        topics = tuple(
            make(topic_cls, name=t.name, results_by_partition=tuple(
                make(partition_cls, partition_index=p, partition_error_code=codes[(t.name, p)]) for p in t.partitions
            ))
            for t in txn.topics
        )  # fmt: skip
        results.append(make(result_cls, transactional_id=txn.transactional_id, topic_results=topics))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(results))


async def _verify_or_add(state: BrokerState, txn: Any) -> dict[tuple[str, int], ErrorCode]:
    wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
    served = state.transactions.coordinator_error(txn.transactional_id)
    if served is not None:
        return dict.fromkeys(wanted, served)
    implicit = ImplicitAdd.REFUSE if txn.verify_only else ImplicitAdd.ADD
    codes: dict[tuple[str, int], ErrorCode] = {}
    for topic, partition in wanted:
        if state.partition_registration(topic, partition) is None:
            codes[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            continue
        refused = state.transactions.check_produce(txn.producer_id, txn.producer_epoch, topic, partition, implicit)
        codes[(topic, partition)] = refused or ErrorCode.none
    if not txn.verify_only and any(code is ErrorCode.none for code in codes.values()):
        settled = await txn_settled(state, txn.transactional_id, ErrorCode.none)
        if settled is not ErrorCode.none:
            codes = {tp: settled if code is ErrorCode.none else code for tp, code in codes.items()}
    return codes


async def handle_add_offsets(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """The group's offsets partition joins the transaction."""
    cls = response_class(ADD_OFFSETS_TO_TXN, header.api_version)
    if not _may_write_txn(state, request.transactional_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed)
    if not may_use_group(state, request.group_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    try:
        state.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        code = await txn_settled(state, request.transactional_id, ErrorCode.none)
    except TxnError as exc:
        code = fenced_for_version(exc.code, header.api_version)
    return make(cls, throttle_time=NO_THROTTLE, error_code=code)


async def handle_end_txn(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Commit or abort; answers after every marker is written."""
    cls = response_class(END_TXN, header.api_version)
    bump = header.api_version >= FIRST_EPOCH_BUMP_END_TXN_VERSION
    if not _may_write_txn(state, request.transactional_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=NO_PRODUCER_ID, producer_epoch=NO_EPOCH)  # fmt: skip
    try:
        producer_id, epoch = state.transactions.end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed, bump
        )
        code = await txn_settled(state, request.transactional_id, ErrorCode.none)
        if code is not ErrorCode.none:
            producer_id, epoch = NO_PRODUCER_ID, NO_EPOCH
    except TxnError as exc:
        code = fenced_for_version(exc.code, header.api_version)
        producer_id, epoch = NO_PRODUCER_ID, NO_EPOCH
    if not bump:
        return make(cls, throttle_time=NO_THROTTLE, error_code=code)
    return make(
        cls, throttle_time=NO_THROTTLE, error_code=code, producer_id=producer_id, producer_epoch=epoch
    )


async def handle_txn_offset_commit(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Offsets held for the transaction (KIP-447 member checks from v3); one code per partition."""
    cls = response_class(TXN_OFFSET_COMMIT, header.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    refused = _txn_commit_refusal(state, request)
    readable = {t.name for t in request.topics if state.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)}
    known = [t for t in request.topics if state.topics.get(t.name) is not None and t.name in readable]
    remote = txn_verification.remote_coordinator(state, request.transactional_id)
    confirmed = ErrorCode.none
    if refused is None and remote and known and state.groups.coordinator_error(request.group_id) is None:
        # Another node coordinates the transaction: it confirms (or, TV2, adds) the offsets partition.
        confirmed = await txn_verification.confirm_offsets_partition(
            state, request.transactional_id, request.producer_id, request.producer_epoch,
            (OFFSETS_TOPIC, state.groups_store_partition(request.group_id)),
            _txn_commit_implicit(header.api_version),
        )  # fmt: skip
    if refused is None and confirmed is not ErrorCode.none:
        refused = confirmed
    codes = _txn_commit(state, header.api_version, request, known, verified=remote) if refused is None else []
    if ErrorCode.none in codes:
        # TV2 may have added the offsets partition to the transaction: both logs must be durable
        # (the transaction log is the remote coordinator's to settle when it is elsewhere).
        durable = ErrorCode.none if remote else await txn_settled(state, request.transactional_id, ErrorCode.none)
        durable = await settled(state, request.group_id, durable)
        codes = [durable if code is ErrorCode.none else code for code in codes]
    errors = iter(codes)
    topics = []
    for t in request.topics:
        if refused is not None:
            code: ErrorCode | None = refused
        elif t.name not in readable:
            code = ErrorCode.topic_authorization_failed
        elif state.topics.get(t.name) is None:
            code = ErrorCode.unknown_topic_or_partition
        else:
            code = None
        partitions = tuple(
            make(partition_cls, partition_index=p.partition_index, error_code=next(errors) if code is None else code)
            for p in t.partitions
        )
        topics.append(make(topic_cls, name=t.name, partitions=partitions))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _may_write_txn(state: BrokerState, transactional_id: str) -> bool:
    return state.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _may_write_topic(state: BrokerState, topic: str) -> bool:
    return state.allowed(AclOperation.WRITE, ResourceType.TOPIC, topic)


def _txn_commit_refusal(state: BrokerState, request: Any) -> ErrorCode | None:
    """TxnOffsetCommit needs WRITE on the transactional id and READ on the group (per partition: READ on the topic)."""
    if not _may_write_txn(state, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not may_use_group(state, request.group_id):
        return ErrorCode.group_authorization_failed
    return None


def _txn_commit_implicit(version: int) -> ImplicitAdd:
    if version >= FIRST_IMPLICIT_TXN_OFFSET_COMMIT_VERSION:
        return ImplicitAdd.ADD
    if version >= FIRST_ABORTABLE_TXN_OFFSET_COMMIT_VERSION:
        return ImplicitAdd.ABORTABLE
    return ImplicitAdd.REFUSE


def _txn_commit(
    state: BrokerState, version: int, request: Any, topics: list[Any], *, verified: bool = False
) -> list[ErrorCode]:
    """Hold the offsets for the transaction; ``verified``: the transaction's coordinator (another
    node) already confirmed the offsets partition is in it."""
    offsets = [
        OffsetToCommit(
            t.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
            p.committed_metadata,
        )
        for t in topics
        for p in t.partitions
    ]
    if not offsets:
        return []
    if not verified:
        try:
            state.transactions.check_offset_commit(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id,
                _txn_commit_implicit(version),
            )  # fmt: skip
        except TxnError as exc:
            return [exc.code] * len(offsets)
    return state.groups.txn_commit_offsets(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        offsets,
    )


async def handle_describe_producers(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Active producers per partition (for kafka-transactions.sh / Admin.describeProducers)."""
    cls = response_class(DESCRIBE_PRODUCERS, header.api_version)
    topic_cls = nested(cls, "TopicResponse")
    partition_cls = nested(cls, "PartitionResponse")
    producer_cls = nested(cls, "ProducerState")
    topics = []
    for t in request.topics:
        partitions = []
        readable = state.allowed(AclOperation.READ, ResourceType.TOPIC, t.name)
        for index in t.partition_indexes:
            partition_log = state.partition_log(t.name, index) if readable else None
            if partition_log is None:
                partitions.append(
                    make(
                        partition_cls,
                        partition_index=index,
                        error_code=ErrorCode.unknown_topic_or_partition if readable
                        else ErrorCode.topic_authorization_failed,
                        error_message=None,
                        active_producers=(),
                    )  # fmt: skip
                )
                continue
            producers = tuple(
                make(
                    producer_cls,
                    producer_id=pid,
                    producer_epoch=epoch,
                    last_sequence=seq,
                    last_timestamp=ts,
                    coordinator_epoch=0 if start >= 0 else -1,
                    current_txn_start_offset=start,
                )  # fmt: skip
                for pid, epoch, seq, ts, start in state.producer_states.for_log(partition_log).describe()
            )
            partitions.append(
                make(
                    partition_cls,
                    partition_index=index,
                    error_code=ErrorCode.none,
                    error_message=None,
                    active_producers=producers,
                )  # fmt: skip
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_list_transactions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Transactional ids filtered by state, producer id and (v1) minimum running time."""
    cls = response_class(LIST_TRANSACTIONS, header.api_version)
    entry_cls = nested(cls, "TransactionState")
    unknown = tuple(s for s in request.state_filters if s not in KNOWN_STATE_NAMES)
    if state.transactions.partitions.loading:
        # Kafka answers so while one of its partitions loads.
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_load_in_progress,
                    unknown_state_filters=(), transaction_states=())  # fmt: skip
    found = state.transactions.list_transactions(
        request.state_filters, request.producer_id_filters, getattr(request, "duration_filter", -1)
    )
    entries = tuple(
        make(
            entry_cls,
            transactional_id=m.transactional_id,
            producer_id=m.producer_id,
            transaction_state=state_name(m.state),
        )  # fmt: skip
        for m in found
        # Only the transactional ids the caller may describe are listed, as in Kafka.
        if state.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, m.transactional_id)
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=unknown,
        transaction_states=entries,
    )


async def handle_describe_transactions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """State, producer, timeout, start time and partitions of each transactional id."""
    cls = response_class(DESCRIBE_TRANSACTIONS, header.api_version)
    entry_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    entries = []
    for tid in request.transactional_ids:
        described = state.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
        not_served = state.transactions.coordinator_error(tid) if described else None
        meta = state.transactions.transactions.get(tid) if described and not_served is None else None
        if meta is None:
            entries.append(
                make(
                    entry_cls,
                    error_code=not_served or (ErrorCode.transactional_id_not_found if described
                                              else ErrorCode.transactional_id_authorization_failed),
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_ms_time(0),  # Kafka answers an unknown or refused id so
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=(),
                )  # fmt: skip
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        entries.append(
            make(
                entry_cls,
                error_code=ErrorCode.none,
                transactional_id=tid,
                transaction_state=state_name(meta.state),
                transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
                transaction_start_time=_ms_time(meta.start_ms if meta.partitions else -1),
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            )  # fmt: skip
        )
    return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(entries))


def _ms_time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


HANDLERS = (
    ApiHandler(ADD_PARTITIONS_TO_TXN, 0, 5, handle_add_partitions),
    ApiHandler(ADD_OFFSETS_TO_TXN, 0, 4, handle_add_offsets),
    ApiHandler(END_TXN, 0, 5, handle_end_txn),
    ApiHandler(TXN_OFFSET_COMMIT, 0, 5, handle_txn_offset_commit),
    ApiHandler(DESCRIBE_PRODUCERS, 0, 0, handle_describe_producers),
    ApiHandler(DESCRIBE_TRANSACTIONS, 0, 0, handle_describe_transactions),
    ApiHandler(LIST_TRANSACTIONS, 0, 1, handle_list_transactions),
)
