"""Committed offsets of classic groups: the ``OffsetMetadataManager`` half of Kafka's group coordinator.

:class:`GroupTables` is everything replaying ``__consumer_offsets`` rebuilds (groups,
committed offsets, the log position of each committed offset, transactional offsets
awaiting their transaction's end); :class:`OffsetManager` serves OffsetCommit,
TxnOffsetCommit and OffsetFetch on those tables.  The membership half
(:mod:`.group_coordinator`) owns the groups and validates nothing here except through
:meth:`OffsetManager.validate_commit`.

Transactional offsets (TxnOffsetCommit) are appended at once as a transactional batch
of the producer (see :meth:`OffsetsTopic.append_transactional`) and held as *pending*
per producer id; the transaction's COMMIT marker in the same ``__consumer_offsets``
partition materialises them, an ABORT marker drops them, both live
(:meth:`GroupTables.complete_pending`) and on replay, so an open or prepared
transaction's offsets survive a restart.  As in Kafka, when transactional and plain
commits of one partition mix, the record written last to the log wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kafkakit.broker.log import LogError
from kafkakit.broker.log.errors import MESSAGE_TOO_LARGE
from kio.schema.errors import ErrorCode

from .consumer_group import ConsumerGroup
from .group import ClassicGroup, GroupError, GroupState, Member, now_ms
from .group_api import group_from_record
from .group_records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from .offsets_topic import CoordinatorRecord, OffsetsTopic

log = logging.getLogger("kafkakit.broker.groups")

#: (topic, partition) -> (offset, position in the log of the record that holds it)
PendingOffsets = dict[tuple[str, int], tuple[OffsetValue, int]]


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    """One partition of an OffsetCommit."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    """One partition of an OffsetFetch answer (offset -1 when nothing is committed)."""

    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.none


@dataclass(slots=True)
class GroupTables:
    """What the coordinator rebuilds from ``__consumer_offsets``: groups, offsets, pending offsets."""

    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    #: KIP-848 consumer groups (:mod:`.consumer_group_protocol`); a group id is in one table only.
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
    # Transactional offsets awaiting their transaction's end, with the log offset of their
    # record: producer id -> group -> (topic, partition) -> (value, record offset).
    pending_txn: dict[int, dict[str, PendingOffsets]] = field(default_factory=dict)
    # Log offset of the record behind each committed offset (the most recent record wins).
    positions: dict[tuple[str, str, int], int] = field(default_factory=dict)

    # -- replay ------------------------------------------------------------------------------

    def replay_offset(self, key: OffsetKey, value: bytes | None, position: int = -1) -> None:
        offsets = self.offsets.setdefault(key.group, {})
        if value is None:
            offsets.pop((key.topic, key.partition), None)
            self.positions.pop((key.group, key.topic, key.partition), None)
            if not offsets:
                del self.offsets[key.group]
            return
        offsets[(key.topic, key.partition)] = decode_offset_value(value)
        self.positions[(key.group, key.topic, key.partition)] = position
        if key.group not in self.consumer_groups:
            self.groups.setdefault(key.group, ClassicGroup(key.group))  # a "simple" group, as Kafka does

    def replay_pending_offset(self, producer_id: int, key: OffsetKey, value: bytes | None, position: int) -> None:
        if value is None:
            return  # Kafka never writes transactional tombstones
        pending = self.pending_txn.setdefault(producer_id, {}).setdefault(key.group, {})
        pending[(key.topic, key.partition)] = (decode_offset_value(value), position)

    def replay_group(self, key: GroupKey, value: bytes | None) -> None:
        if value is None:
            self.groups.pop(key.group, None)
            return
        # Stable with its members when it has any (their sessions are armed once loaded), else Empty.
        self.groups[key.group] = group_from_record(key.group, decode_group_value(value))

    # -- transactional offsets ---------------------------------------------------------------

    def complete_pending(
        self, producer_id: int, commit: bool, partition: int, partition_for: Callable[[str], int]
    ) -> None:
        """A marker of ``producer_id`` in ``partition``: its pending offsets there are committed or dropped."""
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return
        for group_id in [g for g in groups if partition_for(g) == partition]:
            offsets = groups.pop(group_id)
            if commit:
                self.materialise(group_id, offsets)
        if not groups:
            del self.pending_txn[producer_id]

    def materialise(self, group_id: str, offsets: Mapping[tuple[str, int], tuple[OffsetValue, int]]) -> None:
        if group_id not in self.consumer_groups:
            self.groups.setdefault(group_id, ClassicGroup(group_id))
        stored = self.offsets.setdefault(group_id, {})
        for (topic, partition), (value, position) in offsets.items():
            key = (group_id, topic, partition)
            # A plain commit logged after the transactional one is more recent: keep it (Kafka's rule).
            if self.positions.get(key, -1) < position or (topic, partition) not in stored:
                stored[(topic, partition)] = value
                self.positions[key] = position


def append_error(group_id: str, exc: LogError, *, offsets: bool) -> ErrorCode:
    """The error Kafka answers when appending a group's records to ``__consumer_offsets`` failed."""
    log.error("group %s: appending to __consumer_offsets failed: %s", group_id, exc)
    if exc.code == MESSAGE_TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size if offsets else ErrorCode.unknown_server_error
    return ErrorCode.coordinator_not_available


class OffsetManager:
    """OffsetCommit, TxnOffsetCommit and OffsetFetch over the coordinator's :class:`GroupTables`.

    ``touch`` re-arms a member's session (a commit counts as a heartbeat, as in Kafka);
    ``coordinator_error`` says why a group is not served here (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS), which every partition of its requests is answered.
    """

    def __init__(
        self,
        store: OffsetsTopic,
        tables: GroupTables,
        metadata_max_bytes: int,
        touch: Callable[[ClassicGroup, Member], None],
        coordinator_error: Callable[[str], ErrorCode | None],
    ) -> None:
        #: Validates a commit to a KIP-848 consumer group (member id, member epoch, transactional,
        #: api version); set by the coordinator.
        self.validate_consumer_commit: Callable[[ConsumerGroup, str, int, bool, int], ErrorCode | None] = (
            lambda *_: None
        )
        self._store = store
        self._tables = tables
        self._metadata_max_bytes = metadata_max_bytes
        self._touch = touch
        self._coordinator_error = coordinator_error

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit],
        retention_ms: int = -1,
        api_version: int = 9,
    ) -> list[ErrorCode]:
        """Validate the committer and store ``offsets``; one error code per partition, in order."""
        tables = self._tables
        group = tables.groups.get(group_id)
        try:
            self._check_coordinator(group_id)
            consumer = tables.consumer_groups.get(group_id)
            if consumer is not None:
                error = self.validate_consumer_commit(consumer, member_id, generation_id, False, api_version)
                if error is not None:
                    raise GroupError(error)
                group = ClassicGroup(group_id)  # validated; not stored (the group is a consumer group)
            elif group is None:
                if generation_id >= 0:
                    raise GroupError(ErrorCode.illegal_generation, f"group {group_id} does not exist")
                group = ClassicGroup(group_id)  # a simple (standalone) consumer's group
                tables.groups[group_id] = group
            else:
                self.validate_commit(group, generation_id, member_id, group_instance_id)
        except GroupError as exc:
            return [exc.code] * len(offsets)
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                self._touch(group, member)
        now = now_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        errors: list[ErrorCode] = []
        records: list[CoordinatorRecord] = []
        accepted: list[tuple[OffsetKey, OffsetValue]] = []
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata) > self._metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            key = OffsetKey(group_id, o.topic, o.partition)
            value = OffsetValue(o.offset, o.leader_epoch, metadata, now, expire)
            records.append((encode_offset_key(key), encode_offset_value(value)))
            accepted.append((key, value))
            errors.append(ErrorCode.none)
        error, base = self._persist_offsets(group_id, records)
        if error is not None:
            return [error if e is ErrorCode.none else e for e in errors]
        stored = tables.offsets.setdefault(group_id, {})
        for index, (key, value) in enumerate(accepted):
            stored[(key.topic, key.partition)] = value
            tables.positions[(group_id, key.topic, key.partition)] = base + index
        return errors

    def _check_coordinator(self, group_id: str) -> None:
        error = self._coordinator_error(group_id)
        if error is not None:
            raise GroupError(error)

    def _persist_offsets(
        self, group_id: str, records: Sequence[CoordinatorRecord]
    ) -> tuple[ErrorCode | None, int]:
        """Append offset records; (None, base offset) on success, else (error, -1)."""
        try:
            return None, self._store.append(group_id, records)
        except LogError as exc:
            return append_error(group_id, exc, offsets=True), -1

    @staticmethod
    def validate_commit(
        group: ClassicGroup,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        *,
        transactional: bool = False,
    ) -> None:
        """Kafka's ``ClassicGroup.validateOffsetCommit``."""
        if group.is_in(GroupState.DEAD):
            raise GroupError(ErrorCode.coordinator_not_available)
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return  # admin client or standalone consumer: allowed while nobody is a member
        if generation_id >= 0 or member_id or group_instance_id is not None:
            group.validate_member(member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise GroupError(ErrorCode.illegal_generation)
        elif not transactional and not group.is_in(GroupState.EMPTY):
            raise GroupError(ErrorCode.unknown_member_id)
        if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            raise GroupError(ErrorCode.rebalance_in_progress)

    def fetch_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None, require_stable: bool = False
    ) -> list[tuple[str, list[FetchedOffset]]]:
        """Committed offsets of ``topics`` (every committed partition when None); -1 where none.
        A group not coordinated here gets the error on every partition asked for."""
        error = self._coordinator_error(group_id)
        if error is not None:
            return [(topic, [FetchedOffset(p, -1, -1, "", error) for p in ps]) for topic, ps in topics or ()]
        stored = self._tables.offsets.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in stored:
                by_topic.setdefault(topic, []).append(partition)
            topics = [(t, sorted(ps)) for t, ps in by_topic.items()]
        return [
            (topic, [self._fetched(group_id, stored, topic, p, require_stable) for p in partitions])
            for topic, partitions in topics
        ]

    def _fetched(
        self,
        group_id: str,
        stored: Mapping[tuple[str, int], OffsetValue],
        topic: str,
        partition: int,
        require_stable: bool,
    ) -> FetchedOffset:
        if require_stable and self.has_pending_transactional_offsets(group_id, topic, partition):
            return FetchedOffset(partition, -1, -1, "", ErrorCode.unstable_offset_commit)
        value = stored.get((topic, partition))
        if value is None:
            return FetchedOffset(partition, -1, -1, "")
        return FetchedOffset(partition, value.offset, value.leader_epoch, value.metadata)

    def has_pending_transactional_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether a TxnOffsetCommit for this partition awaits its transaction's end (KIP-447)."""
        key = (topic, partition)
        return any(key in groups.get(group_id, {}) for groups in self._tables.pending_txn.values())

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[OffsetToCommit],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: validate (KIP-447), log ``offsets`` in the producer's transaction, hold them.

        They are written to ``__consumer_offsets`` at once, in a transactional
        batch, and reach the group only when the transaction's COMMIT marker
        does, see :meth:`complete_transactional_offsets`.
        """
        group = self._tables.groups.get(group_id)
        consumer = self._tables.consumer_groups.get(group_id)
        try:
            self._check_coordinator(group_id)
            if consumer is not None:
                error = self.validate_consumer_commit(consumer, member_id, generation_id, True, 5)
                if error is not None:
                    raise GroupError(error)
            elif group is None:
                if generation_id >= 0:
                    raise GroupError(ErrorCode.illegal_generation, f"group {group_id} does not exist")
            else:
                self.validate_commit(group, generation_id, member_id, group_instance_id, transactional=True)
        except GroupError as exc:
            return [exc.code] * len(offsets)
        now = now_ms()
        errors: list[ErrorCode] = []
        accepted: list[tuple[tuple[str, int], OffsetValue]] = []
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata) > self._metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            accepted.append(
                ((o.topic, o.partition), OffsetValue(o.offset, o.leader_epoch, metadata, now, -1))
            )
            errors.append(ErrorCode.none)
        if not accepted:
            return errors
        records = [
            (encode_offset_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value))
            for (topic, partition), value in accepted
        ]
        try:
            base = self._store.append_transactional(group_id, records, producer_id, producer_epoch)
        except LogError as exc:
            error = append_error(group_id, exc, offsets=True)
            return [error if e is ErrorCode.none else e for e in errors]
        pending = self._tables.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        for index, (key, value) in enumerate(accepted):
            pending[key] = (value, base + index)
        return errors

    def complete_transactional_offsets(self, producer_id: int, commit: bool, partition: int) -> None:
        """A marker for ``producer_id`` was written to ``__consumer_offsets``-``partition``: the
        offsets its transaction logged there become committed (COMMIT) or are dropped (ABORT)."""
        self._tables.complete_pending(producer_id, commit, partition, self._store.partition_for)
