"""A consumer partition's state: its position, buffered fetch responses and leader epoch."""

from __future__ import annotations

from collections import deque
from typing import Any, TypeAlias

from kafkakit.records import BatchHeader
from kafkakit.structs import ConsumerRecord, TopicPartition

__all__ = ["NO_EPOCH", "PIECE_BYTES", "PIECE_RECORDS", "Chunk", "PartitionState"]

Record: TypeAlias = ConsumerRecord[Any, Any]
#: No leader epoch known (Kafka's -1).
NO_EPOCH = -1

#: A decoding step takes whole batches up to about this many records (at least one batch) ...
PIECE_RECORDS = 4096
#: ... or this many bytes on the wire. Records handed out in such small steps are still in the
#: CPU cache when the application reads them (decoding a whole 8 MiB fetch at once is ~30% slower).
PIECE_BYTES = 1 << 20


class Chunk:
    """The records bytes one Fetch response returned for one partition, decoded a piece at a time."""

    __slots__ = ("data", "fetch_offset", "next_offset", "aborted", "batches", "next_batch", "records", "index")

    def __init__(
        self,
        data: bytes,
        fetch_offset: int,
        next_offset: int,
        aborted: list[tuple[int, int]] | None,
        batches: list[tuple[int, BatchHeader]],
    ) -> None:
        self.data = data
        self.fetch_offset = fetch_offset  # records below it belong to an earlier position
        self.next_offset = next_offset  # one past the last complete batch
        self.aborted = aborted  # (producer id, first offset) of aborted transactions, read_committed only
        self.batches = batches  # (position, header) of every complete batch in data
        self.next_batch = 0  # batches[next_batch:] are not decoded yet
        self.records: list[Record] = []  # the decoded piece being handed out
        self.index = 0  # records[:index] were handed out

    def next_piece(self) -> list[tuple[int, BatchHeader]]:
        """The next batches to decode: at least one, more while they stay within the piece limits."""
        batches = self.batches
        first = stop = self.next_batch
        count = size = 0
        while stop < len(batches):
            header = batches[stop][1]
            count += header.record_count
            size += header.batch_length
            if stop > first and (count > PIECE_RECORDS or size > PIECE_BYTES):
                break
            stop += 1
        self.next_batch = stop
        return batches[first:stop]


class PartitionState:
    """Position, buffered data and fetch bookkeeping of one assigned partition."""

    __slots__ = (
        "tp",
        "position",
        "fetch_offset",
        "paused",
        "epoch",
        "chunks",
        "buffered_bytes",
        "in_flight",
        "error",
        "highwater",
        "last_stable_offset",
        "log_start_offset",
        "max_bytes",
        "leader_epoch",
        "epoch_marks",
        "validating",
        "reset_by_policy",
    )

    def __init__(self, tp: TopicPartition, max_bytes: int) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.paused = False
        self.epoch = 0
        self.chunks: deque[Chunk] = deque()
        self.buffered_bytes = 0
        self.in_flight = False
        self.error: BaseException | None = None
        self.highwater: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        self.max_bytes = max_bytes
        # KIP-320. The partition leader epoch (from metadata) this partition is fetched under,
        # and where the fetched data's epochs change: (first offset, epoch), oldest first. The
        # epoch of the record before ``position`` is what commits carry and what a new leader is
        # asked about (OffsetForLeaderEpoch) to find out whether its log still holds our position.
        self.leader_epoch = NO_EPOCH
        self.epoch_marks: list[tuple[int, int]] = []
        self.validating = False  # the position is being checked against a new leader's log
        self.reset_by_policy = False  # a reset skips the committed offset (the leader disowned it)

    def seek(self, offset: int | None, offset_epoch: int | None = None) -> None:
        """Move to ``offset`` (None = reset by policy), dropping buffered and in-flight data.

        ``offset_epoch`` is the leader epoch of the record before ``offset`` when known (a
        committed offset's, or the divergence point's); the position is then checked against
        the current leader before fetching (``validating``).
        """
        self.position = offset
        self.fetch_offset = offset
        self.epoch += 1
        self.chunks.clear()
        self.buffered_bytes = 0
        self.error = None
        self.reset_by_policy = False
        self.epoch_marks = [] if offset is None or offset_epoch is None else [(offset - 1, offset_epoch)]
        self.validating = bool(self.epoch_marks)
        if self.validating:
            self.leader_epoch = NO_EPOCH  # validated under whichever leader the metadata names next

    def note_epochs(self, batches: list[tuple[int, BatchHeader]]) -> None:
        """Remember where the leader epoch changes in newly fetched ``batches``."""
        marks = self.epoch_marks
        known = marks[-1][1] if marks else NO_EPOCH
        if batches[0][1].partition_leader_epoch == known == batches[-1][1].partition_leader_epoch:
            return  # the common case: no new epoch in this response
        for _, header in batches:
            if header.partition_leader_epoch != known:
                known = header.partition_leader_epoch
                marks.append((header.base_offset, known))

    def position_epoch(self) -> int | None:
        """The leader epoch of the record before ``position`` (None when unknown)."""
        position = self.position
        if position is None:
            return None
        marks = self.epoch_marks
        for index in range(len(marks) - 1, -1, -1):
            first, epoch = marks[index]
            if first < position:
                if index > 8:
                    del marks[: index - 1]  # keep the list short: earlier marks are behind us
                return epoch if epoch >= 0 else None
        return None
