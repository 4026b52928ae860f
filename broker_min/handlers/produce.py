"""Produce (key 0): advertised as v0-12, served from v3; v0-2 get UNSUPPORTED_VERSION.

Kafka 4 removed Produce v0-2 (KIP-896) but keeps advertising v0, because
librdkafka < 2.11.1 turns compression off unless it sees Produce v0.  kio has
no schemas before v3, so v0-2 requests are decoded and answered by hand here:
every partition gets UNSUPPORTED_VERSION in the layout that version expects.

Idempotence: a record set whose first batch carries a producer id is checked
against the partition's producer state first (see
:mod:`kafkakit.broker.producer_state`): a retried batch is acknowledged with its
original offsets and not appended; a fenced epoch or a sequence gap is refused.
Batches without a producer id cost one byte comparison.  Transactional
batches are accepted only for partitions in the producer's ongoing
transaction, as Kafka's partition verification decides by request version:
v12+ (transaction version 2, KIP-890) adds the partition to the transaction,
v11 answers TRANSACTION_ABORTABLE, older versions INVALID_TXN_STATE.  Control
batches come only from the transaction coordinator (INVALID_RECORD from a
client).

Ordering: the handler appends every partition before its first ``await``
(there is none before the appends), so requests pipelined on one connection,
whose tasks start in arrival order, are appended in arrival order.

Cluster mode (``state.replicas`` set, :mod:`kafkakit.broker.replication`): only
the partition's leader appends (NOT_LEADER_OR_FOLLOWER elsewhere), and acks=all
needs an ISR of at least min.insync.replicas (NOT_ENOUGH_REPLICAS, nothing
appended).  acks=1 answers after the leader's append; acks=all, once every
partition is appended, waits for each partition's HW to reach its appended (or
duplicate) batches within the request's timeout: REQUEST_TIMED_OUT when it does
not, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR fell below min.insync.replicas
meanwhile (Kafka's DelayedProduce).
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.transactions import ImplicitAdd
from kafkakit.broker.handlers import txn_verification
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, CloseConnection, RawResponse, make, nested
from kafkakit.broker.log import (
    AppendResult,
    BatchHeader,
    LogError,
    PartitionLog,
    check_record_set_keys,
    read_batch_header,
)
from kafkakit.broker.producer_state import ProducerStateError
from kafkakit.broker.replication.hooks import cluster_hook
from kafkakit.protocol import RequestHeaderInfo, decode_request, response_class
from kafkakit.records.header import HEADER_SIZE, LOG_OVERHEAD
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 0
FIRST_KIO_VERSION = 3
FIRST_ABORTABLE_VERSION = 11  # KIP-890 part 1: TRANSACTION_ABORTABLE
FIRST_IMPLICIT_ADD_VERSION = 12  # KIP-890 part 2: transaction version 2
_UTC = datetime.UTC
_PRODUCER_ID_AT = 43  # offset of producerId in a v2 batch
# Key of an appended partition's end offset in its answer fields (taken out before encoding).
_END_OFFSET = "end_offset"


async def handle_produce(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Append each partition's records; answer per partition (nothing at all for acks=0)."""
    if isinstance(request, LegacyProduceRequest):
        return _legacy_unsupported(header.api_version, request)
    implicit = _implicit_add(header.api_version)
    refusal = _transactional_refusal(state, request.transactional_id)
    if refusal is None and txn_verification.remote_coordinator(state, request.transactional_id):
        producer = txn_verification.first_producer(request)
        if producer is not None:
            async with txn_verification.producer_lock(producer[0]):
                verdicts = await txn_verification.verify(state, request, implicit)
                return await _produce(state, header, request, implicit, refusal, verdicts)
    return await _produce(state, header, request, implicit, refusal, None)


async def _produce(
    state: BrokerState,
    header: RequestHeaderInfo,
    request: Any,
    implicit: ImplicitAdd,
    refusal: ErrorCode | None,
    verdicts: txn_verification.Verdicts | None,
) -> Any:
    """Append every partition (no await before the last append), then answer."""
    acks = request.acks
    cls = response_class(API_KEY, header.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    partition_cls = nested(cls, "PartitionProduceResponse")
    failures: list[str] = []
    answers: list[tuple[str, list[tuple[int, dict[str, Any]]]]] = []
    cluster = cluster_hook(state)
    committing: list[tuple[str, int, int, dict[str, Any]]] = []  # cluster mode, acks=all
    for topic in request.topic_data:
        partitions: list[tuple[int, dict[str, Any]]] = []
        denied = refusal or _topic_refusal(state, topic.name)
        for data in topic.partition_data:
            if acks not in (0, 1, -1):
                fields: dict[str, Any] = {"error_code": ErrorCode.invalid_required_acks}
            elif denied is not None:
                fields = {"error_code": denied}
            elif cluster is not None and (refused := cluster.check_produce(topic.name, data.index, acks)) is not None:
                fields = {"error_code": refused}
            else:
                fields = _append(state, topic.name, data.index, data.records, implicit, verdicts)
            end_offset = fields.pop(_END_OFFSET, None)
            if cluster is not None and end_offset is not None:
                cluster.on_leader_append(topic.name, data.index)
                if acks == -1:
                    committing.append((topic.name, data.index, end_offset, fields))
            partitions.append((data.index, fields))
        answers.append((topic.name, partitions))
    if committing:
        await _wait_committed(state, committing, request.timeout.total_seconds())
    topics = []
    for name, partitions in answers:
        responses = []
        for index, fields in partitions:
            if fields["error_code"] != ErrorCode.none:
                failures.append(f"{name}-{index}: {fields['error_code'].name}")
            responses.append(_partition(partition_cls, index, fields))
        topics.append(make(topic_cls, name=name, partition_responses=tuple(responses)))
    if acks == 0:
        # No response is expected; Kafka closes the connection on a failure so
        # the client notices and refreshes its metadata.
        return CloseConnection(f"acks=0 produce failed ({', '.join(failures)})") if failures else None
    return make(cls, responses=tuple(topics), throttle_time=NO_THROTTLE)


async def _wait_committed(
    state: BrokerState, committing: list[tuple[str, int, int, dict[str, Any]]], timeout: float
) -> None:
    """acks=all in cluster mode: wait for every appended partition's HW at once; a partition
    that does not get there in time (or loses its ISR or leadership) answers with the error."""
    codes = await asyncio.gather(
        *(state.wait_committed(topic, partition, end, timeout) for topic, partition, end, _ in committing)
    )
    for (_, _, _, fields), code in zip(committing, codes, strict=True):
        if code is not None:
            fields["error_code"] = code


def _transactional_refusal(state: BrokerState, transactional_id: str | None) -> ErrorCode | None:
    """Kafka's check: a transactional produce needs WRITE on its transactional id."""
    if transactional_id is None or state.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return ErrorCode.transactional_id_authorization_failed


def _topic_refusal(state: BrokerState, topic: str) -> ErrorCode | None:
    """Producing needs WRITE on the topic (KIP-679: that is enough for idempotent produce too)."""
    return None if state.allowed(AclOperation.WRITE, ResourceType.TOPIC, topic) else ErrorCode.topic_authorization_failed


def _implicit_add(version: int) -> ImplicitAdd:
    if version >= FIRST_IMPLICIT_ADD_VERSION:
        return ImplicitAdd.ADD
    return ImplicitAdd.ABORTABLE if version >= FIRST_ABORTABLE_VERSION else ImplicitAdd.REFUSE


def _append(
    state: BrokerState,
    topic: str,
    partition: int,
    records: bytes | None,
    implicit: ImplicitAdd,
    verdicts: txn_verification.Verdicts | None = None,
) -> dict[str, Any]:
    log = state.partition_log(topic, partition)
    if log is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition}
    if not records:
        return {"error_code": ErrorCode.corrupt_message, "error_message": "empty record set"}
    if log.config.compact:
        try:
            check_record_set_keys(records, topic, partition)
        except LogError as exc:  # Kafka's LogValidator: a compacted topic needs keys
            return {"error_code": ErrorCode(exc.code), "error_message": str(exc)}
    # Byte 43 starts the first batch's producer id: a set bit 7 means -1, a
    # non-idempotent batch, which skips producer state entirely.
    if len(records) > _PRODUCER_ID_AT and records[_PRODUCER_ID_AT] < 0x80:
        return _append_idempotent(state, log, records, implicit, verdicts)
    try:
        result = log.append(records)
    except LogError as exc:
        return {"error_code": ErrorCode(exc.code), "error_message": str(exc)}
    if len(result.batches) > 1:
        # A later batch of the set may carry a producer id; keep a built state current.
        producer_state = state.producer_states.loaded(log)
        if producer_state is not None:
            producer_state.record(result.batches)
    state.notify_append(topic, partition)
    return _appended(result)


def _append_idempotent(
    state: BrokerState,
    log: PartitionLog,
    records: bytes,
    implicit: ImplicitAdd,
    verdicts: txn_verification.Verdicts | None = None,
) -> dict[str, Any]:
    """Append with producer epoch/sequence checks; a duplicate gets its original offsets."""
    producer_state = state.producer_states.for_log(log)
    headers = _batch_headers(records)
    refused = _transaction_problem(state, log, headers, implicit, verdicts)
    if refused is not None:
        return refused
    try:
        duplicate = producer_state.check(headers)
    except ProducerStateError as exc:
        return {"error_code": ErrorCode(exc.code), "error_message": str(exc)}
    if duplicate is not None:
        return {
            "error_code": ErrorCode.none,
            "base_offset": duplicate.base_offset,
            "log_append_time": _timestamp(duplicate.timestamp) if log.config.log_append_time else None,
            "log_start_offset": log.log_start_offset,
            _END_OFFSET: duplicate.last_offset + 1,
        }
    try:
        result = log.append(records)
    except LogError as exc:
        return {"error_code": ErrorCode(exc.code), "error_message": str(exc)}
    producer_state.record(result.batches)
    state.notify_append(log.topic, log.partition)
    return _appended(result)


def _transaction_problem(
    state: BrokerState,
    log: PartitionLog,
    headers: list[BatchHeader],
    implicit: ImplicitAdd,
    verdicts: txn_verification.Verdicts | None = None,
) -> dict[str, Any] | None:
    """Refuse control batches from clients and transactional batches outside an ongoing transaction.

    ``verdicts`` (cluster mode, another node coordinates the transaction) holds the coordinator's
    answers for the partitions it had to confirm; a partition not in it already holds the
    producer's open transaction."""
    for header in headers:
        if header.is_control:
            return {
                "error_code": ErrorCode.invalid_record,
                "error_message": "clients cannot produce control batches",
            }
        if header.is_transactional:
            code: ErrorCode | None
            if verdicts is not None:
                verdict = verdicts.get((log.topic, log.partition), ErrorCode.none)
                code = None if verdict is ErrorCode.none else verdict
            else:
                code = state.transactions.check_produce(
                    header.producer_id, header.producer_epoch, log.topic, log.partition, implicit
                )
            if code is not None:
                return {
                    "error_code": code,
                    "error_message": f"producer {header.producer_id} has not added {log.topic}-{log.partition} "
                    "to an ongoing transaction"
                    if code in (ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable)
                    else None,
                }
    return None


def _batch_headers(records: bytes) -> list[BatchHeader]:
    """The headers of the batches in ``records`` as far as they parse (the log rejects the rest)."""
    headers = []
    pos, end = 0, len(records)
    while end - pos >= HEADER_SIZE:
        header = read_batch_header(records, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            break
        headers.append(header)
        pos += header.batch_length + LOG_OVERHEAD
    return headers


def _timestamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, _UTC)


def _appended(result: AppendResult) -> dict[str, Any]:
    append_time_ms = result.log_append_time_ms
    return {
        "error_code": ErrorCode.none,
        "base_offset": result.base_offset,
        "log_append_time": None if append_time_ms < 0 else _timestamp(append_time_ms),
        "log_start_offset": result.log_start_offset,
        _END_OFFSET: result.last_offset + 1,
    }


def _partition(partition_cls: type, index: int, fields: dict[str, Any]) -> Any:
    values: dict[str, Any] = {
        "index": index,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": None,
    }
    values.update(fields)
    return make(partition_cls, **values)


# -- Produce v0-2, which kio cannot decode ---------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyProduceRequest:
    """The parts of a Produce v0-2 request needed to refuse it properly."""

    acks: int
    partitions: list[tuple[str, list[int]]]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def decode_produce(header: RequestHeaderInfo, body: bytes) -> Any:
    """kio for v3+, a hand-written reader for v0-2 (acks, timeout, [topic, [partition, records]])."""
    if header.api_version >= FIRST_KIO_VERSION:
        return decode_request(header, body)
    pos = header.body_offset
    (acks,) = _I16.unpack_from(body, pos)
    pos += 2 + 4  # acks, timeout
    topics: list[tuple[str, list[int]]] = []
    (topic_count,) = _I32.unpack_from(body, pos)
    pos += 4
    for _ in range(topic_count):
        (name_len,) = _I16.unpack_from(body, pos)
        name = body[pos + 2 : pos + 2 + name_len].decode("utf-8")
        pos += 2 + name_len
        (partition_count,) = _I32.unpack_from(body, pos)
        pos += 4
        partitions = []
        for _ in range(partition_count):
            index, size = struct.unpack_from(">ii", body, pos)
            pos += 8 + max(size, 0)
            partitions.append(index)
        topics.append((name, partitions))
    if pos != len(body):
        raise ValueError(f"produce v{header.api_version} body has {len(body) - pos} trailing bytes")
    return LegacyProduceRequest(acks, topics)


def _legacy_unsupported(version: int, request: LegacyProduceRequest) -> RawResponse | None:
    if request.acks == 0:
        return None
    parts = [_I32.pack(len(request.partitions))]
    for name, partitions in request.partitions:
        encoded = name.encode("utf-8")
        parts.append(_I16.pack(len(encoded)) + encoded + _I32.pack(len(partitions)))
        for index in partitions:
            parts.append(struct.pack(">ihq", index, ErrorCode.unsupported_version.value, -1))
            if version >= 2:
                parts.append(struct.pack(">q", -1))  # log_append_time
    if version >= 1:
        parts.append(_I32.pack(0))  # throttle_time_ms
    return RawResponse([b"".join(parts)], flexible_header=False)


HANDLERS = (ApiHandler(API_KEY, 0, 12, handle_produce, decode=decode_produce),)
