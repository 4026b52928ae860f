"""The group coordinator: every group and committed offset of this broker, over ``__consumer_offsets``.

A port of Apache Kafka's ``GroupCoordinatorService`` / ``GroupMetadataManager`` /
``OffsetMetadataManager`` (group-coordinator module) to one asyncio loop.  This
class is the facade every group handler calls; each group type's protocol is a
module of its own:

- the classic group (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalance timers,
  static members): :mod:`.classic_group_protocol`;
- the KIP-848 consumer group (ConsumerGroupHeartbeat, ConsumerGroupDescribe, epochs,
  server-side assignors): :mod:`.consumer_group_protocol`;
- committed and transactional offsets (Kafka's ``OffsetMetadataManager``):
  :mod:`.group_offsets`; this class delegates OffsetCommit, TxnOffsetCommit and
  OffsetFetch to it.

Persistence: group metadata and committed offsets are appended to
``__consumer_offsets`` (see :mod:`.offsets_topic`) before the in-memory state
changes, as Kafka does, and :meth:`GroupCoordinator.load` replays that topic on
start-up (:mod:`.group_loading`).  Classic groups come back as Kafka brings them
back: Stable with the members, generation, protocol, leader and assignments of their
last completed generation (each member's session armed afresh), or Empty.

Partitions (cluster mode, issue 13): a group belongs to one ``__consumer_offsets``
partition and is served only while that partition is loaded here
(:meth:`GroupCoordinator.load_partition` when this node becomes its leader,
:meth:`GroupCoordinator.unload_partition` when it stops); every group API answers
NOT_COORDINATOR for the other groups, COORDINATOR_LOAD_IN_PROGRESS while the
partition loads (see :mod:`.partitions`).  :meth:`GroupCoordinator.load` loads
every partition (a single node).  A write is acknowledged only once replicated:
handlers await :meth:`GroupCoordinator.settle` before answering.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from typing import TypeVar

from kafkakit.broker.log import LogError
from kio.schema.errors import ErrorCode

from .classic_group_protocol import ClassicGroupProtocol
from .consumer_group import ConsumerGroup
from .consumer_group_classic import ClassicMembers
from .consumer_group_protocol import (
    ConsumerGroupProtocol,
    HeartbeatRequest,
    HeartbeatResult,
    TopicLookup,
    group_state,
)
from .group import (
    ClassicGroup,
    GroupState,
    JoinResult,
    SyncResult,
)
from .group_api import (
    GroupDescription,
    GroupSettings,
    JoinRequest,
    SyncRequest,
    describe_group,
    list_groups,
)
from .group_loading import GroupLoader
from .group_offsets import FetchedOffset, GroupTables, OffsetManager, OffsetToCommit, append_error
from .group_records import (
    GroupKey,
    OffsetKey,
    encode_group_key,
    encode_offset_key,
)
from .offsets_topic import CoordinatorRecord, OffsetsTopic
from .timers import Timers

__all__ = [  # the request/answer types stay importable from here
    "FetchedOffset",
    "GroupCoordinator",
    "GroupDescription",
    "GroupSettings",
    "JoinRequest",
    "OffsetToCommit",
    "SyncRequest",
]

log = logging.getLogger("kafkakit.broker.groups")
_T = TypeVar("_T")


class GroupCoordinator:
    """Every classic group and committed offset of this broker."""

    def __init__(self, store: OffsetsTopic, settings: GroupSettings) -> None:
        self._store = store
        self.settings = settings
        self._tables = GroupTables()
        self.groups: dict[str, ClassicGroup] = self._tables.groups
        self.offsets = self._tables.offsets
        self._timers = Timers()
        self._classic = ClassicGroupProtocol(
            self.groups, settings, self._timers, self._persist, self.coordinator_error
        )
        self._offsets = OffsetManager(
            store,
            self._tables,
            settings.offset_metadata_max_bytes,
            self._classic.reschedule_heartbeat,
            self.coordinator_error,
        )
        self._loader = GroupLoader(store, self._tables, self._on_unloaded)
        #: KIP-848 consumer groups; ``topic_lookup`` (set by the broker) lists the cluster's topics.
        self.consumer_groups: dict[str, ConsumerGroup] = self._tables.consumer_groups
        self.topic_lookup: TopicLookup = dict
        self._consumer = ConsumerGroupProtocol(
            self.consumer_groups, self.groups, settings.consumer, self._timers, self._persist,
            self.coordinator_error, lambda: self.topic_lookup(),
        )  # fmt: skip
        self._mixed = ClassicMembers(self._consumer, self._classic, self.groups)
        self._offsets.validate_consumer_commit = lambda group, member, epoch, txn, version: (
            self._consumer.validate_commit(group, member, epoch, transactional=txn, api_version=version)
        )
        self._loader.on_loaded = self._on_loaded
        #: Partitions loaded or loading here (``.loading``, ``.error(partition)``).
        self.partitions = self._loader.partitions

    # ==================================================================== partitions: load / unload

    def load(self) -> None:
        """Load every ``__consumer_offsets`` partition now (a single node coordinates them all)."""
        self._loader.load_all()

    async def load_partition(self, partition: int, epoch: int = 0) -> bool:
        """Become the coordinator of ``partition``'s groups (Kafka's ``onElection``); see
        :meth:`GroupLoader.load_partition`."""
        return await self._loader.load_partition(partition, epoch)

    def unload_partition(self, partition: int, epoch: int | None = None) -> bool:
        """Stop coordinating ``partition``'s groups (Kafka's ``onResignation``): drop them and their
        offsets, answer their parked JoinGroup/SyncGroup NOT_COORDINATOR and cancel their timers.
        Ignored (False) when loaded at ``epoch`` or later; None always unloads."""
        return self._loader.unload_partition(partition, epoch)

    def _on_loaded(self, loaded: GroupTables) -> None:
        self._classic.on_loaded(loaded.groups.values())
        self._consumer.on_loaded(loaded.consumer_groups.values())

    def _on_unloaded(self, removed: GroupTables) -> None:
        self._classic.on_unloaded(removed.groups)
        self._consumer.on_unloaded(removed.consumer_groups)

    @property
    def owned_partitions(self) -> frozenset[int]:
        """The ``__consumer_offsets`` partitions whose groups this node coordinates."""
        return self.partitions.active

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """None when this node coordinates ``group_id``, else the error every group API answers."""
        return self.partitions.error(self._store.partition_for(group_id))

    async def settle(self, group_id: str) -> ErrorCode | None:
        """Wait until what was written to ``group_id``'s partition is replicated (at once on a single
        node); None, or the error to answer instead (Kafka's mapping of a failed write)."""
        return await self._loader.settle(group_id)

    # ==================================================================== stop

    def shutdown(self) -> None:
        """Cancel every timer (broker stop); parked requests end with their connections."""
        self._timers.cancel_all()

    # ==================================================================== the classic group protocol

    def join(self, request: JoinRequest) -> asyncio.Future[JoinResult]:
        """Handle a JoinGroup; the future resolves when the answer is known (maybe after the join phase).

        A classic member joining a consumer group: an empty consumer group is converted to a classic
        one (Kafka's downgrade, allowed by its default migration policy); a non-empty one takes it
        in as a member (a mixed group, :mod:`.consumer_group_classic`)."""
        consumer = self._consumer_group_of(request.group_id)
        if consumer is not None:
            if consumer.members:
                return _done(self._mixed.join(consumer, request))
            error = self._consumer.delete(consumer)
            if error is not None:
                return _done(JoinResult(error, ""))
        return self._classic.join(request)

    def sync(self, request: SyncRequest) -> asyncio.Future[SyncResult]:
        """Handle a SyncGroup; followers' futures resolve when the leader's assignment is stored."""
        consumer = self._consumer_group_of(request.group_id)
        if consumer is not None:
            return _done(self._mixed.sync(consumer, request))
        return self._classic.sync(request)

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Keep a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        consumer = self._consumer_group_of(group_id)
        if consumer is not None:
            return self._mixed.heartbeat(consumer, member_id, group_instance_id, generation_id)
        return self._classic.heartbeat(group_id, member_id, group_instance_id, generation_id)

    def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """Remove members by member id, or by instance id with an empty member id (v3+ batch leave).

        Returns the top-level error and (member id, instance id, error) per member.
        """
        consumer = self._consumer_group_of(group_id)
        if consumer is not None:
            return self._mixed.leave(consumer, members)
        return self._classic.leave(group_id, members)

    def _consumer_group_of(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group ``group_id``, when it is one and coordinated here."""
        group = self.consumer_groups.get(group_id)
        if group is None or self.coordinator_error(group_id) is not None:
            return None
        return group

    # ==================================================================== the KIP-848 consumer group protocol

    def consumer_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat (see :mod:`.consumer_group_protocol`)."""
        return self._consumer.heartbeat(request)

    def consumer_describe(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode, ConsumerGroup | None]]:
        """ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND / a coordinator error."""
        out: list[tuple[str, ErrorCode, ConsumerGroup | None]] = []
        for group_id in group_ids:
            error = self.coordinator_error(group_id)
            group = self.consumer_groups.get(group_id)
            if error is not None:
                out.append((group_id, error, None))
            elif group is None:
                out.append((group_id, ErrorCode.group_id_not_found, None))
            else:
                out.append((group_id, ErrorCode.none, group))
        return out

    def consumer_topic_names(self, group: ConsumerGroup) -> dict[uuid.UUID, str]:
        """Topic id -> name for describing ``group``'s assignments."""
        return self._consumer.topic_names(group)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+ of a consumer group member: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH or None."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            return None
        return self._consumer.validate_fetch(group, member_id, member_epoch)

    def group_type(self, group_id: str) -> str:
        """"consumer" for a KIP-848 group, else "classic" (ListGroups v5)."""
        return "consumer" if group_id in self.consumer_groups else "classic"

    # ==================================================================== offsets

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
        return self._offsets.commit_offsets(
            group_id, generation_id, member_id, group_instance_id, offsets, retention_ms, api_version
        )

    def fetch_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None, require_stable: bool = False
    ) -> list[tuple[str, list[FetchedOffset]]]:
        """Committed offsets of ``topics`` (every committed partition when None); -1 where none."""
        return self._offsets.fetch_offsets(group_id, topics, require_stable)

    def has_pending_transactional_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether a TxnOffsetCommit for this partition awaits its transaction's end (KIP-447)."""
        return self._offsets.has_pending_transactional_offsets(group_id, topic, partition)

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
        """TxnOffsetCommit: validate (KIP-447), log ``offsets`` in the producer's transaction, hold
        them until the transaction's marker (see :meth:`OffsetManager.txn_commit_offsets`)."""
        return self._offsets.txn_commit_offsets(
            group_id, producer_id, producer_epoch, generation_id, member_id, group_instance_id, offsets
        )

    def complete_transactional_offsets(self, producer_id: int, commit: bool, partition: int) -> None:
        """A marker for ``producer_id`` was written to ``__consumer_offsets``-``partition``: the
        offsets its transaction logged there become committed (COMMIT) or are dropped (ABORT)."""
        self._offsets.complete_transactional_offsets(producer_id, commit, partition)

    # ==================================================================== admin

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups: members with metadata and assignment only while Stable; unknown groups are
        Dead; groups not coordinated here carry the error."""
        return [
            describe_group(group_id, self.groups.get(group_id), self.coordinator_error(group_id))
            for group_id in group_ids
        ]

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, optionally only in ``states`` (any case)."""
        wanted = {s.lower() for s in states}
        consumer = [
            (group_id, "consumer", group_state(group))
            for group_id, group in self.consumer_groups.items()
            if not wanted or group_state(group).lower() in wanted
        ]
        return list_groups(self.groups.values(), states) + consumer

    def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        """Delete Empty groups and their offsets (tombstones in the log); NON_EMPTY_GROUP otherwise."""
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            error = self.coordinator_error(group_id)
            consumer = self.consumer_groups.get(group_id)
            if error is not None:
                out.append((group_id, error))
            elif consumer is not None:
                out.append((group_id, self._delete_consumer_group(consumer)))
            elif group is None or group.is_in(GroupState.DEAD):
                out.append((group_id, ErrorCode.group_id_not_found))
            elif not group.is_in(GroupState.EMPTY):
                out.append((group_id, ErrorCode.non_empty_group))
            else:
                out.append((group_id, self._delete_group(group)))
        return out

    def _delete_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        if group.members:
            return ErrorCode.non_empty_group
        offsets = self.offsets.get(group.group_id, {})
        tombstones: list[CoordinatorRecord] = [
            (encode_offset_key(OffsetKey(group.group_id, topic, partition)), None) for topic, partition in offsets
        ]
        error = self._persist(group.group_id, tombstones) if tombstones else None
        error = error or self._consumer.delete(group)
        if error is not None:
            return error
        self.offsets.pop(group.group_id, None)
        return ErrorCode.none

    def _delete_group(self, group: ClassicGroup) -> ErrorCode:
        group_id = group.group_id
        offsets = self.offsets.get(group_id, {})
        records: list[CoordinatorRecord] = [
            (encode_offset_key(OffsetKey(group_id, topic, partition)), None) for topic, partition in offsets
        ]
        records.append((encode_group_key(GroupKey(group_id)), None))
        error = self._persist(group_id, records)
        if error is not None:
            return error
        self.offsets.pop(group_id, None)
        group.transition_to(GroupState.DEAD)
        del self.groups[group_id]
        self._timers.cancel_matching(1, group_id)
        log.info("deleted group %s and %d committed offset(s)", group_id, len(offsets))
        return ErrorCode.none

    # ==================================================================== persistence

    def _persist(
        self, group_id: str, records: Sequence[CoordinatorRecord], *, offsets: bool = False
    ) -> ErrorCode | None:
        """Append ``records``; None on success, else the error Kafka answers for a failed append."""
        try:
            self._store.append(group_id, records)
        except LogError as exc:
            return append_error(group_id, exc, offsets=offsets)
        return None


def _done(result: _T) -> asyncio.Future[_T]:
    """A future that is already resolved with ``result``."""
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future
