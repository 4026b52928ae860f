"""One share-partition (KIP-932): a share group's in-flight records of one topic partition.

Kafka's ``SharePartition``, per offset rather than per batch.  Offsets from the share-partition
start offset (SPSO) up to the end offset (SPEO, exclusive: the next offset never acquired) are
*in flight*, each in one state:

- AVAILABLE (0): may be acquired (never delivered, released, or its lock timed out);
- ACQUIRED (1): locked to one member until it acknowledges or its acquisition lock
  (``record_lock_duration_ms``) expires;
- ACKNOWLEDGED (2) and ARCHIVED (4): done.

Acquiring a record increments its delivery count.  A record released (RELEASE, or a lock that
timed out) whose delivery count reached ``delivery_count_limit`` is ARCHIVED instead of made
AVAILABLE again: a poison record stops being redelivered.  The SPSO moves past every leading
offset that is done, and no offset at or beyond ``SPSO + max_record_locks`` is acquired until it
moves.  Control batches (transaction markers) are archived without being delivered, and offsets
the log no longer holds (compacted away) are archived when a read passes them.

Every change a restart must keep (acknowledgements, releases, archiving and a moved SPSO) is
returned as a list of changed offsets; the caller persists them
(:mod:`.share_state_topic`).  ACQUIRED is never persisted: after a restart those records are
AVAILABLE again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kafkakit.broker.log import BatchHeader
from kio.schema.errors import ErrorCode

from .share_state_records import StateBatch

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# Acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_DONE = (ACKNOWLEDGED, ARCHIVED)
_NEVER = float("inf")


class BatchSource(Protocol):
    """What the share-partition reads: the partition log (:class:`~kafkakit.broker.log.PartitionLog`)."""

    @property
    def high_watermark(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    def iter_batches(self, start_offset: int | None = None) -> Iterable[tuple[BatchHeader, _Slice]]: ...


class _Slice(Protocol):
    def read_bytes(self) -> bytes: ...


@dataclass(slots=True)
class InFlight:
    """One in-flight offset."""

    state: int
    delivery_count: int = 0
    member_id: str = ""
    deadline: float = 0.0  # monotonic seconds at which an acquisition lock expires


@dataclass(frozen=True, slots=True)
class Limits:
    """The share group's settings that govern acquisition (its config over the broker's)."""

    record_lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int


@dataclass(slots=True)
class Acquired:
    """What one acquisition hands a member: whole batches and the acquired offset ranges."""

    batches: list[bytes] = field(default_factory=list)
    ranges: list[tuple[int, int, int]] = field(default_factory=list)  # (first, last, delivery count)
    count: int = 0


Clock = Callable[[], float]


class SharePartition:
    """The in-flight records of one (share group, topic, partition)."""

    def __init__(self, start_offset: int, records: dict[int, InFlight] | None = None, clock: Clock = time.monotonic):
        self.start_offset = start_offset
        self.records: dict[int, InFlight] = dict(records or {})
        self.end_offset = max(self.records, default=start_offset - 1) + 1
        self.end_offset = max(self.end_offset, start_offset)
        # Offsets in [SPSO, SPEO) the persisted state did not name were delivered at most once
        # and never acknowledged: available again.
        for offset in range(start_offset, self.end_offset):
            self.records.setdefault(offset, InFlight(AVAILABLE))
        self._clock = clock
        # Hints that keep each request from scanning every in-flight offset (up to
        # max_record_locks of them): no offset below ``_first_available`` is AVAILABLE, and no
        # acquisition lock expires before ``_earliest_deadline`` (a lower bound; exact after a scan).
        self._first_available = start_offset
        self._earliest_deadline = min((r.deadline for r in self.records.values() if r.state == ACQUIRED), default=_NEVER)
        self._advance()

    # ------------------------------------------------------------------ queries

    def next_deadline(self) -> float | None:
        """When the earliest acquisition lock expires, or None when nothing is acquired."""
        if self._earliest_deadline <= self._clock():  # maybe stale: the records may be gone
            self._rescan_deadline()
        return None if self._earliest_deadline == _NEVER else self._earliest_deadline

    def _rescan_deadline(self) -> None:
        self._earliest_deadline = min(
            (r.deadline for r in self.records.values() if r.state == ACQUIRED), default=_NEVER
        )

    def _first_available_offset(self) -> int:
        """The lowest AVAILABLE offset in flight, else the end offset."""
        records = self.records
        for offset in range(max(self._first_available, self.start_offset), self.end_offset):
            record = records.get(offset)
            if record is not None and record.state == AVAILABLE:
                self._first_available = offset
                return offset
        self._first_available = self.end_offset
        return self.end_offset

    def has_available(self, high_watermark: int) -> bool:
        """Whether an acquisition could find something (a released record or new data)."""
        if self.end_offset < high_watermark:
            return True
        return self._first_available_offset() < self.end_offset

    def delivery_complete_count(self) -> int:
        """In-flight offsets already acknowledged or archived (for the lag Kafka reports)."""
        return sum(1 for r in self.records.values() if r.state in _DONE)

    def state_batches(self) -> list[StateBatch]:
        """Every in-flight offset as persisted state batches (ACQUIRED counts as AVAILABLE)."""
        return to_batches((o, r) for o, r in sorted(self.records.items()))

    # ------------------------------------------------------------------ locks

    def expire_locks(self, limits: Limits) -> list[int]:
        """Release every record whose acquisition lock has expired; the offsets that changed."""
        now = self._clock()
        if now < self._earliest_deadline:
            return []
        changed = [o for o, r in self.records.items() if r.state == ACQUIRED and r.deadline <= now]
        for offset in changed:
            self._release(offset, limits)
        self._rescan_deadline()
        if changed:
            self._advance()
        return changed

    def release_member(self, member_id: str, limits: Limits) -> list[int]:
        """Release everything ``member_id`` holds (its share session closed or it left the group)."""
        changed = [o for o, r in self.records.items() if r.state == ACQUIRED and r.member_id == member_id]
        for offset in changed:
            self._release(offset, limits)
        if changed:
            self._advance()
        return changed

    def _release(self, offset: int, limits: Limits) -> None:
        record = self.records[offset]
        if record.delivery_count < limits.delivery_count_limit:
            self._first_available = min(self._first_available, offset)
        record.state = ARCHIVED if record.delivery_count >= limits.delivery_count_limit else AVAILABLE
        record.member_id = ""
        record.deadline = 0.0

    # ------------------------------------------------------------------ acquisition

    def acquire(
        self, member_id: str, log: BatchSource, max_records: int, limits: Limits, *, strict: bool = False
    ) -> tuple[Acquired, list[int]]:
        """Lock up to ``max_records`` available records to ``member_id`` (whole batches unless
        ``strict``); returns them and the offsets whose persisted state changed (archived gaps and
        control records)."""
        out = Acquired()
        changed: list[int] = []
        high_watermark = log.high_watermark
        if self.start_offset < log.log_start_offset:  # retention removed in-flight offsets
            for offset in range(self.start_offset, log.log_start_offset):
                self.records.pop(offset, None)
            self.start_offset = log.log_start_offset
            self.end_offset = max(self.end_offset, self.start_offset)
            changed.append(self.start_offset)
        first = self._first_available_offset()
        if first >= high_watermark or max_records <= 0:
            self._advance()
            return out, changed
        now = self._clock()
        deadline = now + limits.record_lock_duration_ms / 1000
        self._earliest_deadline = min(self._earliest_deadline, deadline)
        lock_end = self.start_offset + limits.max_record_locks
        expected = first
        done = False
        for header, data in log.iter_batches(first):
            if header.base_offset >= high_watermark or done:
                break
            last = min(header.last_offset, high_watermark - 1)
            if last < expected:
                continue
            # Offsets between the previous batch and this one are no longer in the log.
            for offset in range(expected, header.base_offset):
                if self._archive_gap(offset):
                    changed.append(offset)
            expected = last + 1
            took: list[int] = []
            for offset in range(max(header.base_offset, self.start_offset, first), last + 1):
                record = self.records.get(offset)
                if record is None:
                    if offset < self.end_offset:
                        continue  # done and forgotten
                    if offset >= lock_end:
                        done = True
                        break
                    record = self.records[offset] = InFlight(AVAILABLE)
                    self.end_offset = offset + 1
                if record.state != AVAILABLE:
                    continue
                if header.is_control:
                    record.state = ARCHIVED
                    changed.append(offset)
                    continue
                if strict and out.count + len(took) >= max_records:
                    done = True
                    break
                record.state = ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                record.deadline = deadline
                took.append(offset)
            if took:
                out.batches.append(data.read_bytes())
                _add_ranges(out.ranges, took, self.records)
                out.count += len(took)
                if out.count >= max_records:
                    done = True
        self._advance()
        return out, changed

    def _archive_gap(self, offset: int) -> bool:
        record = self.records.get(offset)
        if record is None or record.state != AVAILABLE:
            return False
        record.state = ARCHIVED
        return True

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(
        self, member_id: str, first: int, last: int, types: tuple[int, ...], limits: Limits
    ) -> tuple[ErrorCode, list[int]]:
        """Apply one acknowledgement batch of ``member_id``: all or nothing.  Returns the error
        (INVALID_RECORD_STATE when an offset is not acquired by the member) and changed offsets."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.invalid_request, []
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
            return ErrorCode.invalid_request, []
        plan: list[tuple[int, int]] = []
        for offset in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            record = self.records.get(offset)
            if kind == GAP and (record is None or record.state in _DONE):
                continue
            if record is None or record.state != ACQUIRED or record.member_id != member_id:
                return ErrorCode.invalid_record_state, []
            plan.append((offset, kind))
        changed: list[int] = []
        renewed_until = self._clock() + limits.record_lock_duration_ms / 1000
        for offset, kind in plan:
            record = self.records[offset]
            if kind == RENEW:
                record.deadline = renewed_until
                continue
            if kind == ACCEPT:
                record.state = ACKNOWLEDGED
            elif kind == RELEASE:
                self._release(offset, limits)
            else:  # REJECT, GAP
                record.state = ARCHIVED
            record.member_id = ""
            changed.append(offset)
        if changed:
            self._advance()
        return ErrorCode.none, changed

    # ------------------------------------------------------------------ start offset

    def _advance(self) -> None:
        """Move the SPSO past leading offsets that are done, forgetting them."""
        offset = self.start_offset
        while offset < self.end_offset:
            record = self.records.get(offset)
            if record is not None and record.state not in _DONE:
                break
            self.records.pop(offset, None)
            offset += 1
        self.start_offset = offset

    def reset(self, start_offset: int) -> None:
        """Start over at ``start_offset`` (AlterShareGroupOffsets): nothing in flight."""
        self.records.clear()
        self.start_offset = self.end_offset = self._first_available = start_offset
        self._earliest_deadline = _NEVER

    def persisted_batches(self, offsets: Iterable[int]) -> list[StateBatch]:
        """State batches for the changed ``offsets`` still in flight (the rest are below the SPSO)."""
        return to_batches((o, self.records[o]) for o in sorted(set(offsets)) if o in self.records)


def to_batches(items: Iterable[tuple[int, InFlight]]) -> list[StateBatch]:
    """Runs of consecutive offsets with one persisted state and delivery count."""
    out: list[StateBatch] = []
    for offset, record in items:
        state = AVAILABLE if record.state == ACQUIRED else record.state
        if out:
            prev = out[-1]
            if prev.last_offset + 1 == offset and (prev.delivery_state, prev.delivery_count) == (
                state,
                record.delivery_count,
            ):
                out[-1] = StateBatch(prev.first_offset, offset, state, record.delivery_count)
                continue
        out.append(StateBatch(offset, offset, state, record.delivery_count))
    return out


def _add_ranges(ranges: list[tuple[int, int, int]], offsets: list[int], records: dict[int, InFlight]) -> None:
    for offset in offsets:
        count = records[offset].delivery_count
        if ranges and ranges[-1][1] + 1 == offset and ranges[-1][2] == count:
            ranges[-1] = (ranges[-1][0], offset, count)
        else:
            ranges.append((offset, offset, count))
