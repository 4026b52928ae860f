"""A partition this node leads: its followers' positions, the ISR, the HW and acks=all waiters.

This is the leader half of Kafka's ``Partition``, without I/O: the
:class:`~.manager.ReplicaManager` feeds it follower fetches, metadata and
AlterPartition answers and acts on what it says.

* Each follower's state follows Kafka's ``Replica``: its log end offset (the
  offset it fetches from) and the last time it was caught up, which is when it
  fetched at the leader's log end, or at the log end the leader had at its
  previous fetch (``lastCaughtUpTimeMs``).  A follower is caught up when its log
  end is the leader's or it was caught up within ``replica.lag.time.max.ms``.
* The ISR is the committed one (the metadata image, or an AlterPartition answer
  that is newer).  While an AlterPartition is in flight the HW is computed over
  the *maximal* ISR (the current ISR plus a replica being added; a replica being
  removed still counts), as Kafka does, so that the HW never moves past what a
  replica the controller may still keep has.  At most one change is in flight.
* HW = the smallest log end among the leader, the maximal ISR and the caught-up
  live replicas waiting to join it; it only grows while this node leads.
* acks=all waiters complete once the HW reaches their offset: with no error
  when the ISR still has min.insync.replicas members, else
  NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's DelayedProduce).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.metadata import PartitionRegistration


#: A time before any other (monotonic ms): "never caught up", "never fetched".
NEVER = float("-inf")


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower from its fetches (Kafka's Replica)."""

    replica_id: int
    #: The follower's log end offset: its last fetch offset (-1 before its first fetch).
    log_end_offset: int = -1
    last_caught_up_ms: float = NEVER
    last_fetch_leader_end: int = -1
    last_fetch_ms: float = NEVER

    def record_fetch(self, fetch_offset: int, leader_end: int, now_ms: float) -> None:
        """A fetch at ``fetch_offset`` while the leader's log ends at ``leader_end``."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms

    def caught_up(self, leader_end: int, now_ms: float, lag_ms: int) -> bool:
        """Kafka's isCaughtUp: at the leader's log end, or caught up within the lag time."""
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= lag_ms


@dataclass(slots=True)
class PendingIsr:
    """An AlterPartition sent and not answered (or answered with a wait for the metadata)."""

    new_isr: tuple[int, ...]
    #: The ISR the HW is computed over meanwhile: the current one together with ``new_isr``.
    maximal: tuple[int, ...]
    #: The partition epoch the request was made against.
    partition_epoch: int
    #: The controller refused it as stale (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION): no
    #: new change until the metadata moves past ``partition_epoch``.
    awaiting_metadata: bool = False


Waiter = tuple[int, "asyncio.Future[ErrorCode | None]"]


@dataclass(eq=False)
class LeaderPartition:
    """The leader state of one partition (see the module docstring)."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: Where this node's leader epoch starts: a follower joins the ISR only once it has it.
    epoch_start_offset: int
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending: PendingIsr | None = None
    #: No new ISR change before this time (ms, monotonic) after a failed one.
    retry_after_ms: float = 0.0
    waiters: list[Waiter] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        log: PartitionLog,
        registration: PartitionRegistration,
        node_id: int,
        now_ms: float,
    ) -> LeaderPartition:
        """State for a new leadership: followers in the ISR get a full lag time to show up,
        the others count as not caught up until they fetch (Kafka's makeLeader)."""
        lp = cls(
            topic, partition, topic_id, log, registration.leader_epoch, registration.partition_epoch,
            registration.replicas, registration.isr, log.log_end_offset,
        )  # fmt: skip
        for replica in registration.replicas:
            if replica != node_id:
                in_sync = replica in registration.isr
                lp.followers[replica] = FollowerState(replica, last_caught_up_ms=now_ms if in_sync else NEVER)
        return lp

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW is computed over (see :class:`PendingIsr`)."""
        return self.pending.maximal if self.pending is not None else self.isr

    # -- metadata and AlterPartition answers --------------------------------------------------

    def update_registration(self, registration: PartitionRegistration, node_id: int, now_ms: float) -> bool:
        """Adopt a newer registration under the same leader epoch (an ISR or replica change);
        False, changing nothing, when it is older than what this leader already applied."""
        if registration.partition_epoch < self.partition_epoch:
            return False
        self.apply_isr(registration.isr, registration.partition_epoch)
        if registration.replicas != self.replicas:
            self.replicas = registration.replicas
            for replica in registration.replicas:
                if replica != node_id and replica not in self.followers:
                    self.followers[replica] = FollowerState(replica)
            for replica in [r for r in self.followers if r not in registration.replicas]:
                del self.followers[replica]
        return True

    def apply_isr(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The committed ISR is now ``isr`` at ``partition_epoch``; a pending change made against
        an older partition epoch is settled by it."""
        self.isr = isr
        self.partition_epoch = partition_epoch
        if self.pending is not None and partition_epoch > self.pending.partition_epoch:
            self.pending = None

    # -- followers -----------------------------------------------------------------------------

    def out_of_sync(self, now_ms: float, lag_ms: int) -> list[int]:
        """ISR followers that have not been caught up within the lag time."""
        leader_end = self.log.log_end_offset
        out = []
        for replica in self.isr:
            follower = self.followers.get(replica)
            if follower is not None and not follower.caught_up(leader_end, now_ms, lag_ms):
                out.append(replica)
        return out

    def may_join_isr(self, follower: FollowerState) -> bool:
        """Kafka's expansion rule: the follower has the HW and this leader epoch's first offset."""
        return (
            follower.log_end_offset >= self.log.high_watermark
            and follower.log_end_offset >= self.epoch_start_offset
        )

    def high_watermark_candidate(self, now_ms: float, lag_ms: int, eligible: Callable[[int], bool]) -> int:
        """The smallest log end among this leader, the maximal ISR and the caught-up eligible
        replicas outside it (which are about to join: the HW waits for them, as in Kafka)."""
        leader_end = self.log.log_end_offset
        candidate = leader_end
        maximal = self.maximal_isr
        for replica, follower in self.followers.items():
            if follower.log_end_offset >= candidate:
                continue
            if replica in maximal or (follower.caught_up(leader_end, now_ms, lag_ms) and eligible(replica)):
                candidate = follower.log_end_offset
        return candidate

    # -- acks=all --------------------------------------------------------------------------------

    def complete_waiters(self, min_insync: int) -> None:
        """Answer every waiter whose offset the HW has reached."""
        if not self.waiters:
            return
        hw = self.log.high_watermark
        code = None if len(self.isr) >= min_insync else ErrorCode.not_enough_replicas_after_append
        still: list[Waiter] = []
        for end_offset, future in self.waiters:
            if future.done():
                continue
            if end_offset <= hw:
                future.set_result(code)
            else:
                still.append((end_offset, future))
        self.waiters = still

    def fail_waiters(self, code: ErrorCode) -> None:
        """Answer every waiter with ``code`` (leadership lost)."""
        for _, future in self.waiters:
            if not future.done():
                future.set_result(code)
        self.waiters = []
