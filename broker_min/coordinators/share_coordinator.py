"""The share group facade (KIP-932): membership, share-partitions, sessions, configs and persistence.

What the share handlers call (:mod:`kafkakit.broker.handlers.share_groups`,
:mod:`kafkakit.broker.handlers.share_fetch`).  It ties together:

- membership and assignment: :mod:`.share_group_protocol`;
- acquisition, acquisition locks, delivery counts and the SPSO of each share-partition:
  :mod:`.share_partition`;
- state persisted in ``__share_group_state`` and replayed when the coordinator is created:
  :mod:`.share_state_topic` (records: :mod:`.share_state_records`);
- group configs and share sessions: :mod:`.share_group_configs`.

One coordinator per broker, created with the broker's first share request
(:func:`share_coordinator`), which is when the topic is replayed: a share group API answers
only after the whole persisted state is back, so a restart loses nothing.  Acquisition locks
expire lazily, at the next call that looks at the share-partition (a waiting ShareFetch wakes up
for the earliest lock deadline), as do member sessions.

Single node only: in cluster mode the handlers answer share requests with an error (the share
state would need the partition leader to persist through a replicated ``__share_group_state``).
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from .share_group_configs import ShareGroupConfigs, ShareSessions
from .share_group_protocol import HeartbeatResult, ShareGroup, ShareGroupProtocol
from .share_partition import Acquired, InFlight, Limits, SharePartition
from .share_state_records import NO_START_OFFSET, ShareStateKey
from .share_state_topic import SNAPSHOT_EVERY, PersistedState, ShareStateTopic

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker.share")

_COORDINATORS: weakref.WeakKeyDictionary[BrokerState, ShareCoordinator] = weakref.WeakKeyDictionary()


def share_coordinator(state: BrokerState) -> ShareCoordinator:
    """The broker's share coordinator, created (and the share state replayed) on first use."""
    found = _COORDINATORS.get(state)
    if found is None:
        found = _COORDINATORS[state] = ShareCoordinator(state)
    return found


@dataclass(frozen=True, slots=True)
class OffsetInfo:
    """DescribeShareGroupOffsets for one partition."""

    start_offset: int  # -1 when the group has no state for it
    lag: int  # -1 when unknown


class ShareCoordinator:
    """Every share group and share-partition of this broker."""

    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self.protocol = ShareGroupProtocol()
        self.configs = ShareGroupConfigs(state.data_dir, state.config)
        self.sessions = ShareSessions()
        self._store = ShareStateTopic(state)
        self._persisted: dict[ShareStateKey, PersistedState] = self._store.replay()
        self._partitions: dict[ShareStateKey, SharePartition] = {}
        for key in self._persisted:
            self.protocol.groups.setdefault(key.group_id, ShareGroup(key.group_id))
        if self._persisted:
            log.info("replayed the state of %d share-partition(s)", len(self._persisted))

    # ------------------------------------------------------------------ topics

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of ``name``, or None."""
        info = self._state.topics.get(name)
        return None if info is None else (info.topic_id, info.num_partitions)

    def topic_by_id(self, topic_id: uuid.UUID | None) -> tuple[str, int] | None:
        """(name, partition count) of the topic with ``topic_id``, or None."""
        info = None if topic_id is None else self._state.topics.by_id(topic_id)
        return None if info is None else (info.name, info.num_partitions)

    def limits(self, group_id: str) -> Limits:
        """The group's acquisition settings."""
        return Limits(
            self.configs.lock_duration_ms(group_id),
            self.configs.delivery_count_limit(group_id),
            self.configs.max_record_locks(group_id),
        )

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.protocol.groups

    # ------------------------------------------------------------------ membership

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: Sequence[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        """ShareGroupHeartbeat; members that left or timed out lose their acquired records."""
        result, removed = self.protocol.heartbeat(
            group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host,
            self.configs.session_timeout_ms(group_id), self.topic,
        )  # fmt: skip
        for gone in removed:
            self._member_gone(gone)
        return result

    def sweep(self) -> None:
        """Remove members past their session timeout (their acquired records are released); the
        admin APIs call it so that a dead member does not linger while nobody heartbeats."""
        for gone in self.protocol.expire_members():
            self._member_gone(gone)

    def _member_gone(self, member_id: str) -> None:
        for key, sp in self._partitions.items():
            changed = sp.release_member(member_id, self.limits(key.group_id))
            self._persist(key, sp, changed)

    # ------------------------------------------------------------------ share-partitions

    def share_partition(self, group_id: str, topic_id: uuid.UUID, partition: int, source: PartitionLog) -> SharePartition:
        """The share-partition, restored from its persisted state or started per
        ``share.auto.offset.reset`` (and its start persisted at once)."""
        key = ShareStateKey(group_id, topic_id, partition)
        sp = self._partitions.get(key)
        if sp is not None:
            return sp
        persisted = self._persisted.get(key)
        if persisted is not None:
            records = {
                offset: InFlight(state, count)
                for offset, (state, count) in persisted.offsets.items()
                if offset >= persisted.start_offset
            }
            sp = SharePartition(persisted.start_offset, records)
        else:
            earliest = self.configs.auto_offset_reset(group_id) == "earliest"
            sp = SharePartition(source.log_start_offset if earliest else source.high_watermark)
            persisted = self._persisted[key] = PersistedState(sp.start_offset)
            self._store.write_snapshot(key, persisted, [])
        self._partitions[key] = sp
        self.protocol.groups.setdefault(group_id, ShareGroup(group_id))
        return sp

    def acquire(
        self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int, source: PartitionLog,
        max_records: int, strict: bool,
    ) -> Acquired:  # fmt: skip
        """Expire locks, then lock up to ``max_records`` records to the member."""
        key = ShareStateKey(group_id, topic_id, partition)
        sp = self.share_partition(group_id, topic_id, partition, source)
        limits = self.limits(group_id)
        self._persist(key, sp, sp.expire_locks(limits))
        acquired, changed = sp.acquire(member_id, source, max_records, limits, strict=strict)
        self._persist(key, sp, changed)
        return acquired

    def acknowledge(
        self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int, source: PartitionLog,
        batches: Iterable[tuple[int, int, tuple[int, ...]]],
    ) -> ErrorCode:  # fmt: skip
        """Apply a partition's acknowledgement batches; the first error (batches before it stay applied)."""
        key = ShareStateKey(group_id, topic_id, partition)
        sp = self.share_partition(group_id, topic_id, partition, source)
        limits = self.limits(group_id)
        self._persist(key, sp, sp.expire_locks(limits))
        error = ErrorCode.none
        changed: list[int] = []
        for first, last, types in batches:
            code, done = sp.acknowledge(member_id, first, last, types, limits)
            changed.extend(done)
            if code is not ErrorCode.none and error is ErrorCode.none:
                error = code
        self._persist(key, sp, changed)
        return error

    def release_session(self, group_id: str, member_id: str) -> None:
        """A share session closed: its member's acquired records become available again."""
        for key, sp in self._partitions.items():
            if key.group_id == group_id:
                self._persist(key, sp, sp.release_member(member_id, self.limits(group_id)))

    def expire_locks(self, keys: Iterable[ShareStateKey]) -> None:
        """Release expired acquisition locks of these share-partitions."""
        for key in keys:
            sp = self._partitions.get(key)
            if sp is not None:
                self._persist(key, sp, sp.expire_locks(self.limits(key.group_id)))

    def next_deadline(self, keys: Iterable[ShareStateKey]) -> float | None:
        """The earliest lock deadline among these share-partitions."""
        found = [d for k in keys if (sp := self._partitions.get(k)) is not None and (d := sp.next_deadline())]
        return min(found, default=None)

    def has_available(self, key: ShareStateKey, high_watermark: int) -> bool:
        sp = self._partitions.get(key)
        return sp is None or sp.has_available(high_watermark)

    def _persist(self, key: ShareStateKey, sp: SharePartition, changed: list[int]) -> None:
        """Write what changed, and wake ShareFetch requests waiting on the partition (a released
        record may be theirs to acquire now)."""
        if changed:
            found = self.topic_by_id(key.topic_id)
            if found is not None:
                self._state.notify_append(found[0], key.partition)
        persisted = self._persisted.get(key)
        if persisted is None:
            return
        moved = sp.start_offset != persisted.start_offset
        if not changed and not moved:
            return
        if persisted.updates_since_snapshot >= SNAPSHOT_EVERY:
            persisted.start_offset = sp.start_offset
            self._store.write_snapshot(key, persisted, sp.state_batches())
            return
        self._store.write_update(
            key, persisted, sp.start_offset if moved else NO_START_OFFSET, sp.persisted_batches(changed)
        )
        persisted.start_offset = sp.start_offset

    # ------------------------------------------------------------------ admin

    def describe_offsets(self, group_id: str, topic_id: uuid.UUID, partition: int) -> OffsetInfo:
        """The SPSO and lag of one partition (-1/-1 without state)."""
        key = ShareStateKey(group_id, topic_id, partition)
        source = self._log_of(topic_id, partition)
        sp = self._partitions.get(key)
        if sp is not None:
            start, done = sp.start_offset, sp.delivery_complete_count()
        elif key in self._persisted:
            persisted = self._persisted[key]
            start = persisted.start_offset
            done = sum(1 for state, _ in persisted.offsets.values() if state in (2, 4))
        else:
            return OffsetInfo(-1, -1)
        lag = -1 if source is None else max(source.high_watermark - start - done, 0)
        return OffsetInfo(start, lag)

    def offsets_of_group(self, group_id: str) -> dict[uuid.UUID, list[int]]:
        """Every (topic id -> partitions) the group has state for."""
        keys = {k for k in self._persisted if k.group_id == group_id}
        out: dict[uuid.UUID, list[int]] = {}
        for key in sorted(keys, key=lambda k: (str(k.topic_id), k.partition)):
            out.setdefault(key.topic_id, []).append(key.partition)
        return out

    def alter_offset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int) -> ErrorCode:
        """AlterShareGroupOffsets: start the share-partition over at ``start_offset`` (group must be empty)."""
        group = self.protocol.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group
        source = self._log_of(topic_id, partition)
        if source is None:
            return ErrorCode.unknown_topic_or_partition
        key = ShareStateKey(group_id, topic_id, partition)
        if start_offset < 0:
            start_offset = source.high_watermark if start_offset == -1 else source.log_start_offset
        sp = self._partitions.get(key)
        if sp is None:
            sp = self._partitions[key] = SharePartition(start_offset)
        sp.reset(start_offset)
        persisted = self._persisted.setdefault(key, PersistedState(start_offset))
        persisted.start_offset = start_offset
        persisted.offsets.clear()
        persisted.state_epoch += 1
        self._store.write_snapshot(key, persisted, [])
        self.protocol.groups.setdefault(group_id, ShareGroup(group_id))
        return ErrorCode.none

    def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> ErrorCode:
        """DeleteShareGroupOffsets for one topic: its share-partitions are forgotten (group must be empty)."""
        group = self.protocol.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group
        for key in [k for k in self._persisted if k.group_id == group_id and k.topic_id == topic_id]:
            self._forget(key)
        return ErrorCode.none

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a share group: its members must be gone; its state is deleted."""
        error = self.protocol.delete(group_id)
        if error is not ErrorCode.none:
            return error
        for key in [k for k in self._persisted if k.group_id == group_id]:
            self._forget(key)
        self.configs.replace(group_id, {}) if group_id in self.configs.groups else None
        return ErrorCode.none

    def _forget(self, key: ShareStateKey) -> None:
        self._store.write_tombstones(key)
        self._persisted.pop(key, None)
        self._partitions.pop(key, None)

    def _log_of(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None:
        found = self.topic_by_id(topic_id)
        return None if found is None else self._state.partition_log(found[0], partition)
