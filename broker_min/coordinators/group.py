"""A classic consumer group's state, as Apache Kafka's ``ClassicGroup`` keeps it.

Pure bookkeeping, no I/O and no timers: members and their protocols, the static
instance-id map, members that were handed an id but have not joined yet
(MEMBER_ID_REQUIRED), members whose SyncGroup is still expected, protocol
votes and the state machine.  :mod:`.classic_group_protocol` drives it, under the
:mod:`.group_coordinator` facade.

States and their legal predecessors (Kafka's ``ClassicGroupState``)::

    Empty               <- PreparingRebalance
    PreparingRebalance  <- Stable, CompletingRebalance, Empty
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Dead                <- any
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference


class GroupState(enum.Enum):
    """The classic group states, valued by the names Kafka reports (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


class GroupError(Exception):
    """A request that fails validation; ``code`` is the Kafka error to answer with."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup is answered with (``members`` only for the leader)."""

    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a SyncGroup is answered with."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(eq=False)
class Member:
    """One member of a classic group.

    ``join_waiter`` / ``sync_waiter`` are the futures a parked JoinGroup /
    SyncGroup awaits; a member "awaits join" while its waiter is set, even if the
    client went away (Kafka cannot tell either, and counts it the same way).
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        """This member's metadata for ``protocol`` (empty if it does not support it)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first protocol of this member's preference that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule at session expiry: a member parked in a rebalance needs no heartbeat,
        except a new member, whose JoinGroup may never be answered (it has its own deadline)."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_member_id(client_id: str, group_instance_id: str | None) -> str:
    """``<instance id or client id>-<uuid>``, Kafka's member id format."""
    return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"


@dataclass(eq=False)
class ClassicGroup:
    """A classic group: members, generation, selected protocol and state."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join: set[str] = field(default_factory=set)
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    _votes: Counter[str] = field(default_factory=Counter)

    # -- state ---------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(
                f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members -------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member, waiter: asyncio.Future[JoinResult] | None = None) -> None:
        """Add a member (the first one fixes the group's protocol type and becomes leader)."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"instance {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._votes.update(member.protocol_names())
        member.join_waiter = waiter
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        """Forget a member (or a pending one); a removed leader is replaced by any other member."""
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._votes.subtract(removed.protocol_names())
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)

    def update_member(
        self,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: asyncio.Future[JoinResult] | None,
    ) -> None:
        """A member rejoined (or left, ``waiter`` None): take its new protocols and timeouts."""
        self._votes.subtract(member.protocol_names())
        member.protocols = protocols
        self._votes.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.join_waiter = waiter

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id, keeping its assignment; the old id's parked
        JoinGroup/SyncGroup are answered FENCED_INSTANCE_ID (Kafka's ``replaceStaticMember``)."""
        old = self.members.pop(old_member_id)
        complete_join(old, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        complete_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        new = Member(
            new_member_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> Member:
        """The member, or UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID (an instance id now held by another id)."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                raise GroupError(ErrorCode.unknown_member_id, f"unknown instance id {group_instance_id}")
            if current != member_id:
                raise GroupError(
                    ErrorCode.fenced_instance_id,
                    f"member {member_id} of instance {group_instance_id} was replaced by {current}",
                )
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id, f"unknown member {member_id!r}")
        return member

    # -- rebalance bookkeeping -----------------------------------------------

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return not self.pending_join and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members: how long a join phase may last."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick a member that did; False when none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def supports_protocols(self, protocol_type: str, protocol_names: Sequence[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._votes[name] == size for name in protocol_names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most votes (each member votes for its
        most preferred candidate); ties go to the protocol the earliest member prefers."""
        size = len(self.members)
        candidates = {name for name, count in self._votes.items() if count == size}
        if not self.members or not candidates:
            raise RuntimeError(f"group {self.group_id}: no protocol common to all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name, _ in first.protocols:
            if votes.get(name) == best:
                return name
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self) -> None:
        """Bump the generation and move to CompletingRebalance (or Empty without members)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)
        self.pending_sync.clear()

    def joined_members(self) -> tuple[JoinedMember, ...]:
        """Every member with its metadata for the selected protocol (the leader's JoinGroup answer)."""
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def join_result(self, member: Member) -> JoinResult:
        """A successful JoinGroup answer for ``member`` in the current generation (the leader
        also gets every member's metadata)."""
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            self.joined_members() if self.is_leader(member.member_id) else (),
        )


def complete_join(member: Member, result: JoinResult) -> bool:
    """Answer ``member``'s parked JoinGroup, if any; True if there was one."""
    waiter, member.join_waiter = member.join_waiter, None
    if waiter is None:
        return False
    if not waiter.done():
        waiter.set_result(result)
    return True


def complete_sync(member: Member, result: SyncResult) -> bool:
    """Answer ``member``'s parked SyncGroup, if any; True if there was one."""
    waiter, member.sync_waiter = member.sync_waiter, None
    if waiter is None:
        return False
    if not waiter.done():
        waiter.set_result(result)
    return True
