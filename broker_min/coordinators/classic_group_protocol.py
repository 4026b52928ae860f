"""The classic group type: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalance timers, static members.

A port of the classic-group protocol of Apache Kafka's ``GroupMetadataManager``
(group-coordinator module) to one asyncio loop.  Every operation is a plain
synchronous method that runs to completion on the loop, so no locking is needed;
a JoinGroup or SyncGroup that must wait for the rest of the group returns a future
the handler awaits (the long poll), and other connections keep being served
meanwhile.  :class:`~.group_coordinator.GroupCoordinator` is the facade: it owns
the group table, the offsets and their records, checks which groups are
coordinated here, and hands the classic protocol's requests to
:class:`ClassicGroupProtocol`.

Timers (:mod:`.timers`) mirror Kafka's timer keys, one ``loop.call_later`` handle per key:

- ``("heartbeat", group, member)``: session expiry (a new member's JoinGroup gets
  ``new_member_join_timeout_ms`` instead); re-armed by Heartbeat, OffsetCommit,
  join completion and assignment propagation, and armed afresh for the members of a
  group loaded from ``__consumer_offsets`` (:meth:`ClassicGroupProtocol.on_loaded`);
- ``("join", group)``: the initial rebalance delay of a new/empty group (extended
  while members keep arriving, up to the rebalance timeout), else the rebalance
  timeout after which members that did not rejoin are dropped;
- ``("sync", group)``: members that got their JoinGroup answer but do not send
  SyncGroup within the rebalance timeout are removed and the group rebalances.

Group metadata is appended to ``__consumer_offsets`` (through the coordinator's
``persist``) before the in-memory state changes, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from .group import (
    ClassicGroup,
    GroupError,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    complete_join,
    complete_sync,
    new_member_id,
)
from .group_api import GroupSettings, JoinRequest, SyncRequest, group_metadata_record
from .group_records import GroupKey, GroupValue, encode_group_key, encode_group_value
from .offsets_topic import CoordinatorRecord
from .timers import Timers

log = logging.getLogger("kafkakit.broker.groups")

#: Appends a group's records; None on success, else the error to answer.
Persist = Callable[[str, Sequence[CoordinatorRecord]], ErrorCode | None]


class ClassicGroupProtocol:
    """The classic protocol's membership state machine over the coordinator's groups."""

    def __init__(
        self,
        groups: dict[str, ClassicGroup],
        settings: GroupSettings,
        timers: Timers,
        persist: Persist,
        coordinator_error: Callable[[str], ErrorCode | None],
    ) -> None:
        self.groups = groups
        self.settings = settings
        self._timers = timers
        self._persist = persist
        self.coordinator_error = coordinator_error

    def on_loaded(self, groups: Iterable[ClassicGroup]) -> None:
        """Groups just loaded from ``__consumer_offsets`` (Stable with their members, or Empty):
        arm every member's session as if it had just heartbeated, as Kafka does, so the members
        of a group whose coordinator moved go on with their generation, and those that do not
        come back expire and start a rebalance."""
        for group in groups:
            if group.members:
                log.info(
                    "group %s loaded %s at generation %d with %d member(s)",
                    group.group_id, group.state.value, group.generation_id, len(group.members),
                )  # fmt: skip
            for member in group.members.values():
                self.reschedule_heartbeat(group, member)

    def on_unloaded(self, groups: Mapping[str, ClassicGroup]) -> None:
        """The partition of ``groups`` was unloaded: answer their parked JoinGroup/SyncGroup
        NOT_COORDINATOR and cancel their timers."""
        for group_id, group in groups.items():
            self._timers.cancel_matching(1, group_id)
            for member in group.members.values():
                complete_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
                complete_sync(member, SyncResult(ErrorCode.not_coordinator))
            group.transition_to(GroupState.DEAD)

    # ==================================================================== timers

    def reschedule_heartbeat(
        self, group: ClassicGroup, member: Member, timeout_ms: int | None = None
    ) -> None:
        self._timers.schedule(
            ("heartbeat", group.group_id, member.member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            self._expire_heartbeat,
            group.group_id,
            member.member_id,
        )

    def start_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """Arm every member's session and begin a rebalance (a group just converted from a KIP-848
        consumer group, see :mod:`.consumer_group_classic`)."""
        for member in group.members.values():
            self.reschedule_heartbeat(group, member)
        self._prepare_rebalance(group, reason)

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self._timers.cancel(("heartbeat", group.group_id, member_id))

    # ==================================================================== JoinGroup

    def join(self, request: JoinRequest) -> asyncio.Future[JoinResult]:
        """Handle a JoinGroup; the future resolves when the answer is known (maybe after the join phase)."""
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        error = self._check_join(request) or self.coordinator_error(request.group_id)
        if error is not None:
            future.set_result(JoinResult(error, request.member_id))
            return future
        is_unknown_member = request.member_id == ""
        group = self.groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                future.set_result(JoinResult(ErrorCode.unknown_member_id, request.member_id))
                return future
            group = self._create_group(request.group_id)
            if group is None:
                future.set_result(JoinResult(ErrorCode.coordinator_not_available, request.member_id))
                return future
        if is_unknown_member:
            self._join_new_member(group, request, future)
        else:
            self._join_existing_member(group, request, future)
        return future

    def _check_join(self, request: JoinRequest) -> ErrorCode | None:
        if not request.group_id:
            return ErrorCode.invalid_group_id
        settings = self.settings
        if (
            not settings.min_session_timeout_ms
            <= request.session_timeout_ms
            <= settings.max_session_timeout_ms
        ):
            return ErrorCode.invalid_session_timeout
        return None

    def _create_group(self, group_id: str) -> ClassicGroup | None:
        """A new group, committed to the log with Kafka's "empty group" record first."""
        group = ClassicGroup(group_id)
        empty = GroupValue("", 0, None, None, group.state_timestamp_ms, ())
        if (
            self._persist(group_id, [(encode_group_key(GroupKey(group_id)), encode_group_value(empty))])
            is not None
        ):
            return None
        self.groups[group_id] = group
        return group

    def _join_new_member(
        self, group: ClassicGroup, request: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            future.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, ""))
            return
        member_id = new_member_id(request.client_id, request.group_instance_id)
        instance_id = request.group_instance_id
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is not None:
                log.info(
                    "group %s: static member %s rejoins in %s; replacing member id %s",
                    group.group_id,
                    instance_id,
                    group.state.value,
                    existing,
                )
                self._replace_static_member(group, request, existing, member_id, future)
            else:
                self._add_member_and_rebalance(group, request, member_id, future)
        elif request.require_known_member_id:
            # The id must come back in a second JoinGroup; until then it only holds a session.
            group.pending_join.add(member_id)
            self._timers.schedule(
                ("heartbeat", group.group_id, member_id),
                request.session_timeout_ms,
                self._expire_heartbeat,
                group.group_id,
                member_id,
            )
            future.set_result(JoinResult(ErrorCode.member_id_required, member_id))
        else:
            self._add_member_and_rebalance(group, request, member_id, future)

    def _join_existing_member(
        self, group: ClassicGroup, request: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        member_id = request.member_id
        if not group.supports_protocols(request.protocol_type, [name for name, _ in request.protocols]):
            future.set_result(JoinResult(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if member_id in group.pending_join:
            self._add_member_and_rebalance(group, request, member_id, future)
            return
        try:
            member = group.validate_member(member_id, request.group_instance_id)
        except GroupError as exc:
            future.set_result(JoinResult(exc.code, member_id))
            return
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, request, future)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # It probably missed its JoinGroup answer: give it the current generation again.
                future.set_result(group.join_result(member))
            else:
                self._update_member_and_rebalance(group, member, request, future)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # The leader rejoining is how it asks for a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(group, member, request, future)
            else:
                future.set_result(group.join_result(member))
        else:
            future.set_result(JoinResult(ErrorCode.unknown_member_id, member_id))

    def _add_member_and_rebalance(
        self, group: ClassicGroup, request: JoinRequest, member_id: str, future: asyncio.Future[JoinResult]
    ) -> None:
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocol_type,
            request.protocols,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True  # lets the initial rebalance delay be extended
        group.add(member, future)
        # A new member cannot heartbeat while its JoinGroup is parked; it gets a longer deadline.
        self.reschedule_heartbeat(group, member, self.settings.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding member {member_id}")

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: Member, request: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        _supersede_join(member)
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms, future
        )
        self._maybe_prepare_rebalance_or_complete_join(group, f"member {member.member_id} rejoined")

    def _replace_static_member(
        self,
        group: ClassicGroup,
        request: JoinRequest,
        old_member_id: str,
        new_member_id: str,
        future: asyncio.Future[JoinResult],
    ) -> None:
        """KIP-345: a known instance id rejoining with no member id takes over the old member."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        previous_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._cancel_heartbeat(group, old_member_id)
        self.reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms, future
        )
        if group.is_in(GroupState.STABLE):
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {instance_id} changed protocols"
                )
                return
            # Same protocol: no rebalance.  Persist the new member id, then hand back the
            # current generation; the leader named is the previous one, so a rejoining leader
            # acts as a follower and SyncGroup returns the assignment it already had.
            assignment = {m.member_id: m.assignment for m in group.members.values()}
            error = self._persist(group.group_id, [group_metadata_record(group, assignment)])
            if error is not None:
                member.join_waiter = None
                group.update_member(member, old_protocols, *old_timeouts, None)
                restored = group.replace_static_member(instance_id, new_member_id, old_member_id)
                self._cancel_heartbeat(group, new_member_id)
                self.reschedule_heartbeat(group, restored)
                future.set_result(JoinResult(error, ""))
                return
            complete_join(
                member,
                JoinResult(
                    ErrorCode.none,
                    new_member_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    previous_leader or "",
                ),
            )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        else:
            self._maybe_complete_join_phase(group)

    # ==================================================================== rebalance machinery

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, ErrorCode.rebalance_in_progress)
        self._remove_sync_expiration(group)
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self.settings.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._timers.schedule(
                ("join", group.group_id),
                delay,
                self._try_complete_initial_rebalance,
                group.group_id,
                delay,
                remaining,
            )
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info(
            "group %s preparing to rebalance from generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._timers.schedule(
                ("join", group.group_id),
                group.rebalance_timeout_ms(),
                self._complete_join_by_id,
                group.group_id,
            )

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            # Members are still arriving: wait one more delay, within the rebalance timeout.
            group.new_member_added = False
            next_delay = min(self.settings.initial_rebalance_delay_ms, remaining_ms)
            next_remaining = max(remaining_ms - delay_ms, 0)
            self._timers.schedule(
                ("join", group_id),
                next_delay,
                self._try_complete_initial_rebalance,
                group_id,
                next_delay,
                next_remaining,
            )
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        """Complete the join phase now if every member rejoined (never during the initial delay)."""
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(GroupState.PREPARING_REBALANCE):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation,
        answer every parked JoinGroup and wait for SyncGroups."""
        self._timers.cancel(("join", group.group_id))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "group %s: removing member %s, which did not rejoin", group.group_id, member.member_id
                )
                self._remove_member(group, member)
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them (or their expiry).
            self._timers.schedule(
                ("join", group.group_id),
                group.rebalance_timeout_ms(),
                self._complete_join_by_id,
                group.group_id,
            )
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            if self._persist(group.group_id, [group_metadata_record(group, {})]) is not None:
                log.warning("group %s: could not store its empty metadata", group.group_id)
            return
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in list(group.members.values()):
            complete_join(member, group.join_result(member))
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._timers.schedule(
            ("sync", group.group_id),
            group.rebalance_timeout_ms(),
            self._expire_pending_sync,
            group.group_id,
            group.generation_id,
        )

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync:
            missing = sorted(group.pending_sync)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._remove_member(group, member)
            self._prepare_rebalance(group, f"members {missing} sent no SyncGroup")

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync.clear()
        self._timers.cancel(("sync", group.group_id))

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: Mapping[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in list(group.members.values()):
            result = SyncResult(
                error,
                member.assignment,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
            )
            if complete_sync(member, result):
                # Expiries that fired while it waited were ignored; give it a fresh session.
                self.reschedule_heartbeat(group, member)

    def _remove_member(self, group: ClassicGroup, member: Member) -> None:
        """Drop a member, answering whatever it has parked with UNKNOWN_MEMBER_ID."""
        self._cancel_heartbeat(group, member.member_id)
        complete_join(member, JoinResult(ErrorCode.unknown_member_id, ""))
        complete_sync(member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if member_id in group.pending_join:
            log.info("group %s: pending member %s never rejoined; dropping it", group_id, member_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: session of member %s expired; removing it", group_id, member_id)
        self._remove_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, f"member {member_id} session expired")
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # ==================================================================== SyncGroup

    def sync(self, request: SyncRequest) -> asyncio.Future[SyncResult]:
        """Handle a SyncGroup; followers' futures resolve when the leader's assignment is stored."""
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        error = ErrorCode.invalid_group_id if not request.group_id else self.coordinator_error(request.group_id)
        if error is not None:
            future.set_result(SyncResult(error))
            return future
        group = self.groups.get(request.group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            future.set_result(SyncResult(ErrorCode.unknown_member_id))
            return future
        try:
            member = group.validate_member(request.member_id, request.group_instance_id)
            if request.generation_id != group.generation_id:
                raise GroupError(ErrorCode.illegal_generation)
            if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(
                request.protocol_name, group.protocol_name
            ):
                raise GroupError(ErrorCode.inconsistent_group_protocol)
        except GroupError as exc:
            future.set_result(SyncResult(exc.code))
            return future
        if group.is_in(GroupState.PREPARING_REBALANCE):
            future.set_result(SyncResult(ErrorCode.rebalance_in_progress))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            _supersede_sync(member)
            member.sync_waiter = future
            self._remove_pending_sync(group, member.member_id)
            if group.is_leader(member.member_id):
                self._store_leader_assignment(group, request)
        else:  # Stable: it already has its assignment
            self._remove_pending_sync(group, member.member_id)
            future.set_result(
                SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name)
            )
        return future

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._timers.cancel(("sync", group.group_id))

    def _store_leader_assignment(self, group: ClassicGroup, request: SyncRequest) -> None:
        assignment = dict(request.assignments)
        missing = [m for m in group.members if m not in assignment]
        for member_id in missing:
            assignment[member_id] = b""
        if missing:
            log.warning(
                "group %s generation %d: empty assignment for %s",
                group.group_id,
                group.generation_id,
                missing,
            )
        # Members that are not in the group are dropped from what is stored and sent.
        assignment = {m: assignment[m] for m in group.members}
        error = self._persist(group.group_id, [group_metadata_record(group, assignment)])
        if error is not None:
            self._reset_and_propagate_assignment(group, error)
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"storing the assignment failed ({error.name})"
            )
            return
        self._set_and_propagate_assignment(group, assignment)
        group.transition_to(GroupState.STABLE)

    # ==================================================================== Heartbeat

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Keep a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        if not group_id:
            return ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        try:
            member = group.validate_member(member_id, group_instance_id)
        except GroupError as exc:
            return exc.code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self.reschedule_heartbeat(group, member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ==================================================================== LeaveGroup

    def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """Remove members by member id, or by instance id with an empty member id (v3+ batch leave).

        Returns the top-level error and (member id, instance id, error) per member.
        """
        if not group_id:
            return ErrorCode.invalid_group_id, []
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
        answers: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in members:
            answers.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        if any(error is ErrorCode.none for _, _, error in answers):
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, "members left")
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.none, answers

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == "":
            # Administrative removal of a static member by its instance id.
            current = group.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                return ErrorCode.unknown_member_id
            log.info("group %s: static member %s (%s) left", group.group_id, instance_id, current)
            self._remove_member(group, group.members[current])
            return ErrorCode.none
        if member_id in group.pending_join:
            group.remove(member_id)
            self._cancel_heartbeat(group, member_id)
            return ErrorCode.none
        try:
            member = group.validate_member(member_id, instance_id)
        except GroupError as exc:
            return exc.code
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member(group, member)
        return ErrorCode.none


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and requested != current


def _supersede_join(member: Member) -> None:
    """A second JoinGroup from a member replaces its parked one, which is told to rejoin."""
    if member.join_waiter is not None and not member.join_waiter.done():
        member.join_waiter.set_result(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
    member.join_waiter = None


def _supersede_sync(member: Member) -> None:
    if member.sync_waiter is not None and not member.sync_waiter.done():
        member.sync_waiter.set_result(SyncResult(ErrorCode.rebalance_in_progress))
    member.sync_waiter = None
