"""The partition assignor interface (Java's ``ConsumerPartitionAssignor``) and shared helpers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import ClassVar, Literal

from ...structs import TopicPartition
from .protocol import Assignment, Subscription

__all__ = [
    "RebalanceProtocol",
    "PartitionAssignor",
    "sorted_members",
    "subscribed_partition_counts",
    "empty_assignments",
    "to_assignments",
]

#: "eager": every member revokes everything before rejoining; "cooperative" (KIP-429):
#: members keep what they own and only revoke what the leader takes away.
RebalanceProtocol = Literal["eager", "cooperative"]


class PartitionAssignor(ABC):
    """Decides, on the group leader, which member consumes which partitions.

    One instance lives in each consumer: the group client asks it for
    :meth:`subscription_user_data` when joining, calls :meth:`assign` when it
    is the leader, and reports the member's own result to :meth:`on_assignment`.
    """

    #: The JoinGroup protocol name (must match across clients, e.g. Java's).
    name: ClassVar[str]
    #: Rebalance protocols this assignor supports. A consumer rebalances
    #: cooperatively only if every assignor it is configured with lists "cooperative".
    rebalance_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = ("eager",)
    #: Version of the assignor's own user data / logic (Java's ``version()``).
    version: ClassVar[int] = 0

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        """Alias of :attr:`rebalance_protocols` (Java's ``supportedProtocols()``)."""
        return self.rebalance_protocols

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        """User data to send in this member's subscription; ``None`` by default."""
        return None

    @abstractmethod
    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        """Assign partitions to members.

        ``partitions_per_topic`` holds the partition count of each subscribed
        topic that exists (topics without metadata are left out and simply not
        assigned); ``subscriptions`` maps member id to its decoded subscription.
        Returns an :class:`Assignment` for every member, possibly empty.
        """

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called with this member's own assignment after each successful SyncGroup."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _member_sort_key(member_id: str, group_instance_id: str | None) -> tuple[int, str, str]:
    # Java's MemberInfo.compareTo: static members first, by instance id; then dynamic ones by member id.
    if group_instance_id is not None:
        return (0, group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(member_ids: Iterable[str], subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in Java's ``MemberInfo`` order (static members by instance id first)."""
    return sorted(
        member_ids,
        key=lambda member: _member_sort_key(member, subscriptions[member].group_instance_id),
    )


def subscribed_partition_counts(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, int]:
    """Partition counts of the topics some member subscribes to and that have partitions, sorted by topic."""
    subscribed = {topic for subscription in subscriptions.values() for topic in subscription.topics}
    return {
        topic: partitions_per_topic[topic]
        for topic in sorted(subscribed)
        if partitions_per_topic.get(topic, 0) > 0
    }


def empty_assignments(subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
    """A fresh, empty partition list for every member."""
    return {member: [] for member in subscriptions}


def to_assignments(partitions: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
    """Wrap raw partition lists into :class:`Assignment` objects (no user data)."""
    return {member: Assignment(list(assigned)) for member, assigned in partitions.items()}
