"""Topics, partitions, leaders and ISRs on the controller: Kafka's ReplicationControlManager.

Every method reads a :class:`MetadataImage` and returns the metadata records to append (with
the answers); :class:`~.quorum_controller.QuorumController` holds the lock and appends them.

- leader elections, each partition's through :func:`.partition_change.partition_change`:
  moving leaderships and ISR memberships away from a fenced or shutting-down broker
  (:meth:`~ReplicationControlManager.removal_changes`, Kafka's handleBrokerFenced and
  handleBrokerInControlledShutdown), electing leaderless partitions once a broker comes back
  (:meth:`~ReplicationControlManager.unfence_changes`, handleBrokerUnfenced) or once one is
  possible (:meth:`~ReplicationControlManager.leaderless_elections`), and preferred leader
  election (:meth:`~ReplicationControlManager.preferred_elections`, ``auto.leader.rebalance.enable``).
- AlterPartition: :meth:`~ReplicationControlManager.alter_partition` with
  validateAlterPartitionData's checks (:meth:`~ReplicationControlManager.validate_isr_change`).
- CreateTopics (round-robin placement from :mod:`.placement` or a manual assignment),
  DeleteTopics and CreatePartitions.

Not built: ELR (KIP-966), leader recovery state (an unclean leader is not marked
RECOVERING), reassignments, create-topic policies and racks in placement.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

from kafkakit.broker.metadata import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataImage,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRegistration,
    RemoveTopicRecord,
    TopicImage,
    TopicRecord,
)
from kafkakit.broker.state import topic_name_error
from kio.schema.errors import ErrorCode

from .api_types import (
    ControllerError,
    ControllerSettings,
    CreateTopicResult,
    DeleteTopicResult,
    IsrChange,
    IsrChangeResult,
    NamedResult,
    NewPartitions,
    NewTopic,
    TopicConfig,
)
from .config_control import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, ConfigControlManager
from .partition_change import all_partitions, partition_change, usable
from .placement import PlacementError, place


class ReplicationControlManager:
    """Partition leadership, ISRs and the topics' partitions, as metadata records."""

    def __init__(
        self,
        node_id: int,
        settings: ControllerSettings,
        configs: ConfigControlManager,
        rng: random.Random,
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self.configs = configs
        self._rng = rng
        self._placement_start = rng.randrange(1 << 16)

    # -- elections -------------------------------------------------------------------------------

    def _change(
        self,
        image: MetadataImage,
        topic: TopicImage,
        index: int,
        part: PartitionRegistration,
        *,
        target_isr: Sequence[int] | None = None,
        remove: int = NO_LEADER,
        add: int = NO_LEADER,
        preferred: bool = False,
    ) -> PartitionChangeRecord | None:
        return partition_change(
            image,
            topic,
            index,
            part,
            unclean_default=self.settings.unclean_leader_election_enable,
            node_id=self.node_id,
            target_isr=target_isr,
            remove=remove,
            add=add,
            preferred=preferred,
        )

    def removal_changes(self, image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
        """Move leadership away from ``broker_id`` and drop it from every ISR."""
        out: list[MetadataRecord] = []
        for topic, index, part in all_partitions(image):
            if broker_id in part.isr or part.leader == broker_id:
                change = self._change(image, topic, index, part, remove=broker_id)
                if change is not None:
                    out.append(change)
        return out

    def unfence_changes(self, image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
        """Leaders for leaderless partitions, counting ``broker_id`` (being unfenced) as usable."""
        out: list[MetadataRecord] = []
        for topic, index, part in all_partitions(image):
            if part.leader == NO_LEADER:
                change = self._change(image, topic, index, part, add=broker_id)
                if change is not None:
                    out.append(change)
        return out

    def leaderless_elections(self, image: MetadataImage) -> list[MetadataRecord]:
        """Leaders for the leaderless partitions that can have one now (a live ISR member, or unclean)."""
        records: list[MetadataRecord] = []
        for topic, index, part in all_partitions(image):
            if part.leader == NO_LEADER:
                change = self._change(image, topic, index, part)
                if change is not None:
                    records.append(change)
        return records

    def preferred_elections(self, image: MetadataImage) -> list[MetadataRecord]:
        """Preferred leader election: the first replica leads again where it is usable and in the ISR."""
        records: list[MetadataRecord] = []
        for topic, index, part in all_partitions(image):
            if part.replicas and part.leader != part.replicas[0]:
                change = self._change(image, topic, index, part, preferred=True)
                if change is not None:
                    records.append(change)
        return records

    # -- AlterPartition --------------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, broker_id: int, changes: Sequence[IsrChange]
    ) -> tuple[list[IsrChangeResult | None], list[MetadataRecord]]:
        """A partition leader's ISR changes (its broker epoch already checked).

        The answer per change, None where it is to be read from the image once the records are
        written (:meth:`alter_partition_results`), and the records.
        """
        results: list[IsrChangeResult | None] = []
        records: list[MetadataRecord] = []
        for change in changes:
            topic = image.topics_by_id.get(change.topic_id)
            if topic is None:
                results.append(IsrChangeResult(change.topic_id, change.partition, ErrorCode.unknown_topic_id))
                continue
            part = topic.partitions.get(change.partition)
            error = (
                ErrorCode.unknown_topic_or_partition
                if part is None
                else self.validate_isr_change(image, broker_id, part, change)
            )
            if part is None or error is not ErrorCode.none:
                results.append(IsrChangeResult(change.topic_id, change.partition, error))
                continue
            record = self._change(
                image, topic, change.partition, part, target_isr=[b for b, _ in change.new_isr]
            )
            if record is not None and record.leader not in (NO_LEADER_CHANGE, broker_id):
                # Only a reassignment could do this (not built): the leader must refetch metadata.
                results.append(
                    IsrChangeResult(change.topic_id, change.partition, ErrorCode.new_leader_elected)
                )
                records.append(record)
                continue
            if record is not None:
                records.append(record)
            results.append(None)  # answered from the image once written
        return results, records

    def alter_partition_results(
        self, image: MetadataImage, changes: Sequence[IsrChange], results: Sequence[IsrChangeResult | None]
    ) -> list[IsrChangeResult]:
        """The AlterPartition answers, the accepted changes' read from ``image`` (which holds them)."""
        out: list[IsrChangeResult] = []
        for change, result in zip(changes, results, strict=True):
            if result is not None:
                out.append(result)
                continue
            part = image.topics_by_id[change.topic_id].partitions[change.partition]
            out.append(
                IsrChangeResult(
                    change.topic_id,
                    change.partition,
                    ErrorCode.none,
                    part.leader,
                    part.leader_epoch,
                    part.isr,
                    part.partition_epoch,
                )
            )
        return out

    def validate_isr_change(
        self, image: MetadataImage, broker_id: int, part: PartitionRegistration, change: IsrChange
    ) -> ErrorCode:
        """ReplicationControlManager.validateAlterPartitionData."""
        if change.leader_epoch > part.leader_epoch or change.partition_epoch > part.partition_epoch:
            return ErrorCode.not_controller  # the leader knows newer metadata than this controller
        if change.leader_epoch < part.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if broker_id != part.leader:
            return ErrorCode.invalid_request
        if change.partition_epoch < part.partition_epoch:
            return ErrorCode.invalid_update_version
        new_isr = [b for b, _ in change.new_isr]
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(part.replicas):
            return ErrorCode.invalid_request
        if part.leader not in new_isr:
            return ErrorCode.invalid_request
        for member, epoch in change.new_isr:
            reg = image.brokers.get(member)
            if reg is None or reg.fenced or reg.in_controlled_shutdown or epoch not in (-1, reg.broker_epoch):
                return ErrorCode.ineligible_replica
        return ErrorCode.none

    # -- topics ----------------------------------------------------------------------------------

    def _live_brokers(self, image: MetadataImage) -> list[int]:
        return [b.broker_id for b in image.live_brokers() if not b.in_controlled_shutdown]

    def create_topics(
        self, image: MetadataImage, topics: Sequence[NewTopic]
    ) -> tuple[list[CreateTopicResult], list[MetadataRecord]]:
        """The answer per topic and the records of the valid ones (per-topic errors as Kafka's)."""
        names = [t.name for t in topics]
        records: list[MetadataRecord] = []
        results: list[CreateTopicResult] = []
        for topic in topics:
            if names.count(topic.name) > 1:
                results.append(
                    CreateTopicResult(topic.name, ErrorCode.invalid_request, "Duplicate topic name.")
                )
                continue
            try:
                result, topic_records = self._create_topic(image, topic)
            except ControllerError as exc:
                results.append(CreateTopicResult(topic.name, exc.code, exc.message))
                continue
            results.append(result)
            records += topic_records
        return results, records

    def _create_topic(
        self, image: MetadataImage, topic: NewTopic
    ) -> tuple[CreateTopicResult, list[MetadataRecord]]:
        reason = topic_name_error(topic.name)
        if reason is not None:
            raise ControllerError(ErrorCode.invalid_topic_exception, reason)
        if topic.name in image.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        collision = _colliding_topic(image, topic.name)
        if collision is not None:
            raise ControllerError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{topic.name}' collides with existing topic: {collision}",
            )
        configs = {k: v for k, v in topic.configs.items() if v is not None}
        effective = self.configs.validate_topic_configs(configs)
        live = self._live_brokers(image)
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if topic.num_partitions != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            assignment = [list(topic.assignments[i]) for i in range(len(topic.assignments))]
            self._check_manual_assignment(image, assignment, None)
        else:
            if topic.replication_factor < -1 or topic.replication_factor == 0:
                raise ControllerError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if topic.num_partitions < -1 or topic.num_partitions == 0:
                raise ControllerError(
                    ErrorCode.invalid_partitions,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            count = self.settings.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = (
                self.settings.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            assignment = self._place(live, count, rf)
        topic_id = uuid.uuid4()
        records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
        records += [ConfigRecord(TOPIC_RESOURCE, topic.name, k, v) for k, v in sorted(configs.items())]
        for index, replicas in enumerate(assignment):
            isr = tuple(r for r in replicas if usable(image, r))
            records.append(PartitionRecord(topic_id, index, tuple(replicas), isr, isr[0]))
        result = CreateTopicResult(
            topic.name,
            topic_id=topic_id,
            num_partitions=len(assignment),
            replication_factor=len(assignment[0]),
            configs=[
                TopicConfig(k, v, DYNAMIC_TOPIC_CONFIG if k in configs else DEFAULT_CONFIG)
                for k, v in sorted(effective.items())
            ],
        )
        return result, records

    def _place(self, live: list[int], count: int, rf: int) -> list[list[int]]:
        try:
            assignment = place(
                live, count, rf, start=self._placement_start, shift=self._rng.randrange(1 << 16)
            )
        except PlacementError as exc:
            raise ControllerError(
                ErrorCode.invalid_replication_factor, f"Unable to replicate the partition {rf} time(s): {exc}"
            ) from None
        # The next topic's leaders continue the round-robin, so leadership stays even across topics.
        self._placement_start += count
        return assignment

    def _check_manual_assignment(
        self, image: MetadataImage, assignment: list[list[int]], rf: int | None
    ) -> None:
        """ReplicationControlManager.validateManualPartitionAssignment, plus a usable replica per partition."""
        for replicas in assignment:
            if not replicas:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes an empty replica list.",
                )
            for broker in replicas:
                if broker not in image.brokers:
                    raise ControllerError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
                    )
            if len(set(replicas)) != len(replicas):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes a broker more than once.",
                )
            if rf is not None and len(replicas) != rf:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                    f"this is not consistent with previous partitions, which have {rf} replica(s).",
                )
            rf = len(replicas)
            if not any(usable(image, r) for r in replicas):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment are fenced or in controlled shutdown.",
                )

    def delete_topics(
        self, image: MetadataImage, topics: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> tuple[list[DeleteTopicResult], list[MetadataRecord]]:
        """The answer per topic (named by name or by id) and the RemoveTopicRecords."""
        zero = uuid.UUID(int=0)
        keys = [topic_id if topic_id not in (None, zero) else name for name, topic_id in topics]
        records: list[MetadataRecord] = []
        results: list[DeleteTopicResult] = []
        for (name, topic_id), key in zip(topics, keys, strict=True):
            by_id = topic_id is not None and topic_id != zero
            if key is None:
                results.append(
                    DeleteTopicResult(name, zero, ErrorCode.invalid_request, "Neither topic name nor id.")
                )
                continue
            if keys.count(key) > 1:
                what = "id" if by_id else "name"
                results.append(
                    DeleteTopicResult(
                        name, topic_id or zero, ErrorCode.invalid_request, f"Duplicate topic {what}."
                    )
                )
                continue
            found = image.topics_by_id.get(topic_id) if by_id and topic_id else image.topics.get(name or "")
            if found is None:
                code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                results.append(DeleteTopicResult(name, topic_id or zero, code))
                continue
            records.append(RemoveTopicRecord(found.topic_id))
            results.append(DeleteTopicResult(found.name, found.topic_id))
        return results, records

    def create_partitions(
        self, image: MetadataImage, topics: Sequence[NewPartitions]
    ) -> tuple[list[NamedResult], list[MetadataRecord]]:
        """The answer per topic of a CreatePartitions request and the new partitions' records."""
        names = [t.name for t in topics]
        records: list[MetadataRecord] = []
        results: list[NamedResult] = []
        for request in topics:
            if names.count(request.name) > 1:
                results.append(NamedResult(request.name, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            try:
                records += self._new_partitions(image, request)
            except ControllerError as exc:
                results.append(NamedResult(request.name, exc.code, exc.message))
                continue
            results.append(NamedResult(request.name))
        return results, records

    def _new_partitions(self, image: MetadataImage, request: NewPartitions) -> list[MetadataRecord]:
        topic = image.topics.get(request.name)
        if topic is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{request.name}' does not exist."
            )
        current = len(topic.partitions)
        if request.count < current:
            raise ControllerError(
                ErrorCode.invalid_partitions,
                f"The topic {request.name} currently has {current} partition(s); "
                f"{request.count} would not be an increase.",
            )
        if request.count == current:
            raise ControllerError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        rf = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
        added = request.count - current
        if request.assignments is not None:
            if len(request.assignments) != added:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(request.assignments)} assignment(s) were specified.",
                )
            assignment = [list(a) for a in request.assignments]
            self._check_manual_assignment(image, assignment, rf)
        else:
            assignment = self._place(self._live_brokers(image), added, rf)
        records: list[MetadataRecord] = []
        for offset, replicas in enumerate(assignment):
            isr = tuple(r for r in replicas if usable(image, r))
            records.append(PartitionRecord(topic.topic_id, current + offset, tuple(replicas), isr, isr[0]))
        return records


def _colliding_topic(image: MetadataImage, name: str) -> str | None:
    """An existing topic whose name differs from ``name`` only in '.' vs '_' (Kafka's metrics collide)."""
    if "." not in name and "_" not in name:
        return None
    folded = name.replace(".", "_")
    for other in image.topics:
        if other != name and other.replace(".", "_") == folded:
            return other
    return None
