"""What both group protocols' memberships share: the lifecycle of their tasks and poll liveness.

:class:`MembershipLifecycle` is the base of :class:`~.classic_membership.ClassicMembership`
(JoinGroup/SyncGroup) and :class:`~.consumer_membership.ConsumerMembership`
(KIP-848's ConsumerGroupHeartbeat). It holds what does not depend on the protocol:

- the state both keep (the consumer's pieces, the offset commits, the assigned
  partitions, the task handles and wake-up events, the fatal error);
- the lifecycle of the two tasks a membership runs, its *main loop* and its
  *heartbeat loop*: :meth:`~MembershipLifecycle.start`,
  :meth:`~MembershipLifecycle.close` (the protocol's revocation and leave in
  between) and :meth:`~MembershipLifecycle.abort`;
- poll liveness (``max_poll_interval_ms``): the consumer reports
  :meth:`~MembershipLifecycle.poll_started`, :meth:`~MembershipLifecycle.polled` and
  :meth:`~MembershipLifecycle.poll_ended`; the heartbeat loop asks
  :meth:`~MembershipLifecycle._poll_timed_out` and leaves through
  :meth:`~MembershipLifecycle._leave_for_poll_timeout`; the next poll raises a
  fatal error or a rebalance listener's exception, or rejoins;
- the rebalance listener's callbacks, whose exceptions that next poll raises, and
  the part of :class:`~.offset_commits.CommitListener` that is the same for both.

A subclass supplies the loops, what closing revokes and sends, how it rejoins (``request_rejoin``,
``reset_generation``), ``set_fatal`` and what leaving on a poll timeout sends.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kafkakit.cluster import Cluster
from kafkakit.errors import FencedInstanceIdError, KafkaError
from kafkakit.structs import TopicPartition

from .coordinator import CoordinatorConnection
from .fetcher import Fetcher
from .group_config import GroupConfig
from .offset_commits import OffsetCommits
from .subscription import ConsumerRebalanceListener, SubscriptionState, call_listener

if TYPE_CHECKING:
    from .instrumentation import GroupMetrics

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"  # JoinGroup in flight
    COMPLETING_REBALANCE = "completing_rebalance"  # SyncGroup in flight
    STABLE = "stable"


class MembershipLifecycle(abc.ABC):
    """One consumer's membership in its group, whatever the protocol: tasks, poll liveness, listener."""

    def __init__(
        self,
        cluster: Cluster,
        subscription: SubscriptionState,
        fetcher: Fetcher,
        config: GroupConfig,
        coordinator: CoordinatorConnection,
    ) -> None:
        self._cluster = cluster
        self._subscription = subscription
        self._fetcher = fetcher
        self._config = config
        self._coordinator = coordinator
        #: This member's offset commits (auto-commit, commits on revocation, commit()).
        self.offsets = OffsetCommits(config, coordinator, self)
        self._backoff = config.retry_backoff_ms / 1000
        # Membership.
        self._assigned: set[TopicPartition] = set()
        self._subscription_version = -1
        self._waiting_for_poll = False  # left the group on a poll timeout: rejoin on the next poll
        # Tasks and signals.
        self._wakeup = asyncio.Event()
        self._heartbeat_wakeup = asyncio.Event()
        self._main_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._closing = False
        self._fatal: KafkaError | None = None
        self._listener_error: BaseException | None = None
        # Poll tracking (max_poll_interval_ms).
        self._last_poll = time.monotonic()
        self._polling = 0
        self.rebalances = 0  # completed rebalances or reconciliations, for tests and metrics
        #: The consumer's coordinator metrics (None: off).
        self.metrics: GroupMetrics | None = None

    # -- what a protocol supplies ----------------------------------------------------

    @abc.abstractmethod
    async def _main_loop(self) -> None:
        """The group task: (re)joins or reconciles, auto-commits; runs until closed or fatal."""

    @abc.abstractmethod
    async def _heartbeat_loop(self) -> None:
        """The heartbeat task: heartbeats, and leaves on a poll timeout (:meth:`_poll_timed_out`)."""

    @abc.abstractmethod
    async def _stop_for_close(self) -> Callable[[], Awaitable[None]]:
        """:meth:`close`'s first step: stop the tasks (:meth:`_cancel_tasks`).

        Returns what leaves the group (if configured) once the partitions are given up.
        """

    @abc.abstractmethod
    async def _leave_prepare(self) -> None:
        """On close: commit (auto-commit) and revoke everything, or report it lost when not a member."""

    @abc.abstractmethod
    def request_rejoin(self, reason: str) -> None:
        """Rejoin (classic) or heartbeat (consumer protocol) at the next chance."""

    @abc.abstractmethod
    def reset_generation(self, *, reset_member_id: bool, reason: str) -> None:
        """OffsetCommit or the coordinator said this member's generation is over."""

    @abc.abstractmethod
    def set_fatal(self, exc: KafkaError) -> None:
        """End the membership for good with ``exc`` (the next poll raises it)."""

    @abc.abstractmethod
    async def _leave_after_poll_timeout(self) -> None:
        """Leave the group (or drop the generation) once the application stopped polling."""

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        """Start the main loop and the heartbeat loop; the poll interval counts from now."""
        self._last_poll = time.monotonic()
        self._main_task = asyncio.create_task(self._main_loop(), name="kafkakit-group")
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop(), name="kafkakit-heartbeat")

    async def close(self) -> None:
        """Commit (auto-commit), revoke through the listener, leave the group if configured, disconnect."""
        if self._closing:
            return
        self._closing = True
        leave = await self._stop_for_close()
        try:
            if self._fatal is None:
                await self._leave_prepare()
                await leave()
        except KafkaError as exc:
            log.warning("group %s: error while closing: %s", self._config.group_id, exc)
        finally:
            self._coordinator.drop("closed")

    async def abort(self) -> None:
        """Stop without any group traffic (no commit, no callback, no LeaveGroup): a simulated crash."""
        self._closing = True
        await self._cancel_tasks()
        self._coordinator.drop("aborted")

    async def _cancel_tasks(self) -> None:
        """Cancel both loops and every background task (ours and the coordinator connection's)."""
        background = (*self._background, *self._coordinator.background)
        tasks = [t for t in (self._main_task, self._heartbeat_task, *background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- poll liveness (max_poll_interval_ms) -------------------------------------------

    def poll_started(self) -> None:
        """The application entered getmany/getone: raise a pending fatal error, rejoin if we left."""
        if self._fatal is not None:
            raise self._fatal
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error
        self._polling += 1
        self._last_poll = time.monotonic()
        if self._waiting_for_poll:
            self._waiting_for_poll = False
            self.request_rejoin("the application polls again after a poll timeout")

    def polled(self) -> None:
        """The application took a record outside getmany/getone (``async for``): it is alive."""
        self._last_poll = time.monotonic()

    def poll_ended(self) -> None:
        """The application left getmany/getone: the poll interval counts from now."""
        self._polling -= 1
        self._last_poll = time.monotonic()

    def _poll_timed_out(self) -> bool:
        """No getmany/getone in progress and none for more than ``max_poll_interval_ms``."""
        return (
            self._polling == 0
            and time.monotonic() - self._last_poll > self._config.max_poll_interval_ms / 1000
        )

    async def _leave_for_poll_timeout(self) -> None:
        """Like Java: the application stopped polling, so give the partitions to someone who does."""
        log.warning(
            "group %s: no poll for more than max_poll_interval_ms=%s: leaving the group; "
            "it rejoins on the next getmany/getone",
            self._config.group_id,
            self._config.max_poll_interval_ms,
        )
        self._waiting_for_poll = True
        await self._leave_after_poll_timeout()

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error that ended this membership for good (e.g. FENCED_INSTANCE_ID), if any."""
        return self._fatal

    # -- the rebalance listener ---------------------------------------------------------

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this member (a copy)."""
        return set(self._assigned)

    async def _call_listener(
        self, method: str, partitions: set[TopicPartition], listener: ConsumerRebalanceListener | None = None
    ) -> None:
        """Call ``listener``'s (by default the subscription's) ``method`` with ``partitions``.

        Only ``on_partitions_assigned`` is called with no partitions; a listener without
        ``on_partitions_lost`` gets ``on_partitions_revoked``. An exception is kept for the
        next poll to raise.
        """
        if listener is None:
            listener = self._subscription.listener
        if listener is None:
            return
        if not partitions and method != "on_partitions_assigned":
            return
        callback = getattr(listener, method, None)
        if callback is None and method == "on_partitions_lost":
            callback = getattr(listener, "on_partitions_revoked", None)
        try:
            await call_listener(callback, partitions)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Java hands a listener's exception to the next poll once the rebalance is done.
            log.exception("group %s: %s failed", self._config.group_id, method)
            self._listener_error = exc

    # -- CommitListener (the rest: request_rejoin, reset_generation, set_fatal) -----------

    def fenced(self, api: str) -> FencedInstanceIdError:
        """The error FENCED_INSTANCE_ID from ``api`` raises."""
        return FencedInstanceIdError(
            f"{api}: another consumer joined group {self._config.group_id!r} with the same "
            f"group_instance_id {self._config.group_instance_id!r}; this one is fenced and must stop"
        )


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait for ``event`` up to ``timeout`` seconds.

    asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that lands in the
    step the event is set, and a loop cancelled then (unsubscribe() replaces the main loop) runs on.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
