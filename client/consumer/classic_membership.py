"""The classic consumer group protocol (KIP-62/345/429): one member's state machine and heartbeats.

:class:`ClassicMembership` is one consumer's membership in a group that speaks
the classic protocol, over the connection to the group's coordinator
(:mod:`.coordinator`). It runs two tasks:

- the *main loop* joins the group whenever needed (JoinGroup, the leader's
  assignment, SyncGroup), applies the assignment to the fetcher with the
  rebalance listener's callbacks, auto-commits (:mod:`.offset_commits`), and
  watches metadata (pattern subscriptions, partition counts);
- the *heartbeat loop* heartbeats every ``heartbeat_interval_ms`` while the
  member is stable, turns broker errors into rejoins, and leaves the group when
  the application stops polling for longer than ``max_poll_interval_ms``.

Rebalance protocol: *eager* revokes every partition before JoinGroup;
*cooperative* (KIP-429) keeps consuming during the rebalance, revokes only the
partitions that moved after SyncGroup and then rejoins at once so a second
round hands them to their new owners. The group's protocol follows the
assignor the coordinator selected: cooperative only when it supports it (so
only when every member offered a cooperative assignor).

Static membership (KIP-345): a member with ``group_instance_id`` sends no
LeaveGroup on a poll timeout or unsubscribe (the coordinator keeps its
partitions until the session timeout), and is fenced for good when another
consumer joins with the same instance id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalStateError,
    KafkaError,
    RebalanceInProgressError,
    for_code,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

from .assignors import Assignment, PartitionAssignor, decode_assignment
from .classic_assignment import (
    find_assignor,
    is_cooperative,
    join_protocols,
    leader_assignment,
    member_subscriptions,
    partition_counts,
)
from .coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_MOVED,
    FATAL_GROUP_ERRORS,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    CoordinatorConnection,
)
from .fetcher import Fetcher
from .group_config import NO_GENERATION, GroupConfig, GroupMetadata
from .membership_lifecycle import MembershipLifecycle, MemberState, _wait
from .subscription import ConsumerRebalanceListener, SubscriptionState

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes

PROTOCOL_TYPE = "consumer"


class ClassicMembership(MembershipLifecycle):
    """One consumer's membership in a classic-protocol group: joins, rebalances, heartbeats, leaving."""

    def __init__(
        self,
        cluster: Cluster,
        subscription: SubscriptionState,
        fetcher: Fetcher,
        config: GroupConfig,
        coordinator: CoordinatorConnection,
    ) -> None:
        super().__init__(cluster, subscription, fetcher, config, coordinator)
        self._request_timeout = config.request_timeout_ms / 1000
        # Membership.
        self.state = MemberState.UNJOINED
        self.generation_id = NO_GENERATION
        self.member_id = ""
        self.protocol_name: str | None = None
        self._rejoin_needed = True
        self._leader_snapshot: dict[str, int] | None = None
        self._last_heartbeat_ok = time.monotonic()
        self._next_metadata_check = 0.0

    # -- lifecycle -----------------------------------------------------------

    async def _stop_for_close(self) -> Callable[[], Awaitable[None]]:
        """Stop the tasks, abandoning a JoinGroup/SyncGroup in flight; then LeaveGroup if configured."""
        joining = self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)
        await self._cancel_tasks()
        if joining:
            # A JoinGroup/SyncGroup long poll would hold LeaveGroup behind it on the same connection.
            self._coordinator.drop("closing during a rebalance")
            if self.state is MemberState.PREPARING_REBALANCE and self.generation_id != NO_GENERATION:
                # The JoinGroup was abandoned: our generation is still the group's, so commits
                # of the partitions we give up (on a fresh connection) are still accepted.
                self.state = MemberState.STABLE

        async def leave() -> None:
            if self.generation_id != NO_GENERATION or joining:
                if self._config.leave_group_on_close:
                    await self._leave_group("the consumer is being closed")

        return leave

    # -- what the consumer calls ------------------------------------------------

    def subscription_changed(self) -> None:
        """subscribe()/unsubscribe() was called: rejoin (or leave) on the group task."""
        self._next_metadata_check = 0.0
        self._wakeup.set()

    def unsubscribe(self, listener: ConsumerRebalanceListener | None) -> None:
        """Drop the assignment at once; ``listener``, the commit and LeaveGroup run in the background."""
        owned = set(self._assigned)
        positions = self._positions(owned)
        self._assigned = set()
        self._fetcher.assign([])
        generation, member_id = self.generation_id, self.member_id
        if self.rebalance_in_progress:
            # Abandon the JoinGroup/SyncGroup in flight (and its connection, which it would block).
            self._coordinator.drop("unsubscribed during a rebalance")
        self._restart_main_task()
        self.reset_generation(reset_member_id=True, reason="unsubscribed")
        self.state = MemberState.UNJOINED
        self._rejoin_needed = True
        task = asyncio.create_task(
            self._finish_unsubscribe(listener, owned, positions, generation, member_id)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _restart_main_task(self) -> None:
        if self._main_task is not None and not self._main_task.done():
            self._main_task.cancel()
            self._background.add(self._main_task)
            self._main_task.add_done_callback(self._background.discard)
            self._main_task = asyncio.create_task(self._main_loop(), name="kafkakit-group")

    async def _finish_unsubscribe(
        self,
        listener: ConsumerRebalanceListener | None,
        owned: set[TopicPartition],
        positions: dict[TopicPartition, OffsetAndMetadata],
        generation: int,
        member_id: str,
    ) -> None:
        try:
            if owned and generation != NO_GENERATION:
                if self._config.enable_auto_commit and positions:
                    await self.offsets.commit_quietly(positions, generation, member_id)
                await self._call_listener("on_partitions_revoked", owned, listener)
            if generation != NO_GENERATION and self._config.group_instance_id is None:
                await self._leave_group("the consumer unsubscribed", member_id=member_id)
        except KafkaError as exc:
            log.warning("group %s: unsubscribe: %s", self._config.group_id, exc)

    def request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed:
            log.info("group %s: rejoining: %s", self._config.group_id, reason)
        self._rejoin_needed = True
        self._wakeup.set()

    def group_metadata(self) -> GroupMetadata:
        return GroupMetadata(
            self._config.group_id, self.generation_id, self.member_id, self._config.group_instance_id
        )

    @property
    def rejoin_needed(self) -> bool:
        """Whether the member must (re)join the group at the next chance."""
        return self._rejoin_needed

    @property
    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    # -- the main loop ----------------------------------------------------------------

    async def _main_loop(self) -> None:
        while not self._closing:
            self._wakeup.clear()
            try:
                if self._needs_join():
                    await self._rebalance()
                    continue
                await self._check_metadata()
                await self._maybe_auto_commit()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                if self._is_fatal(exc):
                    self.set_fatal(exc)
                    return
                log.warning("group %s: %s; retrying", self._config.group_id, exc)
                await asyncio.sleep(self._backoff)
                continue
            except Exception:
                log.exception("group %s: unexpected error", self._config.group_id)
                await asyncio.sleep(self._backoff)
                continue
            await _wait(self._wakeup, self._seconds_to_next_task())

    def _needs_join(self) -> bool:
        if not self._subscription.group_managed or self._waiting_for_poll:
            return False
        if self._subscription.version != self._subscription_version:
            return True
        return self._rejoin_needed or self.state is MemberState.UNJOINED

    def _seconds_to_next_task(self) -> float:
        now = time.monotonic()
        waits = [self._next_metadata_check - now] if self._subscription.group_managed else []
        if self._config.enable_auto_commit:
            waits.append(self.offsets.next_auto_commit - now)
        return max(0.01, min(waits, default=1.0))  # a floor: auto_commit_interval_ms may be 0

    @staticmethod
    def _is_fatal(exc: KafkaError) -> bool:
        """Errors no retry fixes: fencing, bad group settings, authorization, a full group."""
        return isinstance(exc, FencedInstanceIdError) or getattr(exc, "code", None) in FATAL_GROUP_ERRORS

    def set_fatal(self, exc: KafkaError) -> None:
        log.error("group %s: fatal error: %s", self._config.group_id, exc)
        self._fatal = exc
        self.state = MemberState.UNJOINED
        self._fetcher.wake_waiters()

    # -- metadata watching ------------------------------------------------------------

    async def _check_metadata(self) -> None:
        """Pattern subscriptions pick up new topics; the leader rejoins when partition counts change."""
        if not self._subscription.group_managed or time.monotonic() < self._next_metadata_check:
            return
        self._next_metadata_check = time.monotonic() + self._cluster.metadata_max_age
        if self._subscription.pattern is not None:
            response = await self._cluster.fetch_all_topics_metadata()
            names = [
                t.name
                for t in response.topics
                if not int(t.error_code) and not getattr(t, "is_internal", False)
            ]
            if self._subscription.match_topics(names):
                self.request_rejoin(f"pattern now matches {sorted(self._subscription.topics)}")
                return
        if self._leader_snapshot is not None and self.state is MemberState.STABLE:
            await self._cluster.refresh_metadata(self._leader_snapshot)
            if self._partition_counts(self._leader_snapshot) != self._leader_snapshot:
                self.request_rejoin("partition counts of subscribed topics changed")

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        return partition_counts(self._cluster.metadata, topics)

    # -- one rebalance ----------------------------------------------------------------

    async def _rebalance(self) -> None:
        """Prepare (revoke or lose), then JoinGroup/SyncGroup until one round completes, then apply it."""
        started = time.monotonic()
        metrics = self.metrics
        self._subscription_version = self._subscription.version
        if self._subscription.pattern is not None and not self._subscription.topics:
            response = await self._cluster.fetch_all_topics_metadata()
            self._subscription.match_topics(
                t.name
                for t in response.topics
                if not int(t.error_code) and not getattr(t, "is_internal", False)
            )
        await self._join_prepare()
        while not self._closing:
            if self.generation_id == NO_GENERATION and self._assigned:
                await self._lose(set(self._assigned))  # a failed round ended our generation
            self._rejoin_needed = False
            self.state = MemberState.PREPARING_REBALANCE
            round_started = time.monotonic()
            join = await self._join_round()
            if join is None:
                continue
            if metrics is not None:
                metrics.joined(round_started)
            self.state = MemberState.COMPLETING_REBALANCE
            round_started = time.monotonic()
            assignment = await self._sync_round(join)
            if assignment is None:
                continue
            if metrics is not None:
                metrics.synced(round_started)
            self.state = MemberState.STABLE
            self._last_heartbeat_ok = time.monotonic()
            self._heartbeat_wakeup.set()
            self.rebalances += 1
            await self._join_complete(assignment)
            if metrics is not None:
                metrics.rebalanced(started)
            return

    async def _join_prepare(self) -> None:
        """Before JoinGroup: commit, then revoke (eager: everything) or report lost partitions."""
        owned = set(self._assigned)
        if not owned:
            return
        if self.generation_id == NO_GENERATION:
            await self._lose(owned)
        elif not self._cooperative():
            await self._revoke(owned)
        else:
            unsubscribed = {tp for tp in owned if tp.topic not in self._subscription.topics}
            if unsubscribed:
                await self._revoke(unsubscribed)

    def _cooperative(self, protocol_name: str | None = None) -> bool:
        name = protocol_name if protocol_name is not None else self.protocol_name
        return is_cooperative(self._assignor(name) if name is not None else None)

    def _assignor(self, name: str | None) -> PartitionAssignor | None:
        return find_assignor(self._config.assignors, name)

    async def _join_round(self) -> Any | None:
        """Send JoinGroup; the response on success, None to try again."""
        topics = sorted(self._subscription.topics)
        owned = sorted(self._assigned)
        protocols = join_protocols(self._config.assignors, topics, owned, self.generation_id)
        config = self._config
        try:
            response = await self._coordinator.send(
                ApiKey.JOIN_GROUP,
                # The coordinator holds JoinGroup until every member rejoined (up to the rebalance timeout).
                timeout=max(self._request_timeout, config.rebalance_timeout_ms / 1000 + 5),
                group_id=config.group_id,
                session_timeout=config.session_timeout_ms,
                rebalance_timeout=config.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=config.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=protocols,
                reason=None,
            )
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("group %s: JoinGroup failed: %s", config.group_id, exc)
            await asyncio.sleep(self._backoff)
            return None
        code = int(response.error_code)
        if code == 0:
            self.generation_id = int(response.generation_id)
            self.member_id = response.member_id
            self.protocol_name = response.protocol_name
            log.info(
                "group %s: joined generation %s as %s (%s, protocol %s)",
                config.group_id,
                self.generation_id,
                self.member_id,
                "leader" if response.leader == self.member_id else "follower",
                self.protocol_name,
            )
            return response
        if code == MEMBER_ID_REQUIRED:
            self.member_id = response.member_id  # KIP-394: rejoin with the id the coordinator chose
            return None
        self._handle_group_error(code, "JoinGroup")
        return None

    async def _sync_round(self, join: Any) -> Assignment | None:
        """Send SyncGroup (the leader with every member's assignment); the assignment, or None to rejoin."""
        assignments: dict[str, bytes] = {}
        if join.leader == self.member_id:
            assignments = await self._perform_assignment(join)
        try:
            response = await self._coordinator.send(
                ApiKey.SYNC_GROUP,
                timeout=max(self._request_timeout, self._config.rebalance_timeout_ms / 1000 + 5),
                group_id=self._config.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self._config.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol_name,
                assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()],
            )
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("group %s: SyncGroup failed: %s", self._config.group_id, exc)
            await asyncio.sleep(self._backoff)
            return None
        code = int(response.error_code)
        if code:
            self._handle_group_error(code, "SyncGroup")
            return None
        return decode_assignment(response.assignment or b"")

    def _handle_group_error(self, code: int, api: str) -> None:
        """React to a JoinGroup/SyncGroup error so the next round can succeed, or raise a fatal one."""
        group = self._config.group_id
        if code in COORDINATOR_MOVED:
            self._coordinator.drop(f"{api}: error {code}")
        elif code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            log.info("group %s: %s: %s; rejoining as a new member", group, api, for_code(code)())
            self.reset_generation(reset_member_id=True, reason=api)
        elif code in (REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS):
            pass  # rejoin right away (REBALANCE_IN_PROGRESS) or once the coordinator is loaded
        elif code == FENCED_INSTANCE_ID:
            raise self.fenced(api)
        else:
            raise for_code(code)(f"{api} for group {group!r}")

    def reset_generation(self, *, reset_member_id: bool, reason: str) -> None:
        self.generation_id = NO_GENERATION
        if reset_member_id:
            self.member_id = ""
        self._leader_snapshot = None
        if self.state is MemberState.STABLE:
            self.state = MemberState.UNJOINED
        if not self._closing:
            self.request_rejoin(reason)

    async def _perform_assignment(self, join: Any) -> dict[str, bytes]:
        """The leader's job: run the selected assignor over every member's subscription."""
        assignor = self._assignor(join.protocol_name)
        if assignor is None:
            raise IllegalStateError(
                f"the coordinator selected assignor {join.protocol_name!r} that we did not offer"
            )
        subscriptions = member_subscriptions(join.members)
        topics = sorted({t for sub in subscriptions.values() for t in sub.topics})
        await self._cluster.refresh_metadata(topics)
        counts = self._partition_counts(topics)
        self._leader_snapshot = counts
        return leader_assignment(assignor, counts, subscriptions, group_id=self._config.group_id)

    async def _join_complete(self, assignment: Assignment) -> None:
        """Apply a new assignment: revoke what moved away, assign what arrived, run the listener."""
        assignor = self._assignor(self.protocol_name)
        if assignor is not None:
            assignor.on_assignment(assignment, self.generation_id)
        new = set(assignment.partitions)
        owned = set(self._assigned)
        cooperative = self._cooperative()
        if cooperative:
            revoked = owned - new
        else:
            revoked = owned  # we prepared for a cooperative round but the group chose an eager assignor
        if revoked:
            await self._revoke(revoked)
        added = new - self._assigned
        self._assigned = new
        self._fetcher.assign(sorted(new))
        log.info(
            "group %s: generation %s: assigned %s (added %s, revoked %s)",
            self._config.group_id,
            self.generation_id,
            sorted(new),
            sorted(added),
            sorted(revoked),
        )
        await self._call_listener("on_partitions_assigned", added)
        if cooperative and revoked:
            self.request_rejoin("partitions were revoked: a second round hands them to their new owners")

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Stop handing out ``partitions``, commit their positions (auto-commit), call the listener, drop them."""
        for tp in partitions:
            self._fetcher.pause_if_assigned(tp)
        if self._config.enable_auto_commit:
            positions = self._positions(partitions)
            if positions:
                await self.offsets.commit_quietly(positions, self.generation_id, self.member_id)
        await self._call_listener("on_partitions_revoked", partitions)
        self._assigned -= partitions
        self._fetcher.assign(sorted(self._assigned))

    async def _lose(self, partitions: set[TopicPartition]) -> None:
        """Partitions of a generation we no longer belong to: no commit, ``on_partitions_lost``."""
        await self._call_listener("on_partitions_lost", partitions)
        self._assigned -= partitions
        self._fetcher.assign(sorted(self._assigned))

    async def _leave_prepare(self) -> None:
        """On close: commit (auto-commit) and revoke everything, or report it lost without a generation."""
        owned = set(self._assigned)
        if not self._subscription.group_managed:
            if self._config.enable_auto_commit:
                positions = self._positions(self._fetcher.assignment())
                if positions:
                    await self.offsets.commit_quietly(positions, NO_GENERATION, "")
            return
        if not owned:
            return
        if self.generation_id == NO_GENERATION:
            await self._lose(owned)
        else:
            await self._revoke(owned)

    async def _leave_group(self, reason: str, *, member_id: str | None = None) -> None:
        member = self.member_id if member_id is None else member_id
        if not member:
            return
        log.info("group %s: leaving (%s)", self._config.group_id, reason)
        try:
            response = await self._coordinator.send(
                ApiKey.LEAVE_GROUP,
                group_id=self._config.group_id,
                member_id=member,
                members=[
                    {
                        "member_id": member,
                        "group_instance_id": self._config.group_instance_id,
                        "reason": reason,
                    }
                ],
            )
        except KafkaError as exc:
            log.info("group %s: LeaveGroup failed: %s", self._config.group_id, exc)
            return
        code = int(response.error_code)
        for m in getattr(response, "members", ()):
            code = code or int(m.error_code)
        if code and code != UNKNOWN_MEMBER_ID:
            log.info("group %s: LeaveGroup: %s", self._config.group_id, for_code(code)())
        if member_id is None:
            self.reset_generation(reset_member_id=True, reason=reason)

    # -- heartbeats and the poll timeout ------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self._config.heartbeat_interval_ms / 1000
        while not self._closing:
            self._heartbeat_wakeup.clear()
            delay = interval
            if self.state is MemberState.STABLE and self._fatal is None:
                if self._poll_timed_out():
                    await self._leave_for_poll_timeout()
                else:
                    try:
                        delay = await self._heartbeat()
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("group %s: heartbeat failed", self._config.group_id)
                        delay = self._backoff
            await _wait(self._heartbeat_wakeup, delay)

    async def _leave_after_poll_timeout(self) -> None:
        """LeaveGroup, or for a static member only a new generation (the coordinator keeps its partitions)."""
        if self._config.group_instance_id is None:
            await self._leave_group("consumer poll timeout has expired")
        else:
            self.reset_generation(reset_member_id=True, reason="consumer poll timeout has expired")

    async def _heartbeat(self) -> float:
        """One heartbeat; returns the seconds until the next one."""
        generation, member = self.generation_id, self.member_id
        sent_at = time.monotonic() if self.metrics is None else self.metrics.heartbeat_sent()
        try:
            response = await self._coordinator.send(
                ApiKey.HEARTBEAT,
                group_id=self._config.group_id,
                generation_id=generation,
                member_id=member,
                group_instance_id=self._config.group_instance_id,
            )
        except KafkaError as exc:
            log.info("group %s: heartbeat failed: %s", self._config.group_id, exc)
            self._check_session_expiry()
            return self._backoff
        if self.metrics is not None:
            self.metrics.heartbeat_answered(sent_at)
        if generation != self.generation_id or self.state is not MemberState.STABLE:
            return self._config.heartbeat_interval_ms / 1000  # a rebalance started meanwhile
        code = int(response.error_code)
        if code == 0:
            self._last_heartbeat_ok = time.monotonic()
        elif code == REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif code in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
            self.reset_generation(reset_member_id=True, reason=f"heartbeat: {for_code(code)()}")
        elif code == FENCED_INSTANCE_ID:
            self.set_fatal(self.fenced("Heartbeat"))
        elif code in COORDINATOR_MOVED:
            self._coordinator.drop(f"heartbeat: error {code}")
            return self._backoff
        else:
            log.warning("group %s: heartbeat: %s", self._config.group_id, for_code(code)())
            self._check_session_expiry()
            return self._backoff
        return self._config.heartbeat_interval_ms / 1000

    def _check_session_expiry(self) -> None:
        if time.monotonic() - self._last_heartbeat_ok > self._config.session_timeout_ms / 1000:
            # The coordinator has surely expired us: look it up again and rejoin.
            self._coordinator.drop("no successful heartbeat within the session timeout")
            self._last_heartbeat_ok = time.monotonic()

    # -- offsets ------------------------------------------------------------------

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        return self._fetcher.committable(partitions)

    async def _maybe_auto_commit(self) -> None:
        if not self.offsets.auto_commit_due():
            return
        if self._subscription.group_managed:
            if self.state is not MemberState.STABLE:
                return
            positions = self._positions(self._assigned)
            generation, member = self.generation_id, self.member_id
        else:
            positions = self._positions(self._fetcher.assignment())
            generation, member = NO_GENERATION, ""
        await self.offsets.auto_commit(positions, generation, member)

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit ``offsets`` for this member's current generation (see Consumer.commit)."""
        if self._fatal is not None:
            raise self._fatal
        if self._subscription.group_managed:
            if self.state is not MemberState.STABLE or self.generation_id == NO_GENERATION:
                if self.rebalance_in_progress or (self._rejoin_needed and not self._waiting_for_poll):
                    raise RebalanceInProgressError(
                        "the group is rebalancing; commit the partitions you give up in "
                        "on_partitions_revoked, or retry after the next getmany"
                    )
                raise CommitFailedError(
                    "this consumer is not part of an active group generation (it was removed after a "
                    "session or poll timeout); its partitions may belong to another member"
                )
            await self.offsets.commit_offsets(offsets, self.generation_id, self.member_id)
        else:
            await self.offsets.commit_offsets(offsets, NO_GENERATION, "")


