"""Crash-safe replacement of segments by their cleaned version (Kafka's .cleaned/.swap protocol).

The cleaner writes a group's cleaned copy as ``<base>.log.cleaned`` (plus
``.index.cleaned`` / ``.timeindex.cleaned``); the swap then

1. renames the three files to ``.swap`` (index files first, the ``.log`` last:
   ``<base>.log.swap`` existing is the commit point),
2. deletes the old segments' files,
3. renames the ``.swap`` files to their live names (index files first again).

:func:`recover_swaps` runs when a partition directory is opened, before
anything else looks at the files, and brings any crash state back to a
consistent log: without ``<base>.log.swap`` the clean never committed and
every ``.cleaned``/stray ``.swap`` file is deleted (the old segments are
intact); with it, the swap is finished — every old segment whose base offset
lies in the swapped segment's offset range is deleted and the ``.swap`` files
renamed (its indexes are rebuilt when the segment is loaded, see
:func:`swapped_bases`).  Every step is idempotent, so a crash during
recovery is recovered the same way.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from .batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH
from .checkpoint import fsync_path

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_LOG_SWAP_RE = re.compile(r"(\d{20})\.log\.swap")
_SEGMENT_FILE_RE = re.compile(r"(\d{20})\.(log|index|timeindex)")
_SCAN = 1 << 16


def next_offset_of_file(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a ``.log`` file (``base_offset`` if it has none)."""
    next_offset = base_offset
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            raw = os.pread(f.fileno(), HEADER_SIZE, position)
            fields = HEADER.unpack_from(raw)
            batch_length, last_offset_delta = fields[1], fields[6]
            if (
                fields[3] != 2
                or batch_length < MIN_BATCH_LENGTH
                or position + batch_length + LOG_OVERHEAD > size
            ):
                break
            next_offset = fields[0] + last_offset_delta + 1
            position += batch_length + LOG_OVERHEAD
    return next_offset


def recover_swaps(directory: Path) -> list[int]:
    """Finish or roll back an interrupted swap in ``directory``; returns the swapped-in bases.

    The caller must load those segments with full recovery (their indexes may be stale).
    """
    names = os.listdir(directory)
    swapped: list[int] = []
    for name in names:
        match = _LOG_SWAP_RE.fullmatch(name)
        if match is None:
            continue
        base = int(match.group(1))
        end = next_offset_of_file(directory / name, base)
        for other in names:
            live = _SEGMENT_FILE_RE.fullmatch(other)
            if live is not None and base <= int(live.group(1)) < max(end, base + 1):
                logger.info("completing an interrupted swap in %s: deleting %s", directory, other)
                (directory / other).unlink(missing_ok=True)
        for suffix in (".index", ".timeindex", ".log"):
            swap = directory / f"{base:020d}{suffix}{SWAP_SUFFIX}"
            if swap.exists():
                os.replace(swap, directory / f"{base:020d}{suffix}")
        swapped.append(base)
        logger.warning("completed an interrupted segment swap at offset %d in %s", base, directory)
    for name in os.listdir(directory):
        if name.endswith(CLEANED_SUFFIX) or name.endswith(SWAP_SUFFIX):
            logger.info("deleting leftover cleaner file %s/%s", directory, name)
            (directory / name).unlink(missing_ok=True)
    if swapped:
        fsync_path(directory)
    return swapped


#: Test hook: the name of a point in the clean/swap sequence at which the process exits at once
#: (simulates a crash there); see tests/test_log_compaction_crash.py.
FAILPOINT_ENV = "KAFKAKIT_CLEANER_FAILPOINT"


def swap_failpoint(name: str) -> None:
    """Exit the process immediately (no cleanup) if the failpoint env var names ``name``."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os._exit(17)
