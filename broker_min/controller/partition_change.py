"""Leader election and ISR updates of one partition: Kafka's PartitionChangeBuilder.

:func:`partition_change` builds the PartitionChangeRecord that moves a partition to a target
ISR with a fitting leader, or None when nothing changes:

- keep a leader that is in the ISR and usable (registered, unfenced, not in controlled
  shutdown, see :func:`usable`);
- else the first usable ISR member in replica order;
- else, when ``unclean.leader.election.enable`` (the topic's config over the controller's
  setting), the first usable replica, with the ISR reset to it (unclean election);
- else no leader (-1).
- ``preferred=True`` (preferred leader election) picks the first replica when it is usable
  and in the ISR, and never elects uncleanly.

An ISR is never emptied: removing its last member leaves it there. The scans over every
partition (fencing, leaderless partitions, preferred elections) are in
:mod:`.replication_control`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kafkakit.broker.metadata import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    MetadataImage,
    PartitionChangeRecord,
    PartitionRegistration,
    TopicImage,
)

from .config_control import unclean_leader_election_enabled

log = logging.getLogger("kafkakit.broker.controller")


def usable(image: MetadataImage, broker_id: int, add: int = NO_LEADER, remove: int = NO_LEADER) -> bool:
    """May lead or join an ISR: registered, unfenced and not shutting down (``add``/``remove`` override)."""
    if broker_id == remove:
        return False
    if broker_id == add:
        return True
    reg = image.brokers.get(broker_id)
    return reg is not None and not reg.fenced and not reg.in_controlled_shutdown


def all_partitions(image: MetadataImage) -> list[tuple[TopicImage, int, PartitionRegistration]]:
    """Every partition of the image: (topic, index, registration), topics in image order."""
    return [
        (topic, index, part)
        for topic in image.topics.values()
        for index, part in sorted(topic.partitions.items())
    ]


def leads_any(image: MetadataImage, broker_id: int) -> bool:
    """Whether ``broker_id`` leads at least one partition."""
    return any(part.leader == broker_id for _, _, part in all_partitions(image))


def partition_change(
    image: MetadataImage,
    topic: TopicImage,
    index: int,
    part: PartitionRegistration,
    *,
    unclean_default: bool,
    node_id: int,
    target_isr: Sequence[int] | None = None,
    remove: int = NO_LEADER,
    add: int = NO_LEADER,
    preferred: bool = False,
) -> PartitionChangeRecord | None:
    """Kafka's PartitionChangeBuilder: the record moving ``part`` to ``target_isr`` and a fitting leader.

    ``unclean_default`` is the controller's ``unclean.leader.election.enable`` (a topic config
    overrides it); ``node_id`` names the controller in the unclean-election warning.
    """
    isr = [r for r in (part.isr if target_isr is None else target_isr) if r != remove]

    def acceptable(r: int) -> bool:
        return usable(image, r, add, remove)

    def valid(r: int) -> bool:
        return r in isr and acceptable(r)

    unclean = False
    if preferred and part.replicas and valid(part.replicas[0]):
        leader = part.replicas[0]
    elif valid(part.leader):
        leader = part.leader
    else:
        leader = next((r for r in part.replicas if valid(r)), NO_LEADER)
        if (
            leader == NO_LEADER
            and not preferred
            and unclean_leader_election_enabled(image, topic.name, unclean_default)
        ):
            leader = next((r for r in part.replicas if acceptable(r)), NO_LEADER)
            unclean = leader != NO_LEADER
            if unclean:
                log.warning(
                    "controller %d: unclean leader election of %d for %s-%d (data may be lost)",
                    node_id,
                    leader,
                    topic.name,
                    index,
                )
    new_isr: tuple[int, ...] | None = None
    if unclean:
        new_isr = (leader,)
    elif isr and tuple(isr) != part.isr:
        new_isr = tuple(isr)  # an empty target leaves the ISR as it is (its last member stays)
    leader_field = leader if leader != part.leader else NO_LEADER_CHANGE
    if new_isr is None and leader_field == NO_LEADER_CHANGE:
        return None
    return PartitionChangeRecord(topic.topic_id, index, isr=new_isr, leader=leader_field)
