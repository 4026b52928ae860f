"""Kafka's "roundrobin" assignor: all partitions dealt out over all members in turn."""

from __future__ import annotations

from itertools import cycle
from typing import ClassVar

from ...structs import TopicPartition
from .base import PartitionAssignor, empty_assignments, sorted_members, to_assignments
from .protocol import Assignment, Subscription

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(PartitionAssignor):
    """Deals the sorted partitions of all subscribed topics to the sorted members in turn.

    A member not subscribed to a partition's topic is skipped, as in Java; with
    identical subscriptions the counts differ by at most one. Two consumers on
    ``t0``, ``t1`` (3 partitions each) get ``C0: t0p0 t0p2 t1p1`` and
    ``C1: t0p1 t1p0 t1p2``.
    """

    name: ClassVar[str] = "roundrobin"

    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        assignment = empty_assignments(subscriptions)
        if not subscriptions:
            return {}
        topics_of = {member: set(sub.topics) for member, sub in subscriptions.items()}
        members = cycle(sorted_members(subscriptions, subscriptions))
        current = next(members)
        for partition in _all_partitions_sorted(partitions_per_topic, subscriptions):
            # Java's CircularIterator: skip members not subscribed to this topic (one always is).
            while partition.topic not in topics_of[current]:
                current = next(members)
            assignment[current].append(partition)
            current = next(members)
        return to_assignments(assignment)


def _all_partitions_sorted(
    partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
) -> list[TopicPartition]:
    topics = sorted({topic for sub in subscriptions.values() for topic in sub.topics})
    return [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in range(partitions_per_topic.get(topic, 0))
    ]
