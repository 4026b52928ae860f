"""Checks for what a partition reads back: a leader's fetched batches and the segments on disk.

:func:`fetched_batches` validates a follower's Fetch answer before it is written;
:func:`remove_strays` and :func:`load_segments` open a partition directory after
a crash (temp files and orphan indexes dropped, segments past the recovery point
re-verified, and everything after a corrupt batch deleted).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from crc32c import crc32c

from .batch import ATTRIBUTES_OFFSET, HEADER_SIZE, BatchHeader, read_batch_header, structural_problem
from .checkpoint import TMP_SUFFIX
from .config import LogConfig
from .errors import CORRUPT_MESSAGE, InvalidBatchError
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment

logger = logging.getLogger(__name__)

_SEGMENT_RE = re.compile(r"(\d{20})\.log")


def fetched_batches(view: memoryview, log_end: int) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of the whole batches of a leader's Fetch answer, checked as a
    follower checks them (structure, CRC-32C, offsets from ``log_end`` on and increasing);
    a partial last batch is left out.  Compacted batches (record counts below the offset
    span, even empty ones) are fine here, unlike in a produced record set."""
    batches: list[tuple[int, BatchHeader]] = []
    pos, end, expected = 0, len(view), log_end
    while end - pos >= HEADER_SIZE:
        header = read_batch_header(view, pos)
        size = header.size
        if size > end - pos:
            break  # cut by the leader's size limit
        problem = structural_problem(header)
        if problem is not None:
            raise InvalidBatchError(CORRUPT_MESSAGE, f"fetched batch at byte {pos}: {problem}")
        if crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != header.crc:
            raise InvalidBatchError(CORRUPT_MESSAGE, f"fetched batch at byte {pos} fails its CRC-32C check")
        if header.base_offset < expected:
            raise InvalidBatchError(
                CORRUPT_MESSAGE,
                f"fetched batch at offset {header.base_offset} does not follow offset {expected - 1}",
            )
        batches.append((pos, header))
        expected = header.last_offset + 1
        pos += size
    return batches


def remove_strays(directory: Path) -> None:
    """Drop leftovers of interrupted writes: temp files and indexes without a log file."""
    for path in directory.iterdir():
        if path.name.endswith(TMP_SUFFIX):
            path.unlink(missing_ok=True)
        elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not path.with_suffix(LOG_SUFFIX).exists():
            path.unlink(missing_ok=True)


def load_segments(
    directory: Path, config: LogConfig, now: int, *, clean: bool, recovery_point: int
) -> list[LogSegment]:
    bases = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _SEGMENT_RE.fullmatch(p.name)))
    segments: list[LogSegment] = []
    for i, base in enumerate(bases):
        following = bases[i + 1] if i + 1 < len(bases) else None
        recover = not clean and (following is None or following > recovery_point)
        segment = LogSegment.load(directory, base, config, now, recover=recover)
        segments.append(segment)
        if following is not None and segment.truncated_bytes:
            # Data after a corrupt batch cannot be trusted to line up: drop the later segments.
            for later in bases[i + 1 :]:
                logger.warning(
                    "deleting segment %020d of %s after corruption in an earlier one", later, directory
                )
                LogSegment(directory, later, config, now).delete()
            break
    return segments
