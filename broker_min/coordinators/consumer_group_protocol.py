"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat, its epochs, session and
rebalance timeouts, static members, regex subscriptions, and ConsumerGroupDescribe.

A port of the consumer-group half of Apache Kafka's ``GroupMetadataManager`` to one asyncio
loop.  The state (:class:`~.consumer_group.ConsumerGroup`) only ever changes by *replaying
records*: each step of a heartbeat builds Kafka's records (:mod:`.consumer_group_records`),
appends them to ``__consumer_offsets`` and then applies them with
:func:`~.consumer_group_replay.replay`, the same function that rebuilds the groups when a
partition loads.  So what a restart brings back is exactly what was live.  Classic members in
consumer groups, and converting groups between the protocols, are in :mod:`.consumer_group_classic`.

A heartbeat, in Kafka's order:

1. validate the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION),
   find the group (created by a joining member, epoch 0; GROUP_ID_NOT_FOUND otherwise) and
   the member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
   GROUP_MAX_SIZE_REACHED);
2. record a changed subscription; resolve every member's regex against the topics and record
   the subscribed topics' metadata when it changed (a topic created later, or grown);
   either bumps the group epoch;
3. when the group epoch is ahead of the target assignment, run the group's server assignor
   (the one most members ask for, else the first of ``group.consumer.assignors``) and record
   the new target;
4. move the member towards its target (:func:`~.consumer_group.reconcile`, revoke first) and
   record its new current assignment; arm its session timeout, and its rebalance timeout while
   it has partitions to revoke.

Regular expressions: Kafka evaluates ``SubscribedTopicRegex`` with RE2/J over every topic name
(internal topics excluded).  Here Python's :mod:`re` is used with ``fullmatch``, which accepts
the RE2 syntax clients use in practice; it additionally accepts backreferences and
look-around (RE2 rejects those as INVALID_REGULAR_EXPRESSION) and has no linear-time bound.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    Partitions,
    is_subset,
    reconcile,
)
from .consumer_group_records import (
    GROUP_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    TopicMetadata,
)
from .consumer_group_replay import (
    Record,
    assignment_record,
    decode_value,
    encode_record,
    group_tombstones,
    member_records,
    record_key,
    removal_records,
    replay,
)
from .group import GroupError, GroupState
from .group_records import GroupKey, encode_group_key
from .offsets_topic import CoordinatorRecord
from .server_assignors import ASSIGNORS
from .timers import Timers

log = logging.getLogger("kafkakit.broker.groups")

#: topic name -> (topic id, partition count), every topic of the cluster
TopicLookup = Callable[[], Mapping[str, tuple[uuid.UUID, int]]]

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
#: How long a regex's resolution stands before a heartbeat resolves it again over every topic.
REGEX_REFRESH_SECONDS = 1.0
FIRST_CLIENT_MEMBER_ID_VERSION = 1


class TopicsView(Mapping[str, tuple[uuid.UUID, int]]):
    """Topic name -> (topic id, partition count) over the broker's topic registry, without copying it
    (a heartbeat looks up its subscribed names; only regex resolution walks every topic)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> tuple[uuid.UUID, int]:
        topic = self._registry.get(name)
        if topic is None:
            raise KeyError(name)
        return topic.topic_id, topic.num_partitions

    def __iter__(self) -> Iterator[str]:
        return (topic.name for topic in self._registry)

    def __len__(self) -> int:
        return len(self._registry)


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """The broker's group.consumer.* settings (Kafka's names and defaults)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat; None fields did not change since the member's last heartbeat."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, Sequence[int]] | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """What a ConsumerGroupHeartbeat is answered with (``assignment`` None: unchanged)."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str) -> re.Pattern[str]:
    """The compiled subscription regex (``re.error`` when it is not valid)."""
    return re.compile(pattern)


# ============================================================================ the protocol


class ConsumerGroupProtocol:
    """ConsumerGroupHeartbeat and friends over the coordinator's consumer groups.

    ``write(group_id, records)`` appends encoded records and returns None or the error to
    answer; ``classic_groups`` is the classic group table (an empty classic group is
    converted when a consumer joins it, as Kafka does).
    """

    def __init__(
        self,
        groups: dict[str, ConsumerGroup],
        classic_groups: dict[str, Any],
        settings: ConsumerSettings,
        timers: Timers,
        write: Callable[[str, Sequence[CoordinatorRecord]], ErrorCode | None],
        coordinator_error: Callable[[str], ErrorCode | None],
        topics: TopicLookup,
    ) -> None:
        self.groups = groups
        self._classic = classic_groups
        self.settings = settings
        self._timers = timers
        self._write_raw = write
        self._coordinator_error = coordinator_error
        self.topics = topics
        #: Kafka's online upgrade and downgrade between classic and consumer groups (set by the
        #: coordinator, see :mod:`.consumer_group_classic`); True when the group was converted.
        self.upgrade: Callable[[Any], bool] = lambda _classic_group: False
        self.downgrade: Callable[[ConsumerGroup, str], bool] = lambda _group, _leaving: False
        self._regex_cache: dict[str, tuple[float, list[str]]] = {}

    # -- writing -------------------------------------------------------------------------

    def _write(self, group_id: str, records: Sequence[Record]) -> None:
        """Append then apply ``records``; GroupError when the append failed."""
        if not records:
            return
        error = self._write_raw(group_id, [encode_record(k, v) for k, v in records])
        if error is not None:
            raise GroupError(error)
        for key, value in records:
            replay(self.groups, key, value)

    # -- heartbeat -----------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        try:
            error = self._coordinator_error(request.group_id)
            if error is not None:
                raise GroupError(error)
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(request)
            return self._heartbeat(request)
        except GroupError as exc:
            message = str(exc) if str(exc) != exc.code.name else None
            return HeartbeatResult(exc.code, message)

    def _validate(self, r: HeartbeatRequest) -> None:
        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.invalid_request, message)

        if not r.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if r.version >= FIRST_CLIENT_MEMBER_ID_VERSION and not r.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if r.instance_id is not None and not r.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if r.rack_id is not None and not r.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or any(r.owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not r.subscribed_topic_names and not r.subscribed_topic_regex:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if r.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif r.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.settings.assignors:
            raise GroupError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.settings.assignors)}.",
            )
        if r.subscribed_topic_regex:
            try:
                compile_regex(r.subscribed_topic_regex)
            except re.error as exc:
                raise GroupError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular expression: {exc}.",
                ) from None

    def _group_for_join(self, r: HeartbeatRequest) -> ConsumerGroup:
        group = self.groups.get(r.group_id)
        if group is not None:
            return group
        classic = self._classic.get(r.group_id)
        if classic is not None and not classic.is_in(GroupState.EMPTY):
            # Kafka's online upgrade: the first consumer-protocol member converts a classic group.
            if r.member_epoch == 0 and self.upgrade(classic):
                return self.groups[r.group_id]
            raise GroupError(ErrorCode.group_id_not_found, f"Group {r.group_id} is not a consumer group.")
        if classic is not None and r.member_epoch != 0:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {r.group_id} is not a consumer group.")
        if r.member_epoch != 0:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {r.group_id} not found.")
        return ConsumerGroup(r.group_id)

    def _heartbeat(self, r: HeartbeatRequest) -> HeartbeatResult:
        group = self._group_for_join(r)
        member_id = r.member_id
        if not member_id and r.member_epoch == 0:
            member_id = str(uuid.uuid4())  # v0: the coordinator names the member
        if len(group.members) >= self.settings.max_size and member_id not in group.members:
            raise GroupError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
            )
        member, replaced = self._member(group, r, member_id)
        previous = group.members.get(member_id)
        updated = replace(
            member,
            instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=r.server_assignor if r.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(
                tuple(sorted(set(r.subscribed_topic_names)))
                if r.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (r.subscribed_topic_regex or None)
                if r.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=r.client_id,
            client_host=r.client_host,
        )
        reconciled = self.progress(group, previous, replaced, updated, r.owned)
        full = (
            r.rebalance_timeout_ms != -1
            and (r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None)
            and r.owned is not None
        )
        changed = previous is None or previous.assigned != reconciled.assigned
        return HeartbeatResult(
            ErrorCode.none,
            None,
            member_id,
            reconciled.member_epoch,
            self.settings.heartbeat_interval_ms,
            reconciled.assigned if (r.member_epoch == 0 or full or changed) else None,
        )

    def progress(
        self,
        group: ConsumerGroup,
        previous: ConsumerMember | None,
        replaced: ConsumerMember | None,
        updated: ConsumerMember,
        owned: Mapping[uuid.UUID, Sequence[int]] | None,
    ) -> ConsumerMember:
        """Record ``updated`` (a joining, rejoining or heartbeating member), bump the group epoch when
        the subscriptions or the subscribed topics changed, compute the target assignment when it is
        behind, and move the member towards its target; the member as it now is."""
        group_id, member_id = group.group_id, updated.member_id
        records: list[Record] = []
        if group_id in self._classic and group_id not in self.groups:
            # An empty classic group becomes a consumer group (its offsets stay).
            del self._classic[group_id]
            records.append((record_key(GROUP_METADATA, group_id), 0))
            self._write_raw(group_id, [(encode_group_key(GroupKey(group_id)), None)])
        if replaced is not None and replaced.member_id != member_id:
            records += removal_records(group_id, replaced.member_id)
        bump = False
        if previous is None or member_records(group_id, previous) != member_records(group_id, updated):
            records += member_records(group_id, updated)
            bump = previous is None or (
                previous.subscribed_topic_names != updated.subscribed_topic_names
                or previous.subscribed_topic_regex != updated.subscribed_topic_regex
                or previous.server_assignor != updated.server_assignor
            )
            if replaced is not None:
                bump = False  # a static member taking its place back changes nothing
                records.append(
                    (record_key(TARGET_ASSIGNMENT_MEMBER, group_id, member_id), group.target.get(replaced.member_id, {}))
                )
                records.append(assignment_record(group_id, updated))
        self._write(group_id, records)
        group = self.groups.get(group_id, group)
        # Subscribed topics: a new or grown topic, a topic matching a regex, bump the epoch too.
        metadata = self._subscription_metadata(group, updated)
        records = []
        if metadata != group.subscription_metadata:
            records.append((record_key(PARTITION_METADATA, group_id), metadata))
            bump = True
        if bump or group_id not in self.groups:
            records.append((record_key(GROUP_METADATA, group_id), group.group_epoch + 1))
        self._write(group_id, records)
        group = self.groups[group_id]
        if group.group_epoch > group.assignment_epoch:
            self._write(group_id, self._target_assignment(group))
        member = group.members[member_id]
        reconciled = reconcile(
            member,
            group.assignment_epoch,
            group.target.get(member_id, {}),
            group.partition_epochs,
            owned,
            self._subscribed_ids(group, member),
        )
        if reconciled != member:
            self._write(group_id, [assignment_record(group_id, reconciled)])
        self._schedule_timeouts(group, member, reconciled)
        return reconciled

    def _member(
        self, group: ConsumerGroup, r: HeartbeatRequest, member_id: str
    ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """The member the heartbeat is about, and the static member it replaces (if any)."""
        if r.instance_id is None:
            member = group.members.get(member_id)
            if r.member_epoch == 0:
                return member or ConsumerMember(member_id), None
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}.")
            self._check_epoch(member, r)
            return member, None
        existing = group.static_member(r.instance_id)
        if r.member_epoch == 0:
            if existing is None:
                return group.members.get(member_id) or ConsumerMember(member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise GroupError(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {member_id} with instance id {r.instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.",
                )
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise GroupError(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {r.instance_id} was fenced by member {existing.member_id}.",
            )
        self._check_epoch(existing, r)
        return existing, None

    @staticmethod
    def _check_epoch(member: ConsumerMember, r: HeartbeatRequest) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``: a lost answer to the previous epoch is
        forgiven when the member owns no more than its assignment."""
        if r.member_epoch > member.member_epoch:
            raise GroupError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({r.member_epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if r.member_epoch < member.member_epoch and (
            r.member_epoch != member.previous_member_epoch or not is_subset(r.owned, member.assigned)
        ):
            raise GroupError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({r.member_epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )

    # -- subscriptions and the target assignment -----------------------------------------

    @staticmethod
    def _regex_topics(regexes: Iterable[str], names: Iterable[str]) -> dict[str, list[str]]:
        regexes = set(regexes)
        if not regexes:
            return {}
        names = [n for n in names if n not in INTERNAL_TOPICS]
        return {rx: [n for n in names if compile_regex(rx).fullmatch(n)] for rx in regexes}

    def _resolve(self, regexes: Iterable[str], topics: Mapping[str, Any]) -> dict[str, list[str]]:
        """The topics each regex matches, from a resolution at most :data:`REGEX_REFRESH_SECONDS` old
        (Kafka resolves them at most every 10 s; every heartbeat here would cost a pass over every topic)."""
        now = time.monotonic()
        out: dict[str, list[str]] = {}
        for rx in set(regexes):
            cached = self._regex_cache.get(rx)
            if cached is None or cached[0] < now:
                cached = (now + REGEX_REFRESH_SECONDS, self._regex_topics([rx], topics)[rx])
                self._regex_cache[rx] = cached
            out[rx] = cached[1]
        return out

    def _subscription_metadata(
        self, group: ConsumerGroup, updated: ConsumerMember | None = None
    ) -> dict[uuid.UUID, TopicMetadata]:
        members = dict(group.members)
        if updated is not None:
            members[updated.member_id] = updated
        topics = self.topics()
        regexes = [m.subscribed_topic_regex for m in members.values() if m.subscribed_topic_regex]
        resolved = self._resolve(regexes, topics)
        wanted: set[str] = set()
        for m in members.values():
            wanted.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                wanted.update(resolved[m.subscribed_topic_regex])
        out: dict[uuid.UUID, TopicMetadata] = {}
        for name in wanted:
            found = topics.get(name)
            if found is not None:
                out[found[0]] = TopicMetadata(found[0], name, found[1])
        return out

    def _subscribed_ids(self, group: ConsumerGroup, member: ConsumerMember) -> set[uuid.UUID]:
        by_name = {t.name: t.topic_id for t in group.subscription_metadata.values()}
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names.update(self._regex_topics([member.subscribed_topic_regex], by_name)[member.subscribed_topic_regex])
        return {by_name[n] for n in names if n in by_name}

    def _target_assignment(self, group: ConsumerGroup) -> list[Record]:
        """Run the assignor at the group epoch: records for changed members, then the epoch."""
        assignor = group.preferred_assignor(self.settings.assignors[0])
        subscriptions = {
            m.member_id: frozenset(self._subscribed_ids(group, m)) for m in group.members.values()
        }
        topics = {t.topic_id: t.num_partitions for t in group.subscription_metadata.values()}
        target = ASSIGNORS.get(assignor, ASSIGNORS["uniform"])(subscriptions, topics, group.target)
        records: list[Record] = []
        for member_id in sorted(target):
            if group.target.get(member_id) != target[member_id] or member_id not in group.target:
                records.append((record_key(TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id), target[member_id]))
        records.append((record_key(TARGET_ASSIGNMENT_METADATA, group.group_id), group.group_epoch))
        log.info("group %s: target assignment at epoch %d by %s", group.group_id, group.group_epoch, assignor)
        return records

    # -- leaving and fencing ---------------------------------------------------------------

    def _leave(self, r: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(r.group_id)
        if group is None:
            raise GroupError(ErrorCode.group_id_not_found, f"Group {r.group_id} not found.")
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id, f"Member {r.member_id} is not a member of group {r.group_id}.")
        else:
            member = group.static_member(r.instance_id)
            if member is None:
                raise GroupError(ErrorCode.unknown_member_id, f"Instance id {r.instance_id} is unknown.")
            if member.member_id != r.member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {r.member_id} with instance id {r.instance_id} was fenced by member {member.member_id}.",
                )
            if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # It keeps its assignment until it rejoins or its session times out.
                left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                self._write(r.group_id, [assignment_record(r.group_id, left)])
                self._timers.cancel(("consumer-rebalance", r.group_id, member.member_id))
                log.info("group %s: static member %s (%s) left temporarily", r.group_id, member.member_id, r.instance_id)
                return HeartbeatResult(ErrorCode.none, None, r.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self.fence(group, member.member_id, "left the group")
        return HeartbeatResult(ErrorCode.none, None, r.member_id, LEAVE_GROUP_MEMBER_EPOCH)

    def fence(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """Remove a member and bump the group epoch (Kafka's ``consumerGroupFenceMember``); when only
        classic members remain, the group becomes a classic group instead (Kafka's online downgrade)."""
        member = group.members.get(member_id)
        others = [m for m in group.members.values() if m.member_id != member_id]
        if (
            member is not None
            and others
            and all(m.uses_classic_protocol for m in others)
            and self.downgrade(group, member_id)
        ):
            self._timers.cancel(("consumer-session", group.group_id, member_id))
            self._timers.cancel(("consumer-rebalance", group.group_id, member_id))
            log.info("group %s: member %s %s; the group is a classic group now", group.group_id, member_id, why)
            return
        records = removal_records(group.group_id, member_id)
        remaining = {k: v for k, v in group.members.items() if k != member_id}
        shadow = ConsumerGroup(group.group_id, members=remaining)
        metadata = self._subscription_metadata(shadow)
        if metadata != group.subscription_metadata:
            records.append((record_key(PARTITION_METADATA, group.group_id), metadata))
        records.append((record_key(GROUP_METADATA, group.group_id), group.group_epoch + 1))
        self._write(group.group_id, records)
        self._timers.cancel(("consumer-session", group.group_id, member_id))
        self._timers.cancel(("consumer-rebalance", group.group_id, member_id))
        log.info("group %s: member %s %s", group.group_id, member_id, why)

    def touch(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """(Re)arm the member's session timeout (the classic session timeout for a classic member)."""
        self._timers.schedule(
            ("consumer-session", group.group_id, member.member_id),
            member.classic.session_timeout_ms if member.classic is not None else self.settings.session_timeout_ms,
            self._expire,
            group.group_id,
            member.member_id,
            "session",
            -1,
        )

    def _schedule_timeouts(self, group: ConsumerGroup, before: ConsumerMember, after: ConsumerMember) -> None:
        group_id, member_id = group.group_id, after.member_id
        self.touch(group, after)
        key = ("consumer-rebalance", group_id, member_id)
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or before.member_epoch != after.member_epoch:
                timeout = after.rebalance_timeout_ms if after.rebalance_timeout_ms > 0 else self.settings.session_timeout_ms
                self._timers.schedule(key, timeout, self._expire, group_id, member_id, "rebalance", after.member_epoch)
        else:
            self._timers.cancel(key)

    def _expire(self, group_id: str, member_id: str, which: str, epoch: int) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or self._coordinator_error(group_id) is not None:
            return
        member = group.members[member_id]
        if which == "rebalance" and (
            member.state is not MemberState.UNREVOKED_PARTITIONS or member.member_epoch != epoch
        ):
            return
        try:
            self.fence(group, member_id, f"fenced: its {which} timeout expired")
        except GroupError as exc:
            log.warning("group %s: fencing %s failed: %s", group_id, member_id, exc)

    def on_loaded(self, groups: Iterable[ConsumerGroup]) -> None:
        """Arm the session timeout of every member of freshly loaded groups (as Kafka does)."""
        for group in groups:
            for member in group.members.values():
                self._schedule_timeouts(group, member, member)

    def on_unloaded(self, groups: Iterable[str]) -> None:
        for group_id in groups:
            self._timers.cancel_matching(1, group_id)

    # -- offsets, describe, delete ---------------------------------------------------------

    def validate_commit(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        *,
        transactional: bool = False,
        api_version: int = 9,
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``; None when the commit may proceed."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.uses_classic_protocol:
            return ErrorCode.illegal_generation if member_epoch != member.member_epoch else None
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def validate_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation if member.uses_classic_protocol else ErrorCode.stale_member_epoch
        return None

    def delete(self, group: ConsumerGroup) -> ErrorCode | None:
        """Delete an empty group's records; None on success."""
        try:
            self._write(group.group_id, group_tombstones(group.group_id))
        except GroupError as exc:
            return exc.code
        self._timers.cancel_matching(1, group.group_id)
        return None

    def topic_names(self, group: ConsumerGroup) -> dict[uuid.UUID, str]:
        names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
        for name, (topic_id, _) in self.topics().items():
            names.setdefault(topic_id, name)
        return names


def group_state(group: ConsumerGroup) -> str:
    """The state name Kafka reports (ListGroups, ConsumerGroupDescribe)."""
    return group.state.value


__all__ = [
    "ConsumerGroupProtocol",
    "ConsumerGroupState",
    "ConsumerSettings",
    "HeartbeatRequest",
    "HeartbeatResult",
    "decode_value",
    "replay",
]
