"""ShareFetch (key 78) v1-2 and ShareAcknowledge (key 79) v1-2 (KIP-932), with share sessions.

A member reads through a share session (per group and member):

- ShareSessionEpoch 0 opens it with the request's partitions (replacing an older one);
- each later request carries the next epoch (1, 2, ...; INVALID_SHARE_SESSION_EPOCH otherwise,
  SHARE_SESSION_NOT_FOUND when there is no session), adds its partitions to the session and drops
  ``forgotten_topics_data``;
- epoch -1 closes it: its acknowledgements are applied, nothing is fetched, and the records the
  member still holds are released.

ShareFetch first applies the acknowledgements it carries (per partition, answered in
``acknowledge_error_code``), then acquires up to ``max_records`` records over the session's
partitions (whole batches in the batch-optimized mode 0; exactly ``max_records`` in the
record-limit mode 1 of v2) and answers them as record batches plus the acquired offset ranges
with their delivery counts.  With nothing to acquire it waits up to ``max_wait`` for an append
or for an acquisition lock to expire.  ``is_renew_ack`` (v2, KIP-1222) asks only for the
acknowledgements (RENEW extends locks) and fetches nothing.  Acknowledge types: 0 GAP,
1 ACCEPT, 2 RELEASE, 3 REJECT, 4 RENEW (see :mod:`kafkakit.broker.coordinators.share_partition`).

Single node only (see :mod:`.share_groups`): in cluster mode both APIs answer
UNSUPPORTED_VERSION with a message.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.coordinators.share_coordinator import ShareCoordinator, share_coordinator
from kafkakit.broker.coordinators.share_group_configs import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from kafkakit.broker.coordinators.share_partition import Acquired
from kafkakit.broker.coordinators.share_state_records import ShareStateKey
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, has_field, make, nested
from kafkakit.broker.handlers.share_groups import CLUSTER_MODE_MESSAGE
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
RECORD_LIMIT_MODE = 1
#: Most records one ShareFetch acquires when the request sets no limit (v0 semantics).
DEFAULT_MAX_RECORDS = 500

TopicPartitionId = tuple[uuid.UUID, int]


class _Answer:
    """Per-partition results gathered while serving one request."""

    def __init__(self) -> None:
        self.errors: dict[TopicPartitionId, tuple[ErrorCode, str | None]] = {}
        self.acks: dict[TopicPartitionId, ErrorCode] = {}
        self.acquired: dict[TopicPartitionId, Acquired] = {}

    def keys(self) -> list[TopicPartitionId]:
        seen: dict[TopicPartitionId, None] = {}
        for d in (self.errors, self.acks, self.acquired):
            seen.update(dict.fromkeys(d))
        return list(seen)


def _refusal(state: BrokerState, group_id: str | None) -> tuple[ErrorCode, str | None] | None:
    if state.config.cluster_mode:
        return ErrorCode.unsupported_version, CLUSTER_MODE_MESSAGE
    if not group_id:
        return ErrorCode.invalid_request, "GroupId must be set."
    if not state.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    return None


def _advance_session(
    coordinator: ShareCoordinator, group_id: str, member_id: str, epoch: int, allow_open: bool
) -> ShareSession | tuple[ErrorCode, str]:
    """The request's session after its epoch is checked (and a new one opened for epoch 0)."""
    sessions = coordinator.sessions
    if epoch == INITIAL_EPOCH:
        if not allow_open:
            return ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session."
        opened = sessions.open(group_id, member_id)
        if opened is None:
            return ErrorCode.share_session_limit_reached, "Too many share sessions."
        return opened
    session = sessions.get(group_id, member_id)
    if session is None:
        return ErrorCode.share_session_not_found, "No share session for this member."
    if epoch == FINAL_EPOCH:
        sessions.close(group_id, member_id)
        return session
    if epoch != session.epoch:
        return ErrorCode.invalid_share_session_epoch, f"Expected share session epoch {session.epoch}."
    session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
    return session


def _locate(state: BrokerState, coordinator: ShareCoordinator, topic_id: uuid.UUID | None, partition: int) -> Any:
    """(topic name, log) of a partition, or the error for it."""
    found = coordinator.topic_by_id(topic_id)
    if found is None:
        return ErrorCode.unknown_topic_id
    name, count = found
    if not 0 <= partition < count:
        return ErrorCode.unknown_topic_or_partition
    if not state.allowed(AclOperation.READ, ResourceType.TOPIC, name):
        return ErrorCode.topic_authorization_failed
    source = state.partition_log(name, partition)
    return ErrorCode.unknown_topic_or_partition if source is None else (name, source)


def _apply_acks(
    state: BrokerState, coordinator: ShareCoordinator, group_id: str, member_id: str, topics: Any, answer: _Answer
) -> None:
    for t in topics:
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            key = (t.topic_id, p.partition_index)
            located = _locate(state, coordinator, t.topic_id, p.partition_index)
            if isinstance(located, ErrorCode):
                answer.acks[key] = located
                continue
            batches = [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in p.acknowledgement_batches]
            answer.acks[key] = coordinator.acknowledge(
                group_id, member_id, t.topic_id, p.partition_index, located[1], batches
            )


async def handle_share_fetch(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Acknowledge, then acquire records for the member over its share session (long poll)."""
    cls = response_class(SHARE_FETCH, header.api_version)
    refused = _refusal(state, request.group_id)
    if refused is not None:
        return _fetch_response(state, cls, refused, 0, _Answer())
    coordinator = share_coordinator(state)
    group_id, member_id = request.group_id, request.member_id or ""
    lock_ms = coordinator.configs.lock_duration_ms(group_id)
    session = _advance_session(coordinator, group_id, member_id, request.share_session_epoch, allow_open=True)
    if not isinstance(session, ShareSession):
        return _fetch_response(state, cls, session, lock_ms, _Answer())
    if request.share_session_epoch == INITIAL_EPOCH:
        session.partitions.clear()
    for forgotten in request.forgotten_topics_data:
        for partition in forgotten.partitions:
            session.partitions.pop((forgotten.topic_id, partition), None)
    answer = _Answer()
    _apply_acks(state, coordinator, group_id, member_id, request.topics, answer)
    if request.share_session_epoch == FINAL_EPOCH:
        coordinator.release_session(group_id, member_id)
        return _fetch_response(state, cls, None, lock_ms, answer)
    for t in request.topics:
        for p in t.partitions:
            session.partitions[(t.topic_id, p.partition_index)] = None
    if getattr(request, "is_renew_ack", False):
        return _fetch_response(state, cls, None, lock_ms, answer)
    max_records = getattr(request, "max_records", 0) or DEFAULT_MAX_RECORDS
    strict = getattr(request, "share_acquire_mode", 0) == RECORD_LIMIT_MODE
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    turn = 0
    while True:
        got = _acquire_all(state, coordinator, session, member_id, max_records, strict, answer, turn)
        turn += 1
        remaining = deadline - loop.time()
        if got or remaining <= 0 or request.min_bytes <= 0 or (answer.errors and not session.partitions):
            break
        watched = _watched(state, coordinator, session)
        keys = [(name, partition) for name, partition, _ in watched]
        lock_deadline = coordinator.next_deadline([k for _, _, k in watched])
        wait = remaining if lock_deadline is None else min(remaining, max(lock_deadline - time.monotonic(), 0) + 0.001)
        await state.wait_for_append(keys, wait)
        if coordinator.sessions.get(group_id, member_id) is not session:
            break  # closed or replaced meanwhile
    return _fetch_response(state, cls, None, lock_ms, answer)


def _watched(state: BrokerState, coordinator: ShareCoordinator, session: ShareSession) -> list[tuple[str, int, ShareStateKey]]:
    out = []
    for topic_id, partition in session.partitions:
        found = coordinator.topic_by_id(topic_id)
        if found is not None:
            out.append((found[0], partition, ShareStateKey(session.group_id, topic_id, partition)))
    return out


def _acquire_all(
    state: BrokerState, coordinator: ShareCoordinator, session: ShareSession, member_id: str, max_records: int,
    strict: bool, answer: _Answer, turn: int,
) -> int:  # fmt: skip
    """Acquire over the session's partitions (starting one further each pass); records acquired."""
    keys = list(session.partitions)
    if keys:
        start = turn % len(keys)
        keys = keys[start:] + keys[:start]
    total = 0
    for topic_id, partition in keys:
        if total >= max_records:
            break
        located = _locate(state, coordinator, topic_id, partition)
        if isinstance(located, ErrorCode):
            answer.errors[(topic_id, partition)] = (located, None)
            continue
        acquired = coordinator.acquire(
            session.group_id, member_id, topic_id, partition, located[1], max_records - total, strict
        )
        if acquired.count:
            answer.acquired[(topic_id, partition)] = acquired
            total += acquired.count
    return total


def _fetch_response(
    state: BrokerState, cls: type, top: tuple[ErrorCode, str | None] | None, lock_ms: int, answer: _Answer
) -> Any:
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "ShareFetchableTopicResponse")
    leader_cls, range_cls = nested(cls, "LeaderIdAndEpoch"), nested(cls, "AcquiredRecords")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for key in answer.keys():
        topic_id, partition = key
        error, message = answer.errors.get(key, (ErrorCode.none, None))
        acquired = answer.acquired.get(key)
        by_topic.setdefault(topic_id, []).append(
            make(
                part_cls,
                partition_index=partition,
                error_code=error,
                error_message=message,
                acknowledge_error_code=answer.acks.get(key, ErrorCode.none).value,
                acknowledge_error_message=None,
                current_leader=_leader(state, leader_cls, topic_id, partition),
                records=b"".join(acquired.batches) if acquired else b"",
                acquired_records=tuple(
                    make(range_cls, first_offset=f, last_offset=la, delivery_count=c) for f, la, c in acquired.ranges
                )
                if acquired
                else (),
            )
        )
    code, message = top or (ErrorCode.none, None)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
        responses=tuple(make(topic_cls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        node_endpoints=(),
    )


def _leader(state: BrokerState, leader_cls: type, topic_id: uuid.UUID, partition: int) -> Any:
    info = state.topics.by_id(topic_id)
    epoch = state.leader_epoch(info.name, partition) if info is not None else -1
    return make(leader_cls, leader_id=state.node_id if info is not None else -1, leader_epoch=epoch)


async def handle_share_acknowledge(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """Apply acknowledgements within the member's share session (epoch -1 also closes it)."""
    cls = response_class(SHARE_ACKNOWLEDGE, header.api_version)
    refused = _refusal(state, request.group_id)
    coordinator = share_coordinator(state) if refused is None else None
    lock_ms = 0 if coordinator is None else coordinator.configs.lock_duration_ms(request.group_id)
    answer = _Answer()
    if coordinator is not None:
        member_id = request.member_id or ""
        session = _advance_session(coordinator, request.group_id, member_id, request.share_session_epoch, False)
        if isinstance(session, ShareSession):
            _apply_acks(state, coordinator, request.group_id, member_id, request.topics, answer)
            if request.share_session_epoch == FINAL_EPOCH:
                coordinator.release_session(request.group_id, member_id)
        else:
            refused = session
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "ShareAcknowledgeTopicResponse")
    leader_cls = nested(cls, "LeaderIdAndEpoch")
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, partition), error in answer.acks.items():
        by_topic.setdefault(topic_id, []).append(
            make(part_cls, partition_index=partition, error_code=error, error_message=None,
                 current_leader=_leader(state, leader_cls, topic_id, partition))  # fmt: skip
        )
    code, message = refused or (ErrorCode.none, None)
    values: dict[str, Any] = {}
    if has_field(cls, "acquisition_lock_timeout"):
        values["acquisition_lock_timeout"] = datetime.timedelta(milliseconds=lock_ms)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        responses=tuple(make(topic_cls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        node_endpoints=(),
        **values,
    )


HANDLERS = (
    ApiHandler(SHARE_FETCH, 1, 2, handle_share_fetch),
    ApiHandler(SHARE_ACKNOWLEDGE, 1, 2, handle_share_acknowledge),
)
