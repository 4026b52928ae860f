"""FindCoordinator (key 10) v0-4: on a single node this broker coordinates every group and transaction.

Key type 0 is a consumer group, 1 a transactional id (v1+; v0 only knows
groups).  v4 (KIP-699) batches keys and answers one entry per key.  Other key
types (share groups, 2) get INVALID_REQUEST, as Kafka answers unknown types.

Advertising v0 matters beyond groups: librdkafka enables its LZ4 codec only
when the broker lists FindCoordinator v0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 10
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
FIRST_BATCHED_VERSION = 4


async def handle_find_coordinator(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """This broker's address for each requested key, or INVALID_REQUEST for an unknown key type."""
    cls = response_class(API_KEY, header.api_version)
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if header.api_version >= FIRST_BATCHED_VERSION:
        coordinator_cls = nested(cls, "Coordinator")
        coordinators = tuple(
            make(coordinator_cls, key=key, **_answer(state, key_type, key)) for key in request.coordinator_keys
        )
        return make(cls, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return make(cls, throttle_time=NO_THROTTLE, **_answer(state, key_type, request.key))


def _refusal(state: BrokerState, key_type: int, key: str) -> ErrorCode | None:
    """Finding a coordinator needs DESCRIBE on the group or the transactional id."""
    if key_type == GROUP_KEY_TYPE and not state.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TRANSACTION_KEY_TYPE and not state.allowed(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return ErrorCode.transactional_id_authorization_failed
    return None


def _answer(state: BrokerState, key_type: int, key: str) -> dict[str, Any]:
    refused = _refusal(state, key_type, key)
    if refused is not None:
        return {"error_code": refused, "error_message": None, "node_id": -1, "host": "", "port": -1}
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return {
            "error_code": ErrorCode.invalid_request,
            "error_message": f"unknown coordinator key type {key_type}",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "node_id": state.node_id,
        "host": state.advertised_endpoint()[0],
        "port": state.advertised_endpoint()[1],
    }


HANDLERS = (ApiHandler(API_KEY, 0, FIRST_BATCHED_VERSION, handle_find_coordinator),)
