"""The consumer group client: what the consumer holds when it has a ``group_id``.

:class:`GroupCoordinator` is a thin facade over the pieces of group
membership, each in its own module:

- :mod:`.group_config`: the validated group settings and :class:`GroupMetadata`
  (who the member is in its group);
- :mod:`.coordinator`: finding the group's coordinator broker (FindCoordinator,
  through :meth:`Cluster.find_coordinator <kafkakit.cluster.Cluster.find_coordinator>`)
  and the dedicated connection to it;
- :mod:`.classic_membership`: the classic group protocol (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup; eager and cooperative rebalances; static membership),
  its main loop and heartbeat loop, with :mod:`.classic_assignment` (the
  subscriptions members offer and the leader's assignment);
- :mod:`.consumer_membership`: KIP-848's consumer protocol (``group_protocol="consumer"``:
  ConsumerGroupHeartbeat, member epochs, broker-side assignment, revoke-before-assign);
- :mod:`.offset_commits`: OffsetCommit, OffsetFetch and auto-commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from kafkakit.cluster import Cluster
from kafkakit.errors import KafkaError
from kafkakit.net.connection import BrokerConnection
from kafkakit.structs import OffsetAndMetadata, TopicPartition

# tests import _without_transfers from here
from .classic_assignment import without_transfers as _without_transfers  # noqa: F401
from .classic_membership import PROTOCOL_TYPE, ClassicMembership
from .consumer_membership import ConsumerMembership
from .coordinator import CoordinatorConnection
from .fetcher import Fetcher
from .group_config import NO_GENERATION, GroupConfig, GroupMetadata, check_assignors
from .membership_lifecycle import MemberState
from .subscription import ConsumerRebalanceListener, SubscriptionState

if TYPE_CHECKING:
    from .instrumentation import GroupMetrics

__all__ = [
    "NO_GENERATION",
    "PROTOCOL_TYPE",
    "GroupConfig",
    "GroupCoordinator",
    "GroupMetadata",
    "MemberState",
    "check_assignors",
]


class GroupCoordinator:
    """Membership of one consumer in its group, plus offset commits and lookups."""

    def __init__(
        self, cluster: Cluster, subscription: SubscriptionState, fetcher: Fetcher, config: GroupConfig
    ) -> None:
        self._link = CoordinatorConnection(cluster, config)
        membership = ConsumerMembership if config.group_protocol == "consumer" else ClassicMembership
        self._membership: ClassicMembership | ConsumerMembership = membership(
            cluster, subscription, fetcher, config, self._link
        )
        self._offsets = self._membership.offsets
        #: The application took a record outside getmany/getone (``async for``): it is alive.
        #: (The membership's own method: ``async for`` calls it for every record.)
        self.polled: Callable[[], None] = self._membership.polled

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        self._membership.start()

    async def close(self) -> None:
        """Commit (auto-commit), revoke through the listener, leave the group if configured, disconnect."""
        await self._membership.close()

    async def abort(self) -> None:
        """Stop without any group traffic (no commit, no callback, no LeaveGroup): a simulated crash."""
        await self._membership.abort()

    # -- what the consumer calls ------------------------------------------------

    def poll_started(self) -> None:
        """The application entered getmany/getone: raise a pending fatal error, rejoin if we left."""
        self._membership.poll_started()

    def poll_ended(self) -> None:
        self._membership.poll_ended()

    def subscription_changed(self) -> None:
        """subscribe()/unsubscribe() was called: rejoin (or leave) on the group task."""
        self._membership.subscription_changed()

    def unsubscribe(self, listener: ConsumerRebalanceListener | None) -> None:
        """Drop the assignment at once; ``listener``, the commit and LeaveGroup run in the background."""
        self._membership.unsubscribe(listener)

    def request_rejoin(self, reason: str) -> None:
        self._membership.request_rejoin(reason)

    def group_metadata(self) -> GroupMetadata:
        return self._membership.group_metadata()

    def assignment(self) -> set[TopicPartition]:
        return self._membership.assignment()

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error that ended this membership for good (e.g. FENCED_INSTANCE_ID), if any."""
        return self._membership.fatal_error

    @property
    def rebalance_in_progress(self) -> bool:
        return self._membership.rebalance_in_progress

    # -- offsets ------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit ``offsets`` for this member's current generation (see Consumer.commit)."""
        await self._membership.commit(offsets)

    async def fetch_committed(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (with metadata) of ``partitions``; partitions without one are left out."""
        return await self._offsets.fetch_committed(partitions)

    async def committed_positions(self, partitions: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The fetcher's hook: where newly assigned partitions start (committed offsets only)."""
        return await self.fetch_committed(partitions)

    # -- metrics, and the membership's state (for metrics and tests) ------------------

    @property
    def metrics(self) -> GroupMetrics | None:
        """The consumer's coordinator metrics (None: off): per join, sync, rebalance, heartbeat and commit."""
        return self._membership.metrics

    @metrics.setter
    def metrics(self, metrics: GroupMetrics | None) -> None:
        self._membership.metrics = metrics
        self._offsets.metrics = metrics

    @property
    def state(self) -> MemberState:
        return self._membership.state

    @property
    def generation_id(self) -> int:
        return self._membership.generation_id

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def group_protocol(self) -> str:
        """``"classic"`` or ``"consumer"`` (KIP-848)."""
        return "consumer" if isinstance(self._membership, ConsumerMembership) else "classic"

    @property
    def protocol_name(self) -> str | None:
        return self._membership.protocol_name

    @property
    def rebalances(self) -> int:
        """Completed rebalances (JoinGroup+SyncGroup rounds)."""
        return self._membership.rebalances

    @property
    def _rejoin_needed(self) -> bool:
        return self._membership.rejoin_needed

    @property
    def _conn(self) -> BrokerConnection | None:
        return self._link.conn

    async def _coordinator(self) -> BrokerConnection:
        """The connection to the group coordinator, looking it up if needed."""
        return await self._link.connection()
