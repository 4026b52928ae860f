"""A KIP-848 consumer group's state, as Apache Kafka's ``ConsumerGroup`` keeps it, and the
reconciliation of one member towards its target assignment (Kafka's ``CurrentAssignmentBuilder``).

Pure bookkeeping, no I/O and no timers; :mod:`.consumer_group_protocol` drives it.

Epochs:

- the *group epoch* is bumped whenever the assignment must change: a member joins, leaves,
  changes its subscription, or a subscribed topic appears, disappears or grows;
- the *target assignment epoch* is the group epoch the target assignment was computed at
  (by a server-side assignor, :mod:`.server_assignors`);
- each member's *member epoch* reaches the target assignment epoch once it has reconciled:
  it revoked what the target took away from it and was given what the target adds.

Revoke first: a member is given a partition only when no other member still owns it at an
earlier epoch (``partition_epochs``).  Until then that partition is *unreleased* and the member
waits in UNRELEASED_PARTITIONS; the previous owner, told to revoke it, sits in
UNREVOKED_PARTITIONS (keeping its epoch) until a heartbeat no longer lists it as owned.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .consumer_group_records import ClassicMetadata, TopicMetadata

#: topic id -> partitions
Partitions = dict[uuid.UUID, frozenset[int]]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's ``MemberState`` (the byte stored in ConsumerGroupCurrentMemberAssignmentValue)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    """Kafka's ``ConsumerGroupState``, valued by the names it reports."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    """One member of a consumer group (Kafka's ``ConsumerGroupMember``); immutable, replaced on change."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    #: Set for a member that joined with the classic protocol (JoinGroup) in a consumer group.
    classic: ClassicMetadata | None = None
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Every partition this member may still own: assigned and pending revocation."""
        for assignment in (self.assigned, self.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    yield topic_id, p


def is_subset(owned: Mapping[uuid.UUID, Iterable[int]] | None, assigned: Partitions) -> bool:
    """Whether every partition in ``owned`` is in ``assigned`` (False when ``owned`` is None)."""
    if owned is None:
        return False
    return all(set(ps) <= assigned.get(t, frozenset()) for t, ps in owned.items())


@dataclass(eq=False)
class ConsumerGroup:
    """A consumer group: members, epochs, target assignment, who owns which partition."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Partitions] = field(default_factory=dict)  # member id -> target assignment
    #: (topic id, partition) -> epoch of the member owning it (assigned or pending revocation)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    #: The subscribed topics' metadata the target assignment was computed with.
    subscription_metadata: dict[uuid.UUID, TopicMetadata] = field(default_factory=dict)

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's rule: Empty, Assigning (target behind the group epoch), Reconciling, Stable."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's ``computePreferredServerAssignor``)."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])

    # -- members -------------------------------------------------------------------------

    def update_member(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the static map and partition owners in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        for key in member.owned():
            self.partition_epochs[key] = member.member_epoch

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def _release(self, member: ConsumerMember) -> None:
        for key in member.owned():
            if self.partition_epochs.get(key) == member.member_epoch:
                del self.partition_epochs[key]

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self, regex_topics: Mapping[str, Iterable[str]]) -> set[str]:
        """Every topic some member subscribes to, by name or through its regex (resolved in ``regex_topics``)."""
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(regex_topics.get(m.subscribed_topic_regex, ()))
        return names


# -- reconciliation (Kafka's CurrentAssignmentBuilder) ------------------------------------


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    subscribed_topic_ids: set[uuid.UUID],
) -> ConsumerMember:
    """The member's next step towards ``target`` (at ``target_epoch``).

    ``owned`` is what its heartbeat says it owns (None: not sent, unchanged);
    ``partition_epochs`` tells which partitions other members still own.
    """
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epochs, owned, subscribed_topic_ids)
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still owns a partition it must give up: it keeps its epoch and waits
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epochs, owned, subscribed_topic_ids)
    return _next(member, member.member_epoch, target_epoch, target, partition_epochs, owned, subscribed_topic_ids)


def _owns_any(owned: Mapping[uuid.UUID, Iterable[int]] | None, partitions: Partitions) -> bool:
    if owned is None:
        return True  # not reported: assume it still owns them
    return any(set(ps) & partitions.get(t, frozenset()) for t, ps in owned.items())


def _next(
    member: ConsumerMember,
    revoking_epoch: int,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    subscribed_topic_ids: set[uuid.UUID],
) -> ConsumerMember:
    has_unreleased = False
    assigned: Partitions = {}
    revoking: Partitions = {}
    adding: Partitions = {}
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset()) if topic_id in subscribed_topic_ids else frozenset()
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        revoke = current - keep
        pending_own = member.pending_revocation.get(topic_id, frozenset())
        add = set()
        for p in wanted - keep:
            owner_epoch = partition_epochs.get((topic_id, p))
            if owner_epoch is not None and p not in pending_own:
                has_unreleased = True  # another member still owns it: wait for its revocation
            else:
                add.add(p)
        if keep:
            assigned[topic_id] = frozenset(keep)
        if revoke:
            revoking[topic_id] = frozenset(revoke)
        if add:
            adding[topic_id] = frozenset(add)
    if revoking and _owns_any(owned, revoking):
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            previous_member_epoch=member.member_epoch,
            member_epoch=revoking_epoch,
            assigned=assigned,
            pending_revocation=revoking,
        )
    for topic_id, ps in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return replace(
        member,
        state=state,
        previous_member_epoch=member.member_epoch,
        member_epoch=target_epoch,
        assigned=assigned,
        pending_revocation={},
    )
