"""FindCoordinator (key 10) v0-4: the leader of the internal-topic partition that holds a key.

Key type 0 is a consumer group, 1 a transactional id (v1+; v0 only knows
groups).  v4 (KIP-699) batches keys and answers one entry per key.  Other key
types (share groups, 2) get INVALID_REQUEST, as Kafka answers unknown types.

On a single node this broker coordinates every group and transaction (the
internal topics are created on first use).  In cluster mode (``state.image``
set) the answer is the leader of the key's ``__consumer_offsets`` /
``__transaction_state`` partition, at its endpoint on the listener the request
came in on; COORDINATOR_NOT_AVAILABLE while the topic does not exist yet (its
creation is asked of the broker when it offers :class:`InternalTopicCreator`),
or the partition has no leader, or the leader no endpoint.

Advertising v0 matters beyond groups: librdkafka enables its LZ4 codec only
when the broker lists FindCoordinator v0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.group_records import partition_for_group
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC
from kafkakit.broker.coordinators.transactions import TRANSACTION_TOPIC
from kafkakit.broker.coordinators.txn_records import partition_for_transactional_id
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 10
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
FIRST_BATCHED_VERSION = 4


@runtime_checkable
class InternalTopicCreator(Protocol):
    """What cluster mode offers to create ``__consumer_offsets`` / ``__transaction_state`` (through
    the controller, with their configs and partition counts) when a client first looks for a
    coordinator; it returns at once, the client retries on COORDINATOR_NOT_AVAILABLE."""

    def request_internal_topic(self, topic: str) -> None: ...


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
    if state.image is None:
        host, port = state.advertised_endpoint()
        return {"error_code": ErrorCode.none, "error_message": None, "node_id": state.node_id, "host": host, "port": port}
    return _leader_answer(state, key_type, key)


def _leader_answer(state: BrokerState, key_type: int, key: str) -> dict[str, Any]:
    """Cluster mode: the leader of the key's partition (see the module docstring)."""
    if key_type == GROUP_KEY_TYPE:
        topic, count = OFFSETS_TOPIC, state.offsets_topic_partitions()
    else:
        topic, count = TRANSACTION_TOPIC, state.transaction_topic_partitions()
    if count is None:
        if isinstance(state, InternalTopicCreator):
            state.request_internal_topic(topic)
        return _not_available(f"{topic} does not exist yet")
    partition = partition_for_group(key, count) if key_type == GROUP_KEY_TYPE else partition_for_transactional_id(key, count)
    registration = state.partition_registration(topic, partition)
    if registration is None or not registration.has_leader:
        return _not_available(f"{topic}-{partition} has no leader")
    endpoint = state.node_endpoint(registration.leader)
    if endpoint is None:
        return _not_available(f"the leader of {topic}-{partition}, node {registration.leader}, has no endpoint")
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "node_id": registration.leader,
        "host": endpoint[0],
        "port": endpoint[1],
    }


def _not_available(message: str) -> dict[str, Any]:
    return {"error_code": ErrorCode.coordinator_not_available, "error_message": message, "node_id": -1, "host": "", "port": -1}


HANDLERS = (ApiHandler(API_KEY, 0, FIRST_BATCHED_VERSION, handle_find_coordinator),)
