"""A partition's leader-epoch cache: where each leader epoch starts in the log (Kafka's LeaderEpochFileCache).

Each entry ``(epoch, start_offset)`` says that the first batch written under
``epoch`` has base offset ``start_offset``; an epoch ends where the next one
starts, the latest one at the log end offset.  Epochs and start offsets both
increase strictly from entry to entry.  The cache is what OffsetForLeaderEpoch
answers from, and what a follower will truncate by when replication comes.

It is kept in the partition directory as ``leader-epoch-checkpoint`` in Kafka's
text format::

    0            <- version
    2            <- number of entries
    0 0          <- "epoch startOffset", oldest first
    3 1450

The file is rewritten (atomically, fsync'ed) whenever an entry is added or the
log's end is truncated, as Kafka does; a move of the log start (retention,
DeleteRecords) changes it in memory and is written at the next rewrite or
clean shutdown, since a stale first entry is harmless (the next open cuts it
again).  Log compaction never changes it: cleaning keeps every batch's offsets
and partitionLeaderEpoch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from .checkpoint import write_atomically

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class EpochEntry(NamedTuple):
    """One leader epoch and the offset of its first batch."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The epoch entries of one partition, oldest first, backed by its checkpoint file."""

    def __init__(self, path: Path, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = list(entries or [])
        #: Changed in memory since the file was last written (only truncate_from_start defers it).
        self.dirty = False

    # ---- persistence -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache | None:
        """The cache stored at ``path``; None if the file is missing or not a valid checkpoint
        (the caller rebuilds it from the batches' partitionLeaderEpoch then)."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        try:
            if len(lines) < 2 or int(lines[0]) != _VERSION:
                return None
            count = int(lines[1])
            entries = []
            for line in lines[2 : 2 + count]:
                epoch, start = line.split()
                entries.append(EpochEntry(int(epoch), int(start)))
        except ValueError:
            return None
        if len(entries) != count or any(
            b.epoch <= a.epoch or b.start_offset <= a.start_offset
            for a, b in zip(entries, entries[1:], strict=False)
        ):
            return None
        if any(e.epoch < 0 or e.start_offset < 0 for e in entries):
            return None
        return cls(path, entries)

    def write(self) -> None:
        """Rewrite the checkpoint file (atomic replace, fsync'ed)."""
        body = "".join(f"{e.epoch} {e.start_offset}\n" for e in self._entries)
        write_atomically(self.path, f"{_VERSION}\n{len(self._entries)}\n{body}", fsync=True)
        self.dirty = False

    # ---- queries -----------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch under which ``offset`` was written; -1 when it is before the first entry."""
        i = bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEntry:
        """``(epoch, end offset)`` answering OffsetForLeaderEpoch for ``requested_epoch``.

        Kafka's rules: the latest epoch ends at the log end offset; otherwise the
        answer is the largest known epoch <= the requested one and the start offset of
        the epoch after it (or the requested epoch itself with the first later epoch's
        start, when it is older than every entry); ``(-1, -1)`` for epoch -1 or an epoch
        newer than every entry.
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return EpochEntry(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if entries[-1].epoch == requested_epoch:
            return EpochEntry(requested_epoch, log_end_offset)
        epochs = [e.epoch for e in entries]
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(entries):
            return EpochEntry(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if higher == 0:
            return EpochEntry(requested_epoch, entries[0].start_offset)
        return EpochEntry(entries[higher - 1].epoch, entries[higher].start_offset)

    # ---- changes -----------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's assign).

        A no-op when ``epoch`` is already the latest and starts no later.  Entries
        that would break monotonicity (an epoch >= ``epoch`` or a start >= ``start_offset``)
        are dropped first.  Returns whether the cache changed.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and entries[-1].epoch == epoch and entries[-1].start_offset <= start_offset:
            return False
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
        entries.append(EpochEntry(epoch, start_offset))
        if write:
            self.write()
        return True

    def truncate_from_end(self, end_offset: int, *, write: bool = True) -> bool:
        """Drop the entries starting at or after ``end_offset`` (the log was cut there)."""
        keep = bisect_left([e.start_offset for e in self._entries], end_offset)
        if keep == len(self._entries):
            return False
        del self._entries[keep:]
        if write:
            self.write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: entries at or below it collapse into one entry
        for the epoch in force there, starting at ``start_offset`` (Kafka's truncateFromStart)."""
        entries = self._entries
        below = bisect_right([e.start_offset for e in entries], start_offset)
        if below == 0:
            return False
        last = entries[below - 1]
        if below == 1 and last.start_offset == start_offset:
            return False
        entries[:below] = [EpochEntry(last.epoch, start_offset)]
        self.dirty = True
        return True

    def clear(self) -> None:
        self._entries.clear()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries})"
