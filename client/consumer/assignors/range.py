"""Kafka's "range" assignor: contiguous partition ranges per topic."""

from __future__ import annotations

from typing import ClassVar

from ...structs import TopicPartition
from .base import PartitionAssignor, empty_assignments, sorted_members, to_assignments
from .protocol import Assignment, Subscription

__all__ = ["RangeAssignor"]


class RangeAssignor(PartitionAssignor):
    """Per topic, members in order get contiguous ranges of partitions; the first ones get one extra.

    Members are ordered as in Java: static members by ``group.instance.id``
    first, then dynamic ones by member id. Two consumers subscribed to topics
    ``t0`` and ``t1`` of 3 partitions each get ``C0: t0p0 t0p1 t1p0 t1p1`` and
    ``C1: t0p2 t1p2``. (Java's rack-aware variant needs replica racks, which
    this API does not carry, so it is not applied.)
    """

    name: ClassVar[str] = "range"

    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        assignment = empty_assignments(subscriptions)
        for topic, ordered in _members_per_topic(subscriptions).items():
            num_partitions = partitions_per_topic.get(topic, 0)
            if num_partitions <= 0:
                continue
            per_member, extra = divmod(num_partitions, len(ordered))
            start = 0
            for index, member in enumerate(ordered):
                length = per_member + (1 if index < extra else 0)
                assignment[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return to_assignments(assignment)


def _members_per_topic(subscriptions: dict[str, Subscription]) -> dict[str, list[str]]:
    """Subscribing member ids per topic in Java's member order; topics sorted so that each
    member's partitions come out in topic order."""
    members: dict[str, list[str]] = {}
    for member in sorted_members(subscriptions, subscriptions):
        for topic in set(subscriptions[member].topics):
            members.setdefault(topic, []).append(member)
    return {topic: members[topic] for topic in sorted(members)}
