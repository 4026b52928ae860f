"""InitProducerId (key 22) v0-4: producer ids for idempotent producers.

Without a transactional id (the idempotent producer that kafka-python 3.x, the
Java client and librdkafka enable by default) any broker answers with a fresh
producer id and epoch 0.  From v3 a producer may present its current id and
epoch (KIP-360); when this broker handed out exactly that pair the epoch is
bumped, otherwise it gets a fresh id, which is what Kafka always answers and
is never wrong for a non-transactional producer.

A request with a transactional id is validated the way Kafka does (empty id ->
INVALID_REQUEST, timeout outside (0, transaction.max.timeout.ms] ->
INVALID_TRANSACTION_TIMEOUT) and then refused with UNSUPPORTED_VERSION: the
Java client and kafka-python fail ``init_transactions`` with it as a fatal
"unexpected error" naming the unsupported version, and librdkafka retries and
reports it from ``init_transactions``; the authorization errors, the only other
codes these clients treat as fatal, would send users hunting for ACLs.
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker")

API_KEY = 22
# Kafka's transaction.max.timeout.ms default.
TRANSACTION_MAX_TIMEOUT = datetime.timedelta(minutes=15)
_NO_PRODUCER_ID = -1
_NO_EPOCH = -1


async def handle_init_producer_id(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """A producer id and epoch for an idempotent producer; transactions are refused for now."""
    cls = response_class(API_KEY, header.api_version)
    if request.transactional_id is not None:
        return _refuse(cls, _transactional_error(request.transactional_id, request.transaction_timeout))
    current_id = getattr(request, "producer_id", _NO_PRODUCER_ID)
    current_epoch = getattr(request, "producer_epoch", _NO_EPOCH)
    if current_id >= 0 and current_epoch >= 0:
        producer_id, epoch = state.producer_ids.bump_epoch(current_id, current_epoch)
    else:
        producer_id, epoch = state.producer_ids.allocate(), 0
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _transactional_error(transactional_id: str, timeout: datetime.timedelta) -> ErrorCode:
    if not transactional_id:
        return ErrorCode.invalid_request
    if not datetime.timedelta(0) < timeout <= TRANSACTION_MAX_TIMEOUT:
        return ErrorCode.invalid_transaction_timeout
    log.warning(
        "transactions are not yet supported by broker_min (InitProducerId for transactional id %r)",
        transactional_id,
    )
    return ErrorCode.unsupported_version


def _refuse(cls: type, code: ErrorCode) -> Any:
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=_NO_PRODUCER_ID,
        producer_epoch=_NO_EPOCH,
    )


HANDLERS = (ApiHandler(API_KEY, 0, 4, handle_init_producer_id),)
