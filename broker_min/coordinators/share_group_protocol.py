"""Share group membership (KIP-932): ShareGroupHeartbeat and the server-side assignment.

A share group's members join, stay and leave through ShareGroupHeartbeat alone:

- member epoch 0 joins (the client picks its member id, a UUID, as Kafka 4.1+ clients do);
  -1 leaves; any other epoch must be the member's current one (FENCED_MEMBER_EPOCH) and the
  member must be known (UNKNOWN_MEMBER_ID, after which the client rejoins with epoch 0);
- a member that sends no heartbeat for ``share.session.timeout.ms`` is removed;
- there is no revocation: many members may read one partition at once (the share-partition's
  acquisition locks keep them apart), so a new target assignment is the members' assignment at
  once; a member's epoch moves to the group epoch with the answer to its next heartbeat (until
  then its old epoch stays valid, so one member joining never fences the others).

The assignor is Kafka's share "simple" assignor in spirit: every subscribed partition goes to
some member, spread evenly, and when there are more members than partitions each member still
gets one (so 4 members of a 1-partition topic all read partition 0).  The assignment is
recomputed whenever membership, subscriptions or the subscribed topics' partitions change.

Membership is not persisted: after a broker restart the members rejoin (their next heartbeat
gets UNKNOWN_MEMBER_ID).  What must survive a restart is the share-partition state, persisted by
:mod:`.share_state_topic`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
ASSIGNOR_NAME = "simple"

Assignment = dict[uuid.UUID, list[int]]
#: topic name -> (topic id, partition count), or None when the topic does not exist.
TopicLookup = Callable[[str], tuple[uuid.UUID, int] | None]


@dataclass(slots=True)
class ShareMember:
    """One member of a share group."""

    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    assignment: Assignment = field(default_factory=dict)
    sent: Assignment | None = None  # the assignment last sent to the member
    deadline: float = 0.0


@dataclass(slots=True)
class ShareGroup:
    """A share group: its members and epochs."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topics_seen: dict[str, tuple[uuid.UUID, int] | None] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's share group states: Empty or Stable (no reconciliation, so nothing between)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> list[str]:
        """Every topic some member subscribes to, sorted."""
        return sorted({t for m in self.members.values() for t in m.subscribed})


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """What ShareGroupHeartbeat answers."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Assignment | None = None


class ShareGroupProtocol:
    """Every share group coordinated here."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.groups: dict[str, ShareGroup] = {}
        self._clock = clock

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: Sequence[str] | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        topics: TopicLookup,
    ) -> tuple[HeartbeatResult, list[str]]:
        """Handle one heartbeat; also returns the ids of members removed (left or timed out), whose
        acquired records the caller releases."""
        removed = self.expire_members()
        if not member_id:
            return HeartbeatResult(ErrorCode.invalid_request, "MemberId can't be empty."), removed
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and group.members.pop(member_id, None) is not None:
                removed.append(member_id)
                self._bump(group, topics)
            return HeartbeatResult(ErrorCode.none, None, member_id, LEAVE_EPOCH), removed
        if member_epoch == JOIN_EPOCH:
            if subscribed is None or not subscribed:
                return HeartbeatResult(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."), removed
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                member = group.members[member_id] = ShareMember(
                    member_id, 0, client_id, client_host, rack_id, tuple(sorted(set(subscribed)))
                )
                self._bump(group, topics)
            else:  # a rejoin with the same id: it gets its assignment again
                member.sent = None
                if subscribed is not None:
                    self._update_subscription(group, member, subscribed, topics)
        else:
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, f"Member {member_id} is not in group {group_id}."), removed
            if member_epoch != member.member_epoch:
                return HeartbeatResult(ErrorCode.fenced_member_epoch, "The member epoch is stale."), removed
            if subscribed is not None:
                self._update_subscription(group, member, subscribed, topics)
        member.deadline = self._clock() + session_timeout_ms / 1000
        member.rack_id = rack_id if rack_id is not None else member.rack_id
        if self._topics_changed(group, topics):
            self._bump(group, topics)
        # A member learns a new epoch only from its own heartbeat's answer: until then its current
        # epoch stays valid (another member's join must not fence it).
        member.member_epoch = group.assignment_epoch
        assignment = None
        if member.sent != member.assignment:
            assignment = member.sent = {t: list(p) for t, p in member.assignment.items()}
        return HeartbeatResult(ErrorCode.none, None, member_id, member.member_epoch, assignment), removed

    def expire_members(self) -> list[str]:
        """Remove every member whose session timed out; their ids."""
        now = self._clock()
        gone: list[str] = []
        for group in self.groups.values():
            expired = [m for m in group.members.values() if m.deadline and m.deadline <= now]
            for member in expired:
                del group.members[member.member_id]
                gone.append(member.member_id)
            if expired:
                self._reassign(group)
        return gone

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a share group: only when it has no members."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.groups[group_id]
        return ErrorCode.none

    # ------------------------------------------------------------------ assignment

    def _update_subscription(
        self, group: ShareGroup, member: ShareMember, subscribed: Sequence[str], topics: TopicLookup
    ) -> None:
        wanted = tuple(sorted(set(subscribed)))
        if wanted != member.subscribed:
            member.subscribed = wanted
            self._bump(group, topics)

    def _topics_changed(self, group: ShareGroup, topics: TopicLookup) -> bool:
        return {t: topics(t) for t in group.subscribed_topics()} != group.topics_seen

    def _bump(self, group: ShareGroup, topics: TopicLookup) -> None:
        group.topics_seen = {t: topics(t) for t in group.subscribed_topics()}
        self._reassign(group)

    def _reassign(self, group: ShareGroup) -> None:
        group.group_epoch += 1
        group.assignment_epoch = group.group_epoch
        targets = assign(group.members, group.topics_seen)
        for member in group.members.values():
            member.assignment = targets.get(member.member_id, {})


def assign(
    members: dict[str, ShareMember], topics: dict[str, tuple[uuid.UUID, int] | None]
) -> dict[str, Assignment]:
    """Every subscribed partition to at least one subscribed member, evenly; members beyond the
    partition count share partitions so that each member gets at least one."""
    ids = sorted(members)
    loads: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in ids}
    readers: dict[tuple[uuid.UUID, int], int] = {}
    for name in sorted(topics):
        found = topics[name]
        if found is None:
            continue
        topic_id, count = found
        subscribers = [m for m in ids if name in members[m].subscribed]
        if not subscribers:
            continue
        for partition in range(count):
            owner = min(subscribers, key=lambda m: (len(loads[m]), ids.index(m)))
            loads[owner].append((topic_id, partition))
            readers[(topic_id, partition)] = 1
    for member_id in ids:
        if loads[member_id]:
            continue
        choices = [
            (topics[n][0], p)  # type: ignore[index]
            for n in members[member_id].subscribed
            if topics.get(n) is not None
            for p in range(topics[n][1])  # type: ignore[index]
        ]
        if choices:
            pick = min(choices, key=lambda tp: (readers.get(tp, 0), str(tp[0]), tp[1]))
            loads[member_id].append(pick)
            readers[pick] = readers.get(pick, 0) + 1
    out: dict[str, Assignment] = {}
    for member_id, parts in loads.items():
        assignment: Assignment = {}
        for topic_id, partition in sorted(parts, key=lambda tp: (str(tp[0]), tp[1])):
            assignment.setdefault(topic_id, []).append(partition)
        out[member_id] = assignment
    return out
