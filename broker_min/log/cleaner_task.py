"""The background log cleaner of a broker (Kafka's LogCleaner thread + LogCleanerManager).

Every ``log.cleaner.backoff.ms`` without work (at once after a pass that cleaned
something) it snapshots the compacted logs, picks the filthiest one worth cleaning
(highest dirty ratio; see :mod:`.cleaner` for the rules) and runs the pass in a
worker thread (``asyncio.to_thread``) under the ``log.cleaner.io.max.bytes.per.second``
budget, so the event loop keeps serving appends and fetches.  Back on the event loop
it swaps the cleaned segments in (renames and unlinks only) and advances the
partition's entry in ``<data_dir>/cleaner-offset-checkpoint`` (Kafka's file and
format: version 0, entry count, ``topic partition offset`` lines) to the end of the
cleaned range, where the next pass's dirty section starts.

A pass that fails (I/O error, corrupt segment) is logged and the partition is marked
uncleanable until restart, as Kafka does; :meth:`LogCleaner.stop` makes a running
pass give up and waits for its thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from dataclasses import dataclass

from .checkpoint import read_offsets_checkpoint, write_offsets_checkpoint
from .cleaner import (
    DEFAULT_DEDUPE_BUFFER_SIZE,
    CleanerAborted,
    CleanResult,
    LogSnapshot,
    Throttler,
    clean_snapshot,
    cleanable_range,
)
from .manager import LogManager
from .partition import PartitionLog

logger = logging.getLogger("kafkakit.broker.log.cleaner")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
UNLIMITED_IO = 2**63 - 1


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings, with Kafka's defaults."""

    enable: bool = True
    backoff_ms: int = 15_000
    io_max_bytes_per_second: int = UNLIMITED_IO
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE


class LogCleaner:
    """Compacts the ``cleanup.policy=compact`` logs of a :class:`LogManager`."""

    def __init__(self, logs: LogManager, config: CleanerConfig | None = None) -> None:
        self.logs = logs
        self.config = config if config is not None else CleanerConfig()
        self.checkpoint_path = logs.data_dir / CLEANER_CHECKPOINT_FILE
        self._checkpoints = read_offsets_checkpoint(self.checkpoint_path)
        # Logs whose pass failed (Kafka's uncleanable partitions); weak, so a deleted and
        # recreated topic is a new log that gets cleaned again.
        self._uncleanable: weakref.WeakSet[PartitionLog] = weakref.WeakSet()
        self._stop = threading.Event()
        self._wake: asyncio.Event | None = None
        self._running: asyncio.Future[CleanResult | None] | None = None
        self.passes = 0
        self.last_stats: list[str] = []

    # ---- checkpoints ---------------------------------------------------------------------------

    def checkpoint(self, topic: str, partition: int) -> int | None:
        """Where the next pass's dirty section of ``topic``/``partition`` starts (None: log start)."""
        return self._checkpoints.get((topic, partition))

    def _save_checkpoint(self, log: PartitionLog, offset: int) -> None:
        live = self.logs.partitions()
        self._checkpoints = {k: v for k, v in self._checkpoints.items() if k in live}
        self._checkpoints[(log.topic, log.partition)] = offset
        write_offsets_checkpoint(self.checkpoint_path, self._checkpoints, fsync=True)

    # ---- one pass --------------------------------------------------------------------------------

    def _candidates(self, now_ms: int) -> list[tuple[PartitionLog, LogSnapshot]]:
        """Snapshots of the compacted logs, filthiest first (the ratio ignoring open transactions)."""
        scored: list[tuple[float, PartitionLog, LogSnapshot]] = []
        for key, log in self.logs.partitions().items():
            if log.closed or not log.config.compact or log in self._uncleanable or len(log.segments) < 2:
                continue
            snapshot = LogSnapshot.of(log, self.checkpoint(*key))
            span = cleanable_range(snapshot, now_ms, None)
            if span.worth_cleaning(log.config.min_cleanable_dirty_ratio):
                scored.append((span.ratio + (1.0 if span.compaction_delay_ms > 0 else 0.0), log, snapshot))
        scored.sort(key=lambda item: -item[0])
        return [(log, snapshot) for _, log, snapshot in scored]

    def _clean_candidates(
        self, candidates: list[tuple[PartitionLog, LogSnapshot]], now_ms: int
    ) -> CleanResult | None:
        """Worker thread: clean the first candidate that is still worth it."""
        for log, snapshot in candidates:
            if self._stop.is_set():
                return None
            try:
                result = clean_snapshot(
                    snapshot,
                    now_ms,
                    dedupe_buffer_size=self.config.dedupe_buffer_size,
                    throttler=Throttler(float(self.config.io_max_bytes_per_second)),
                    stop=self._stop,
                )
            except CleanerAborted:
                return None
            except Exception:
                if log.closed or not snapshot.directory.exists():
                    logger.info("%s-%d went away while it was cleaned", snapshot.topic, snapshot.partition)
                    continue
                logger.exception(
                    "cleaning %s-%d failed; it is uncleanable until restart",
                    snapshot.topic,
                    snapshot.partition,
                )
                self._uncleanable.add(log)
                continue
            if result is not None:
                return result
        return None

    def swap_in(self, result: CleanResult) -> bool:
        """Event loop: put the cleaned segments in place and advance the checkpoint."""
        snapshot = result.snapshot
        log = self.logs.get(snapshot.topic, snapshot.partition)
        if log is None or log.closed or log.directory != snapshot.directory:
            result.discard()
            return False
        for i, (old, new) in enumerate(result.groups):
            if not log.replace_segments(old, new):
                logger.info(
                    "segments of %s-%d changed during cleaning; skipping the swap", log.topic, log.partition
                )
                for _old, rest in result.groups[i:]:
                    rest.delete()
                return False
        self._save_checkpoint(log, result.end_offset)
        self.passes += 1
        summary = result.stats.summary()
        self.last_stats = [*self.last_stats[-9:], summary]
        logger.info("%s", summary)
        return True

    async def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """One pass over the filthiest log worth cleaning; None if there was none."""
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        candidates = self._candidates(now)
        if not candidates:
            return None
        self._running = asyncio.ensure_future(asyncio.to_thread(self._clean_candidates, candidates, now))
        try:
            result = await asyncio.shield(self._running)
        finally:
            self._running = None
        if result is None:
            return None
        if self._stop.is_set():
            result.discard()
            return None
        return result if self.swap_in(result) else None

    def clean_log_now(
        self, log: PartitionLog, now_ms: int | None = None, *, force: bool = False
    ) -> CleanResult | None:
        """Clean one log synchronously in the calling thread (tools and tests)."""
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        snapshot = LogSnapshot.of(log, self.checkpoint(log.topic, log.partition))
        result = clean_snapshot(
            snapshot,
            now,
            dedupe_buffer_size=self.config.dedupe_buffer_size,
            throttler=Throttler(float(self.config.io_max_bytes_per_second)),
            force=force,
        )
        if result is None:
            return None
        return result if self.swap_in(result) else None

    # ---- background task ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Clean until :meth:`stop`; sleeps ``backoff_ms`` whenever there is nothing to do."""
        self._wake = asyncio.Event()
        while not self._stop.is_set():
            try:
                cleaned = await self.clean_once()
            except Exception:
                logger.exception("log cleaner pass failed")
                cleaned = None
            if cleaned is None and not self._stop.is_set():
                try:
                    await asyncio.wait_for(self._wake.wait(), self.config.backoff_ms / 1000)
                except TimeoutError:
                    pass
                self._wake.clear()

    def wake(self) -> None:
        """Look for work now instead of at the end of the backoff."""
        if self._wake is not None:
            self._wake.set()

    async def stop(self) -> None:
        """Make a running pass give up and wait for its thread (its .cleaned files are deleted)."""
        self._stop.set()
        self.wake()
        running = self._running
        if running is not None:
            try:
                await running
            except Exception:
                logger.debug("log cleaner pass ended with an error while stopping", exc_info=True)
