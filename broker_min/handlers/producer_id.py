"""InitProducerId (key 22) v0-5: producer ids for idempotent and transactional producers.

Without a transactional id (the idempotent producer that kafka-python 3.x, the
Java client and librdkafka enable by default) any broker answers with a fresh
producer id and epoch 0.  From v3 a producer may present its current id and
epoch (KIP-360); when this broker handed out exactly that pair the epoch is
bumped, otherwise it gets a fresh id, which is what Kafka always answers and
is never wrong for a non-transactional producer.

A request with a transactional id goes to the transaction coordinator
(:mod:`kafkakit.broker.coordinators.transactions`): empty id ->
INVALID_REQUEST, timeout outside (0, 15 min] -> INVALID_TRANSACTION_TIMEOUT,
otherwise the id's producer id with a bumped epoch (an open transaction of the
previous instance is aborted first, fencing it).  From v3 a transactional
producer may present its id and epoch (KIP-360/KIP-588): the current epoch is
bumped, and a producer whose transaction was aborted by a timeout, presenting
the epoch the abort replaced, gets the current epoch back instead of being
fenced (Kafka's ``lastProducerEpoch``).  PRODUCER_FENCED becomes
INVALID_PRODUCER_EPOCH before v4, as Kafka answers.  v5 only adds
TRANSACTION_ABORTABLE, which this coordinator never answers here.

In cluster mode producer ids come in blocks from the controller; before the first block
arrives the answer is COORDINATOR_LOAD_IN_PROGRESS, which clients retry (Kafka's
RPCProducerIdManager does the same).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.transactions import TxnError
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make
from kafkakit.broker.producer_state import ProducerIdsUnavailableError
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker")

API_KEY = 22
FIRST_FENCED_VERSION = 4
_NO_PRODUCER_ID = -1
_NO_EPOCH = -1


async def handle_init_producer_id(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """A producer id and epoch for an idempotent or transactional producer."""
    cls = response_class(API_KEY, header.api_version)
    if request.transactional_id is not None:
        if not state.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _refuse(cls, ErrorCode.transactional_id_authorization_failed)
        return _init_transactional(state, cls, header.api_version, request)
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
    if not (
        state.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster")
        or state.allowed_any(AclOperation.WRITE, ResourceType.TOPIC)
    ):
        return _refuse(cls, ErrorCode.cluster_authorization_failed)
    current_id = getattr(request, "producer_id", _NO_PRODUCER_ID)
    current_epoch = getattr(request, "producer_epoch", _NO_EPOCH)
    try:
        if current_id >= 0 and current_epoch >= 0:
            producer_id, epoch = state.producer_ids.bump_epoch(current_id, current_epoch)
        else:
            producer_id, epoch = state.producer_ids.allocate(), 0
    except ProducerIdsUnavailableError:
        return _refuse(cls, ErrorCode.coordinator_load_in_progress)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _init_transactional(state: BrokerState, cls: type, version: int, request: Any) -> Any:
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    try:
        producer_id, epoch = state.transactions.init_producer_id(
            request.transactional_id,
            timeout_ms,
            getattr(request, "producer_id", _NO_PRODUCER_ID),
            getattr(request, "producer_epoch", _NO_EPOCH),
        )
    except ProducerIdsUnavailableError:
        return _refuse(cls, ErrorCode.coordinator_load_in_progress)
    except TxnError as exc:
        code = exc.code
        if code == ErrorCode.producer_fenced and version < FIRST_FENCED_VERSION:
            code = ErrorCode.invalid_producer_epoch
        log.info("InitProducerId for transactional id %r refused: %s", request.transactional_id, exc)
        return _refuse(cls, code)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _refuse(cls: type, code: ErrorCode) -> Any:
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=_NO_PRODUCER_ID,
        producer_epoch=_NO_EPOCH,
    )


HANDLERS = (ApiHandler(API_KEY, 0, 5, handle_init_producer_id),)
