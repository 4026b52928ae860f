"""Offsets as Spark sees them: per-partition JSON, offset specs, ranges and read limits.

Spark compares a source's offsets as JSON strings, so :func:`to_json` always
writes the same text for the same offsets (``{"topic": {"0": 42}}``, keys
sorted).  The option parsers here raise :class:`KafkaConfigError` naming the
option, so a bad ``startingOffsets`` fails when the query is defined.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kafkakit.errors import KafkaConfigError
from kafkakit.structs import TopicPartition

#: Offsets one partition at a time (the next offset to read, or a range end).
PartitionOffsets = dict[TopicPartition, int]

#: The special offsets of Spark's JSON offset specs (as in ListOffsets).
EARLIEST = -2
LATEST = -1


def to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"0": 42}}`` built in sorted order (topics by name, partitions by number), so
    that ``json.dumps`` of it, which Spark writes to its offset log, is always the same text."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return nested


def to_json(offsets: Mapping[TopicPartition, int]) -> str:
    """:func:`to_dict` as JSON text."""
    return json.dumps(to_dict(offsets))


def from_dict(raw: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """The inverse of :func:`to_dict` (offsets coming back from Spark's offset log)."""
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in raw.items() for p, o in parts.items()}


def from_json(text: str, option: str, *, allow_special: tuple[int, ...] = ()) -> PartitionOffsets:
    """Parse ``{"topic": {"0": 42}}``; offsets below 0 must be among ``allow_special``."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise KafkaConfigError(option, f"is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(raw, dict):
        raise KafkaConfigError(option, f'must be a JSON object like {{"topic": {{"0": 23}}}}, got {text!r}')
    out: PartitionOffsets = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise KafkaConfigError(option, f"topic {topic!r} must map partition numbers to offsets")
        for part, offset in parts.items():
            partition = _partition_number(part, option)
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise KafkaConfigError(option, f"offset of {topic}-{part} must be an integer, got {offset!r}")
            if offset < 0 and offset not in allow_special:
                allowed = " or ".join(str(s) for s in allow_special) or "none"
                raise KafkaConfigError(
                    option, f"offset of {topic}-{part} is {offset} (negative offsets allowed: {allowed})"
                )
            out[TopicPartition(topic, partition)] = offset
    return out


def _partition_number(text: object, option: str) -> int:
    try:
        value = int(str(text))
    except ValueError:
        raise KafkaConfigError(option, f"partition {text!r} is not a number") from None
    if value < 0:
        raise KafkaConfigError(option, f"partition {text!r} is negative")
    return value


def parse_assign(text: str, option: str = "assign") -> list[TopicPartition]:
    """The ``assign`` option: ``{"topic": [0, 1]}``."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise KafkaConfigError(option, f"is not valid JSON ({exc}): {text!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise KafkaConfigError(option, f'must be a JSON object like {{"topic": [0, 1]}}, got {text!r}')
    out = []
    for topic, parts in raw.items():
        if not isinstance(parts, list) or not parts:
            raise KafkaConfigError(option, f"topic {topic!r} must map to a non-empty list of partitions")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise KafkaConfigError(option, f"partition {part!r} of {topic!r} is not a partition number")
            out.append(TopicPartition(topic, part))
    return sorted(set(out))


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: earliest, latest, explicit offsets, or timestamps."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    #: ``offsets``: per partition (may hold EARLIEST/LATEST); ``timestamps``: ms per partition.
    per_partition: PartitionOffsets | None = None
    #: ``timestamp``: one time (ms) for every partition.
    timestamp: int | None = None


def parse_offset_spec(text: str | None, option: str, default: str, *, ending: bool) -> OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: earliest, latest or JSON (-2 = earliest, -1 = latest)."""
    raw = (default if text is None else text).strip()
    lowered = raw.lower()
    if lowered == "latest":
        return OffsetSpec("latest")
    if lowered == "earliest":
        if ending:
            raise KafkaConfigError(option, "cannot be 'earliest' (use 'latest' or JSON offsets)")
        return OffsetSpec("earliest")
    if not raw.startswith("{"):
        raise KafkaConfigError(option, f"must be 'earliest', 'latest' or JSON offsets, got {raw!r}")
    # Spark's connector forbids -2 (earliest) as an ending offset.
    special = (LATEST,) if ending else (EARLIEST, LATEST)
    return OffsetSpec("offsets", per_partition=from_json(raw, option, allow_special=special))


def parse_timestamp(text: str, option: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise KafkaConfigError(option, f"must be a timestamp in milliseconds, got {text!r}") from None
    if value < 0:
        raise KafkaConfigError(option, f"must not be negative, got {value}")
    return value


def parse_timestamps(text: str, option: str) -> PartitionOffsets:
    """``startingOffsetsByTimestamp``: ``{"topic": {"0": 1700000000000}}``."""
    return from_json(text, option)


def limit_offsets(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> PartitionOffsets:
    """End offsets that read at most ``max_rows`` records in all, shared in proportion to each
    partition's backlog (as Spark's connector does); never below ``start``.

    Every partition with a backlog reads at least one record, so a query keeps
    moving even when ``max_rows`` is smaller than the number of partitions.
    ``start`` must hold every partition of ``latest``.
    """
    backlog = {tp: max(0, end - start[tp]) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return {tp: max(end, start[tp]) for tp, end in latest.items()}
    out: PartitionOffsets = {}
    for tp, size in backlog.items():
        share = max(1, math.floor(size * max_rows / total)) if size else 0
        out[tp] = start[tp] + min(size, share)
    return out


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: what one Spark task reads."""

    tp: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per partition, split into more (weighted by size) up to ``min_partitions`` tasks."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        # Spark's connector: parts proportional to size; what is left over goes to the larger ranges.
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        step, extra = divmod(r.size, parts)
        begin = r.start
        for i in range(parts):
            stop = begin + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.tp, begin, stop))
            begin = stop
    return out
