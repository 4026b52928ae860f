"""KIP-848's consumer group protocol: one member's heartbeats and reconciliation.

:class:`ConsumerMembership` is one consumer's membership in a group that speaks
the "consumer" protocol (``Consumer(group_protocol="consumer")``). The broker
computes the assignment; the member only heartbeats and reconciles:

- the *heartbeat loop* sends ConsumerGroupHeartbeat (API key 68) every
  ``heartbeat_interval`` the broker asks for, and at once when it joins, acks a
  reconciliation or changes its subscription. The first heartbeat of a
  membership, and the first after a failed one, is *full*; the others send the
  fields that did not change since the last one as null (the broker keeps them).
  The member id is generated here once for the consumer's lifetime (KIP-1082,
  v1+); the member epoch is the broker's.
- the *main loop* reconciles the member's target assignment (topic ids, named
  through metadata) revoke-before-assign: partitions that move away are paused,
  their positions committed (auto-commit) and handed to ``on_partitions_revoked``
  before the heartbeat that acknowledges them; new ones are assigned and handed
  to ``on_partitions_assigned``. It also auto-commits.

FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID drop the assignment (``on_partitions_lost``)
and rejoin with epoch 0, as the Java client does. Leaving sends epoch -1, or -2
for a static member (``group_instance_id``), which keeps its partitions for its
restart within the session timeout. Errors no retry fixes (UNSUPPORTED_VERSION,
UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST,
UNSUPPORTED_ASSIGNOR, authorization...) end the membership and are raised from
getmany/getone/iteration.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    CommitFailedError,
    GroupProtocolUnsupportedError,
    KafkaError,
    UnsupportedVersionError,
    for_code,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

from .coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_MOVED,
    UNKNOWN_MEMBER_ID,
    CoordinatorConnection,
)
from .fetcher import Fetcher
from .group_config import NO_GENERATION, GroupConfig, GroupMetadata
from .membership_lifecycle import MembershipLifecycle, MemberState, _wait
from .subscription import ConsumerRebalanceListener, SubscriptionState

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes

UNSUPPORTED_VERSION = 35
FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113
#: Epochs a member sends: to join, to leave, to leave as a static member that comes back.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2
#: Until the broker's first answer says otherwise.
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000

_USE_CLASSIC = (
    'the group coordinator does not support the consumer group protocol (KIP-848, '
    'ConsumerGroupHeartbeat); use group_protocol="classic", or a broker with it enabled '
    "(Apache Kafka 4.0+ with the group.version feature at 1 or more)"
)

TopicIdPartitions = dict[uuid.UUID, frozenset[int]]


def new_member_id() -> str:
    """A member id as the Java client makes one (a random UUID, URL-safe base64, 22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerMembership(MembershipLifecycle):
    """One consumer's membership in a KIP-848 ("consumer" protocol) group."""

    def __init__(
        self,
        cluster: Cluster,
        subscription: SubscriptionState,
        fetcher: Fetcher,
        config: GroupConfig,
        coordinator: CoordinatorConnection,
    ) -> None:
        super().__init__(cluster, subscription, fetcher, config, coordinator)
        # Membership.
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.protocol_name: str | None = config.group_remote_assignor
        self._joined = False  # the broker knows us (a successful heartbeat since the last join)
        self._interval = DEFAULT_HEARTBEAT_INTERVAL_MS / 1000
        self._next_heartbeat = 0.0
        self._retry_after = 0.0
        self._sent: dict[str, Any] | None = None  # fields of the last heartbeat; None: send a full one
        self._owned: TopicIdPartitions = {}  # what the fetcher holds, by topic id (acknowledged next)
        self._names: dict[uuid.UUID, str] = {}
        self._target: TopicIdPartitions | None = None  # the broker's latest target, not reconciled yet
        self._reconciling = False
        self._lost_pending = False  # fenced: drop the assignment, then rejoin with epoch 0
        self._unsubscribing: asyncio.Task[None] | None = None
        self._epoch_changed = asyncio.Event()  # set (and replaced) when the member epoch changes

    # -- lifecycle -----------------------------------------------------------

    async def _stop_for_close(self) -> Callable[[], Awaitable[None]]:
        """Stop the tasks; then leave with epoch -1, or -2 when static (see :meth:`_leave_epoch`)."""
        await self._cancel_tasks()
        return self._leave_on_close

    async def _leave_on_close(self) -> None:
        """Leave if the broker knows us, with :meth:`_leave_epoch`'s epoch (None: a dynamic member stays)."""
        if self._joined:
            epoch = self._leave_epoch(closing=True)
            if epoch is not None:
                await self._leave("the consumer is being closed", epoch)

    # -- what the consumer calls ------------------------------------------------

    def subscription_changed(self) -> None:
        """subscribe()/unsubscribe() was called: the next heartbeat carries it, at once."""
        self._heartbeat_wakeup.set()
        self._wakeup.set()

    def unsubscribe(self, listener: ConsumerRebalanceListener | None) -> None:
        """Drop the assignment at once; ``listener``, the commit and the leave run in the background."""
        owned = set(self._assigned)
        positions = self._fetcher.committable(owned)
        epoch, joined = self.member_epoch, self._joined
        self._assigned = set()
        self._owned = {}
        self._target = None
        self._fetcher.assign([])
        self._joined = False
        self._sent = None
        self._set_epoch(JOIN_EPOCH)
        task = asyncio.create_task(self._finish_unsubscribe(listener, owned, positions, epoch, joined))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        self._unsubscribing = task  # a new subscription joins once the leave went out

        def left(_: object) -> None:
            self._unsubscribing = None
            self._heartbeat_wakeup.set()

        task.add_done_callback(left)

    async def _finish_unsubscribe(
        self,
        listener: ConsumerRebalanceListener | None,
        owned: set[TopicPartition],
        positions: dict[TopicPartition, OffsetAndMetadata],
        epoch: int,
        joined: bool,
    ) -> None:
        try:
            if owned and joined:
                if self._config.enable_auto_commit and positions:
                    await self.offsets.commit_quietly(positions, epoch, self.member_id)
                await self._call_listener("on_partitions_revoked", owned, listener)
            if joined:
                await self._leave("the consumer unsubscribed", self._leave_epoch(closing=False) or LEAVE_EPOCH)
        except KafkaError as exc:
            log.warning("group %s: unsubscribe: %s", self._config.group_id, exc)

    def request_rejoin(self, reason: str) -> None:
        """Heartbeat now (a consumer-protocol member never rejoins by itself: the broker decides)."""
        log.debug("group %s: heartbeat requested: %s", self._config.group_id, reason)
        self._next_heartbeat = 0.0
        self._heartbeat_wakeup.set()

    def group_metadata(self) -> GroupMetadata:
        """Who this member is: its member epoch stands for the generation (TxnOffsetCommit takes it)."""
        return GroupMetadata(self._config.group_id, self.generation_id, self.member_id, self._config.group_instance_id)

    @property
    def generation_id(self) -> int:
        """The member epoch while in the group, else -1 (no generation)."""
        return self.member_epoch if self._joined and self.member_epoch > 0 else NO_GENERATION

    @property
    def rejoin_needed(self) -> bool:
        return not self._joined

    @property
    def rebalance_in_progress(self) -> bool:
        return self._reconciling or self._target is not None

    @property
    def state(self) -> MemberState:
        if self._fatal is not None or not self._subscription.group_managed:
            return MemberState.UNJOINED
        if not self._joined:
            return MemberState.PREPARING_REBALANCE
        if self.rebalance_in_progress or self._sent is None or self._sent.get("owned") != self._owned:
            return MemberState.COMPLETING_REBALANCE
        return MemberState.STABLE

    # -- CommitListener (what OffsetCommit errors tell the membership) -------------------

    def reset_generation(self, *, reset_member_id: bool, reason: str) -> None:
        """OffsetCommit said UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH: the next heartbeat finds out."""
        self.request_rejoin(reason)

    def set_fatal(self, exc: KafkaError) -> None:
        log.error("group %s: fatal error: %s", self._config.group_id, exc)
        self._fatal = exc
        self._fetcher.wake_waiters()
        self._wakeup.set()
        self._heartbeat_wakeup.set()

    # -- the heartbeat loop ------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while not self._closing and self._fatal is None:
            self._heartbeat_wakeup.clear()
            delay = self._interval
            try:
                if self._wants_membership():
                    if self._joined and self._poll_timed_out():
                        await self._leave_for_poll_timeout()
                        continue
                    now = time.monotonic()
                    due = self._next_heartbeat - now
                    if due <= 0 or (self._urgent() and now >= self._retry_after):
                        await self._heartbeat()
                        continue
                    delay = due
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                if not exc.retriable:
                    self.set_fatal(exc)
                    return
                log.info("group %s: heartbeat failed: %s", self._config.group_id, exc)
                self._retry_soon()
                delay = self._backoff
            except Exception:
                log.exception("group %s: heartbeat failed", self._config.group_id)
                self._retry_soon()
                delay = self._backoff
            await _wait(self._heartbeat_wakeup, max(delay, 0.001))

    def _wants_membership(self) -> bool:
        return (
            self._subscription.group_managed
            and not self._waiting_for_poll
            and not self._lost_pending
            and self._unsubscribing is None
        )

    def _urgent(self) -> bool:
        """A heartbeat that must not wait for the interval: a join, an ack, a new subscription."""
        if self._reconciling:
            return False  # the ack goes once the listener ran
        if not self._joined or self._sent is None:
            return True
        return self._sent.get("owned") != self._owned or self._subscription.version != self._subscription_version

    def _subscription_fields(self) -> tuple[list[str], str | None]:
        pattern = self._subscription.pattern
        if pattern is not None:
            return [], pattern.pattern
        return sorted(self._subscription.topics), None

    async def _heartbeat(self) -> None:
        conn = await self._coordinator.connection()
        if not conn.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
            raise GroupProtocolUnsupportedError(
                f"{_USE_CLASSIC} (broker {conn.node_id} advertises no ConsumerGroupHeartbeat "
                f"v{conn.broker_api_versions.get(ApiKey.CONSUMER_GROUP_HEARTBEAT)})"
            )
        version = self._subscription.version
        names, regex = self._subscription_fields()
        if regex is None and names and self._sent is None:
            await self._cluster.refresh_metadata(names)  # auto-creates them where allowed, as classic does
        sent = self._sent
        full = sent is None
        epoch, incarnation = self.member_epoch, self._epoch_changed
        owned = dict(self._owned)
        fields: dict[str, Any] = {
            "group_id": self._config.group_id,
            "member_id": self.member_id,
            "member_epoch": epoch,
            "instance_id": self._config.group_instance_id if full else None,
            "rack_id": None,
            "rebalance_timeout": self._config.rebalance_timeout_ms if full else -1,
            "server_assignor": self._config.group_remote_assignor if full else None,
            "subscribed_topic_names": names if full or sent.get("names") != names else None,  # type: ignore[union-attr]
            "subscribed_topic_regex": None,
            "topic_partitions": (
                [{"topic_id": tid, "partitions": sorted(ps)} for tid, ps in sorted(owned.items())]
                if full or sent.get("owned") != owned  # type: ignore[union-attr]
                else None
            ),
        }
        if regex is not None:
            if full or sent.get("regex") != regex:  # type: ignore[union-attr]
                fields["subscribed_topic_regex"] = regex
        elif sent is not None and sent.get("regex") is not None:
            fields["subscribed_topic_regex"] = ""  # back from a regex to a list: clear it
        sent_at = time.monotonic() if self.metrics is None else self.metrics.heartbeat_sent()
        response = await self._coordinator.send(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, timeout=self._config.request_timeout_ms / 1000, **fields
        )
        if self.metrics is not None:
            self.metrics.heartbeat_answered(sent_at)
        if incarnation is not self._epoch_changed or self._closing:
            return  # fenced, unsubscribed or left meanwhile: this answer is for a member that is gone
        code = int(response.error_code)
        if code:
            self._heartbeat_error(code, response.error_message)
            return
        self._subscription_version = version
        self._sent = {"names": names, "regex": regex, "owned": owned}
        self._joined = True
        interval = int(response.heartbeat_interval.total_seconds() * 1000)
        if interval > 0:
            self._interval = interval / 1000
        self._next_heartbeat = time.monotonic() + self._interval
        new_epoch = int(response.member_epoch)
        if new_epoch != self.member_epoch:
            log.debug("group %s: member epoch %s -> %s", self._config.group_id, self.member_epoch, new_epoch)
            self._set_epoch(new_epoch)
        if response.assignment is not None:
            self._target = {
                tp.topic_id: frozenset(int(p) for p in tp.partitions) for tp in response.assignment.topic_partitions
            }
            self._wakeup.set()

    def _set_epoch(self, epoch: int) -> None:
        """A new epoch (or a new membership at 0): wakes commits waiting for it; a heartbeat
        answer to a request sent before is dropped."""
        self.member_epoch = epoch
        self._epoch_changed.set()
        self._epoch_changed = asyncio.Event()

    def _heartbeat_error(self, code: int, message: str | None) -> None:
        group = self._config.group_id
        detail = f"ConsumerGroupHeartbeat for group {group!r}" + (f": {message}" if message else "")
        if code in COORDINATOR_MOVED:
            self._coordinator.drop(f"heartbeat: error {code}")
            self._retry_soon()
        elif code == COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_soon()
        elif code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
            log.info("group %s: %s (epoch %s); rejoining with epoch 0", group, for_code(code)(), self.member_epoch)
            self._fence()
        elif code == UNSUPPORTED_VERSION:
            self.set_fatal(GroupProtocolUnsupportedError(f"{_USE_CLASSIC}: {detail}"))
        elif for_code(code).retriable:
            log.info("group %s: heartbeat: %s", group, for_code(code)(message or ""))
            self._retry_soon()
        else:
            # UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
            # INVALID_REGULAR_EXPRESSION, GROUP_AUTHORIZATION_FAILED...: as the Java client, fatal.
            self.set_fatal(for_code(code)(detail))

    def _retry_soon(self) -> None:
        """After a failed heartbeat: the next one, a full one, after the retry backoff."""
        self._sent = None
        self._retry_after = self._next_heartbeat = time.monotonic() + self._backoff

    def _fence(self) -> None:
        """Our epoch is over: the partitions are lost (the main loop tells the listener), rejoin at 0."""
        self._joined = False
        self._sent = None
        self._target = None
        self._set_epoch(JOIN_EPOCH)
        self._lost_pending = True
        self._wakeup.set()

    async def _leave_after_poll_timeout(self) -> None:
        """Leave (epoch -1, or -2 when static), then drop the assignment as lost."""
        await self._leave("consumer poll timeout has expired", self._leave_epoch(closing=False) or LEAVE_EPOCH)
        self._fence()  # the partitions are lost to the application; rejoin (epoch 0) on the next poll

    def _leave_epoch(self, *, closing: bool) -> int | None:
        """The epoch that leaves: -2 keeps a static member's partitions until it restarts; None: stay."""
        if self._config.group_instance_id is not None:
            return LEAVE_EPOCH if closing and self._config.leave_group_on_close else LEAVE_STATIC_EPOCH
        if closing and not self._config.leave_group_on_close:
            return None
        return LEAVE_EPOCH

    async def _leave(self, reason: str, epoch: int) -> None:
        log.info("group %s: leaving with epoch %s (%s)", self._config.group_id, epoch, reason)
        self._joined = False
        self._sent = None
        try:
            response = await self._coordinator.send(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                timeout=self._config.request_timeout_ms / 1000,
                group_id=self._config.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                instance_id=self._config.group_instance_id,
                topic_partitions=None,
            )
        except KafkaError as exc:
            log.info("group %s: leaving failed: %s", self._config.group_id, exc)
            return
        finally:
            self._set_epoch(JOIN_EPOCH)
        code = int(response.error_code)
        if code and code not in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            log.info("group %s: leaving: %s", self._config.group_id, for_code(code)(response.error_message or ""))

    # -- the main loop: reconciliation and auto-commit -------------------------------

    async def _main_loop(self) -> None:
        while not self._closing and self._fatal is None:
            self._wakeup.clear()
            delay = self._seconds_to_next_task()
            try:
                if self._lost_pending:
                    await self._lose_all()
                    continue
                if self._target is not None:
                    if await self._reconcile():
                        continue
                    delay = self._backoff  # topic ids metadata does not know yet: try again soon
                else:
                    await self._maybe_auto_commit()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                if not exc.retriable:
                    self.set_fatal(exc)
                    return
                log.warning("group %s: %s; retrying", self._config.group_id, exc)
                delay = self._backoff
            except Exception:
                log.exception("group %s: unexpected error", self._config.group_id)
                delay = self._backoff
            await _wait(self._wakeup, delay)

    def _seconds_to_next_task(self) -> float:
        if not self._config.enable_auto_commit:
            return 1.0
        return max(0.01, self.offsets.next_auto_commit - time.monotonic())

    async def _lose_all(self) -> None:
        lost = set(self._assigned)
        self._assigned = set()
        self._owned = {}
        self._fetcher.assign([])
        if lost:
            log.info("group %s: partitions lost: %s", self._config.group_id, sorted(lost))
            await self._call_listener("on_partitions_lost", lost)
        self._lost_pending = False
        self._heartbeat_wakeup.set()

    async def _topic_names(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Names of topic ids, from metadata (every topic is asked for when one is not known)."""
        wanted = set(ids)
        if not wanted <= self._names.keys():
            self._names.update(self._known_ids())
        if not wanted <= self._names.keys():
            await self._cluster.fetch_all_topics_metadata()
            self._names.update(self._known_ids())
        return {tid: self._names[tid] for tid in wanted if tid in self._names}

    def _known_ids(self) -> dict[uuid.UUID, str]:
        return {
            t.topic_id: t.name for t in self._cluster.metadata.topics.values() if isinstance(t.topic_id, uuid.UUID)
        }

    async def _reconcile(self) -> bool:
        """Move to the target assignment: revoke first, then assign; False when names are missing."""
        target = self._target
        assert target is not None
        epoch = self.member_epoch
        names = await self._topic_names(target)
        self._reconciling = True
        started = time.monotonic()
        try:
            resolved = {tid: ps for tid, ps in target.items() if tid in names}
            wanted = {TopicPartition(names[tid], p) for tid, ps in resolved.items() for p in ps}
            revoked = self._assigned - wanted
            if revoked:
                await self._revoke(revoked)
            if epoch != self.member_epoch and self._lost_pending:
                return True  # fenced while the listener ran: the partitions are lost instead
            added = wanted - self._assigned
            self._assigned = set(wanted)
            self._owned = {tid: ps for tid, ps in resolved.items() if ps}
            self._fetcher.assign(sorted(wanted))
            if self._target is target:
                self._target = None if len(resolved) == len(target) else target
            log.info(
                "group %s: epoch %s: assigned %s (added %s, revoked %s)",
                self._config.group_id,
                self.member_epoch,
                sorted(wanted),
                sorted(added),
                sorted(revoked),
            )
            await self._call_listener("on_partitions_assigned", added)
            self.rebalances += 1
            if self.metrics is not None:
                self.metrics.rebalanced(started)
        finally:
            self._reconciling = False
            self._heartbeat_wakeup.set()  # acknowledge at once
        return len(resolved) == len(target)

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        """Stop handing out ``partitions``, commit their positions (auto-commit), call the listener, drop them."""
        for tp in partitions:
            self._fetcher.pause_if_assigned(tp)
        if self._config.enable_auto_commit and self._joined:
            positions = self._fetcher.committable(partitions)
            if positions:
                await self._commit_with_epoch(positions, quiet=True)
        await self._call_listener("on_partitions_revoked", partitions)
        self._assigned -= partitions
        self._owned = {
            tid: kept
            for tid, ps in self._owned.items()
            if (kept := frozenset(p for p in ps if TopicPartition(self._names.get(tid, ""), p) not in partitions))
        }
        self._fetcher.assign(sorted(self._assigned))

    async def _leave_prepare(self) -> None:
        """On close: commit (auto-commit) and revoke everything, or report it lost when not a member."""
        if not self._subscription.group_managed:
            if self._config.enable_auto_commit:
                positions = self._fetcher.committable(self._fetcher.assignment())
                if positions:
                    await self.offsets.commit_quietly(positions, NO_GENERATION, "")
            return
        owned = set(self._assigned)
        if not owned:
            return
        if not self._joined:
            await self._call_listener("on_partitions_lost", owned)
        else:
            await self._revoke(owned)

    # -- offsets ------------------------------------------------------------------

    async def _maybe_auto_commit(self) -> None:
        if not self.offsets.auto_commit_due():
            return
        if self._subscription.group_managed:
            if not self._joined or self.member_epoch <= 0:
                return
            await self.offsets.auto_commit(self._fetcher.committable(self._assigned), self.member_epoch, self.member_id)
        else:
            await self.offsets.auto_commit(self._fetcher.committable(self._fetcher.assignment()), NO_GENERATION, "")

    async def _commit_with_epoch(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, quiet: bool) -> None:
        """OffsetCommit (v9+) with this member's id and epoch; STALE_MEMBER_EPOCH waits for the
        heartbeat that brings the new epoch and tries again (within default_api_timeout_ms)."""
        deadline = time.monotonic() + self._config.api_timeout
        while True:
            epoch, changed = self.member_epoch, self._epoch_changed
            try:
                await self.offsets.commit_offsets(offsets, epoch, self.member_id)
                return
            except KafkaError as exc:
                error: KafkaError = exc
                if getattr(exc, "code", None) == STALE_MEMBER_EPOCH and time.monotonic() < deadline:
                    self.request_rejoin("OffsetCommit: stale member epoch")
                    try:
                        async with asyncio.timeout(max(0.01, min(self._interval * 2, deadline - time.monotonic()))):
                            await changed.wait()
                    except TimeoutError:
                        pass
                    if changed.is_set() and self.member_epoch > 0:
                        continue  # the heartbeat brought a new epoch: commit with it
                if getattr(exc, "code", None) in (STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH):
                    error = CommitFailedError(
                        f"OffsetCommit rejected ({exc}): this member's epoch {epoch} is over; "
                        "its partitions may belong to another member now"
                    )
                if not quiet:
                    raise error from exc
                log.warning("group %s: commit of %s failed: %s", self._config.group_id, dict(offsets), error)
                return

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit ``offsets`` with this member's epoch (see Consumer.commit)."""
        if self._fatal is not None:
            raise self._fatal
        if not self._subscription.group_managed:
            await self.offsets.commit_offsets(offsets, NO_GENERATION, "")
            return
        if not self._joined or self.member_epoch <= 0:
            raise CommitFailedError(
                "this consumer is not a member of its group right now (joining, fenced, or left after a "
                "poll timeout); its partitions may belong to another member"
            )
        await self._commit_with_epoch(offsets, quiet=False)


__all__ = ["ConsumerMembership", "GroupProtocolUnsupportedError", "UnsupportedVersionError", "new_member_id"]
