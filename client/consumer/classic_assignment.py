"""Client-side assignment in the classic group protocol: what a member offers, what the leader computes.

In a classic group the coordinator only relays the consumer's embedded
protocol: each member offers its assignors with its subscription in JoinGroup
(:func:`join_protocols`); the coordinator picks one assignor every member
offered and hands the leader every member's subscription; the leader assigns
(:func:`leader_assignment`) and SyncGroup carries each member's share back.
KIP-429 (cooperative) adds one rule: a partition moving between two members
goes to nobody in the first round (:func:`without_transfers`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafkakit.cluster import ClusterMetadata
from kafkakit.structs import TopicPartition

from .assignors import (
    Assignment,
    PartitionAssignor,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

log = logging.getLogger("kafkakit.consumer.group")  # one log for the group, whichever module writes


def join_protocols(
    assignors: Iterable[PartitionAssignor],
    topics: list[str],
    owned: list[TopicPartition],
    generation_id: int,
) -> list[dict[str, Any]]:
    """JoinGroup's ``protocols``: each assignor, in preference order, with this member's subscription."""
    return [
        {
            "name": assignor.name,
            "metadata": encode_subscription(
                Subscription(
                    topics=topics,
                    user_data=assignor.subscription_user_data(set(topics)),
                    owned_partitions=owned,
                    generation_id=generation_id,
                )
            ),
        }
        for assignor in assignors
    ]


def find_assignor(assignors: Iterable[PartitionAssignor], name: str | None) -> PartitionAssignor | None:
    for assignor in assignors:
        if assignor.name == name:
            return assignor
    return None


def is_cooperative(assignor: PartitionAssignor | None) -> bool:
    """Whether ``assignor`` (the group's, None: unknown) supports the cooperative protocol."""
    return assignor is not None and "cooperative" in _protocols_of(assignor)


def member_subscriptions(members: Sequence[Any]) -> dict[str, Subscription]:
    """Every member's subscription, from the leader's JoinGroup response."""
    subscriptions: dict[str, Subscription] = {}
    for member in members:
        sub = decode_subscription(member.metadata)
        sub.member_id = member.member_id
        sub.group_instance_id = getattr(member, "group_instance_id", None)
        subscriptions[member.member_id] = sub
    return subscriptions


def partition_counts(metadata: ClusterMetadata, topics: Iterable[str]) -> dict[str, int]:
    """The partition count of each of ``topics`` that ``metadata`` knows."""
    counts: dict[str, int] = {}
    for topic in topics:
        parts = metadata.partitions_for(topic)
        if parts:
            counts[topic] = len(parts)
    return counts


def leader_assignment(
    assignor: PartitionAssignor,
    counts: dict[str, int],
    subscriptions: dict[str, Subscription],
    *,
    group_id: str,
) -> dict[str, bytes]:
    """The leader's job: run ``assignor`` over every member's subscription; SyncGroup's assignments."""
    result = assignor.assign(counts, subscriptions)
    if is_cooperative(assignor):
        result = without_transfers(result, subscriptions)
    log.info(
        "group %s: leader assigned %s with %s",
        group_id,
        {m: sorted(a.partitions) for m, a in result.items()},
        assignor.name,
    )
    return {
        member_id: encode_assignment(result.get(member_id) or Assignment()) for member_id in subscriptions
    }


def _protocols_of(assignor: PartitionAssignor) -> tuple[str, ...]:
    """The rebalance protocols an assignor supports ("eager", "cooperative")."""
    return tuple(getattr(assignor, "rebalance_protocols", ("eager",)))


def without_transfers(
    result: Mapping[str, Assignment], subscriptions: Mapping[str, Subscription]
) -> dict[str, Assignment]:
    """KIP-429 first round: a partition moving between two members is given to nobody yet.

    Its owner revokes it after this round and rejoins; the next round gives it
    to the new owner. (Cooperative assignors already do this; repeating it is harmless.)
    """
    owner = {tp: m for m, sub in subscriptions.items() for tp in sub.owned_partitions}
    out: dict[str, Assignment] = {}
    for member, assignment in result.items():
        kept = [tp for tp in assignment.partitions if owner.get(tp, member) == member]
        out[member] = Assignment(kept, assignment.user_data)
    return out
