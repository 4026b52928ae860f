"""Completing a transaction: EndTxn, and the COMMIT/ABORT markers that end it (Kafka's
``TransactionCoordinator.handleEndTransaction`` and ``TransactionMarkerChannelManager``).

Ending a transaction logs PrepareX, writes the marker to every partition in the
transaction, and logs CompleteX.  Markers go through :mod:`.markers`: appended here
for partitions this node leads, sent as WriteTxnMarkers to the leader of the others
once :attr:`TxnCompletion.remote_markers` is set (cluster mode, where they also wait
for the PrepareX record to be replicated first).  Markers that cannot be written
are retried with exponential backoff, and the transaction stays in PrepareX
meanwhile; a partition that no longer exists is skipped.

:class:`~.transactions.TransactionCoordinator` owns the transactional ids and their
log, and hands EndTxn and marker retries to :class:`TxnCompletion`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from .markers import (
    LeadershipView,
    LocalMarkers,
    MarkerLogHost,
    MarkerOutcome,
    MarkerSpec,
    RemoteMarkers,
    group_by_leader,
    marker_outcome,
)
from .partitions import WRITE_TIMEOUT_SECONDS, CoordinatorPartitions
from .txn_metadata import (
    COMPLETE_STATES,
    MARKER_RETRY_MAX_MS,
    NO_PRODUCER_ID,
    PREPARING_STATES,
    MarkerJob,
    TransactionMetadata,
    TxnError,
    TxnState,
    is_epoch_exhausted,
)
from .txn_records import TRANSACTION_TOPIC

if TYPE_CHECKING:
    from kafkakit.broker.coordinators.group_coordinator import GroupCoordinator
    from kafkakit.broker.producer_state import ProducerIdAllocator, ProducerStateRegistry

log = logging.getLogger("kafkakit.broker")


class CompletionHost(MarkerLogHost, Protocol):
    """What completing transactions needs from the broker (BrokerState)."""

    async def wait_committed(
        self, topic: str, partition: int, end_offset: int, timeout: float
    ) -> ErrorCode | None:
        """Wait until the partition's high watermark reaches ``end_offset``; None, or why not."""
        ...


class TxnCompletion:
    """EndTxn and marker orchestration over the coordinator's transactional ids."""

    def __init__(
        self,
        host: CompletionHost,
        producer_ids: ProducerIdAllocator,
        producer_states: ProducerStateRegistry,
        groups: GroupCoordinator,
        transactions: dict[str, TransactionMetadata],
        partitions: CoordinatorPartitions,
        written: dict[int, int],
        partition_of: Callable[[str], int],
        check_served: Callable[[str], None],
        persist_or_restore: Callable[[TransactionMetadata, tuple[object, ...]], None],
        set_producer_id: Callable[[TransactionMetadata, int], None],
    ) -> None:
        self._host = host
        self._producer_ids = producer_ids
        self.transactions = transactions
        self.partitions = partitions
        self._written = written  # the coordinator's: log end after its last append, per partition
        self._partition_of = partition_of
        self._check_served = check_served
        self._persist_or_restore = persist_or_restore
        self._set_producer_id = set_producer_id
        #: Appends markers to partitions this node leads (also WriteTxnMarkers from other nodes).
        self.local_markers = LocalMarkers(host, producer_states, groups)
        #: Sends markers to other leaders; None on a single node, where every marker is local.
        self.remote_markers: RemoteMarkers | None = None
        #: Where the transactions' partitions are led (the host unless replaced).
        self.routing: LeadershipView = host
        self._tasks: set[asyncio.Task[None]] = set()

    def shutdown(self) -> None:
        """Cancel marker sends in flight (cluster mode; there are none on a single node)."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    # ================================================================ EndTxn

    def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, bump_epoch: bool = False
    ) -> tuple[int, int]:
        """Commit or abort; the producer id and epoch to use next.  Raises :class:`TxnError`.

        ``bump_epoch`` is transaction version 2 (EndTxn v5+).  Returns once
        PrepareX is logged and every marker that can be written is; markers
        that failed are retried in the background (the transaction stays in
        PrepareX), as Kafka answers before its markers are written.
        """
        self._check_served(transactional_id)
        meta = self.transactions.get(transactional_id)
        if bump_epoch:
            return self._end_v2(transactional_id, meta, producer_id, epoch, commit)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != epoch:
            raise TxnError(ErrorCode.producer_fenced)
        state = meta.state
        if state == TxnState.ONGOING:
            before = meta.snapshot()
            meta.client_transaction_version = 0
            self._prepare(meta, commit, NO_PRODUCER_ID, before)
            return meta.producer_id, meta.producer_epoch
        if (state, commit) in ((TxnState.COMPLETE_COMMIT, True), (TxnState.COMPLETE_ABORT, False)):
            return meta.producer_id, meta.producer_epoch  # a retry of an EndTxn that already completed
        if (state, commit) in ((TxnState.PREPARE_COMMIT, True), (TxnState.PREPARE_ABORT, False)):
            raise TxnError(ErrorCode.concurrent_transactions)
        raise TxnError(
            ErrorCode.invalid_txn_state,
            f"{transactional_id}: cannot {'commit' if commit else 'abort'} in state {state.name}",
        )

    def _end_v2(
        self,
        transactional_id: str,
        meta: TransactionMetadata | None,
        producer_id: int,
        epoch: int,
        commit: bool,
    ) -> tuple[int, int]:
        """EndTxn v5+: every commit/abort bumps the epoch; the previous epoch may retry a completed one."""
        if meta is None:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        state = meta.state
        # A retry whose transaction rolled the producer id over (epoch exhausted) on completion.
        overflow_retry = (
            producer_id == meta.previous_producer_id
            and producer_id != meta.producer_id
            and meta.producer_epoch == 0
            and is_epoch_exhausted(epoch)
            and state in COMPLETE_STATES
        )
        if meta.producer_id != producer_id and not overflow_retry:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        is_retry = overflow_retry or (
            state not in (TxnState.ONGOING, TxnState.EMPTY) and epoch == meta.producer_epoch - 1
        )
        matches = (state in (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT)) == commit
        if is_retry:
            if not matches:
                raise TxnError(ErrorCode.invalid_txn_state, f"{transactional_id}: retry of the other outcome")
            if state in PREPARING_STATES:
                raise TxnError(ErrorCode.concurrent_transactions)
            return meta.producer_id, meta.producer_epoch
        if epoch != meta.producer_epoch:
            raise TxnError(
                ErrorCode.producer_fenced,
                f"{transactional_id}: epoch {epoch} is not the current epoch {meta.producer_epoch}",
            )
        if state in PREPARING_STATES:
            raise TxnError(ErrorCode.concurrent_transactions)
        if state != TxnState.ONGOING and commit:
            raise TxnError(ErrorCode.invalid_txn_state, f"{transactional_id}: no transaction to commit")
        # Ongoing, or an abort without a transaction (Empty/Complete): both bump the epoch.
        before = meta.snapshot()
        if state != TxnState.ONGOING:
            meta.partitions = set()
        next_id = self._producer_ids.allocate() if is_epoch_exhausted(meta.producer_epoch) else NO_PRODUCER_ID
        meta.last_producer_epoch = meta.producer_epoch
        meta.producer_epoch += 1
        meta.client_transaction_version = 2
        self._prepare(meta, commit, next_id, before)
        if meta.markers is not None and meta.markers.next_producer_id != NO_PRODUCER_ID:
            return meta.markers.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    def _prepare(
        self, meta: TransactionMetadata, commit: bool, next_producer_id: int, before: tuple[object, ...]
    ) -> None:
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.last_update_ms = _now_ms()
        # The job exists before PrepareX is logged: the record carries its next producer id.
        meta.markers = self.marker_job(meta, commit, next_producer_id)
        try:
            self._persist_or_restore(meta, before)
        except TxnError:
            meta.markers = None
            raise
        self.await_replication(meta, meta.markers)
        self.attempt_markers(meta, _now_ms())

    # ================================================================ markers

    def start_markers(
        self, meta: TransactionMetadata, commit: bool, next_producer_id: int = NO_PRODUCER_ID
    ) -> None:
        """Write the markers of a transaction in PrepareX now; what fails is retried later."""
        meta.markers = self.marker_job(meta, commit, next_producer_id)
        self.attempt_markers(meta, _now_ms())

    def marker_job(self, meta: TransactionMetadata, commit: bool, next_producer_id: int) -> MarkerJob:
        epoch = max(self.partitions.epoch(self._partition_of(meta.transactional_id)), 0)
        return MarkerJob(
            commit, meta.producer_id, meta.producer_epoch, set(meta.partitions), next_producer_id, coordinator_epoch=epoch
        )

    def await_replication(self, meta: TransactionMetadata, job: MarkerJob | None) -> None:
        """Cluster mode: the markers wait until the PrepareX just logged is replicated (Kafka sends
        them from the append's completion), so a new coordinator never finds them without it."""
        if job is not None and self.remote_markers is not None:
            job.prepare_end = self._written.get(self._partition_of(meta.transactional_id))

    def attempt_markers(self, meta: TransactionMetadata, now: int) -> None:
        job = meta.markers
        assert job is not None
        if job.prepare_end is not None:
            if not job.awaiting_prepare:
                job.awaiting_prepare = True
                self._spawn(self._prepare_replicated(meta, job))
            return
        spec = MarkerSpec(job.producer_id, job.epoch, job.commit, job.coordinator_epoch)
        local, gone, remote = group_by_leader(sorted(job.remaining - job.in_flight), self.routing)
        if self.remote_markers is None:  # a single node: every marker is appended here
            local += [tp for partitions in remote.values() for tp in partitions]
            remote = {}
        for topic, partition in gone:
            # Kafka skips partitions without a leader: they were deleted.
            log.warning("transaction marker for %s-%d skipped: the partition no longer exists", topic, partition)
            job.remaining.discard((topic, partition))
        for topic, partition in local:
            error, _ = self.local_markers.append(topic, partition, spec, now)
            self._marker_answered(meta, job, (topic, partition), error)
        for leader, partitions in remote.items():
            job.in_flight.update(partitions)
            self._spawn(self._send_markers(meta, job, leader, spec, partitions))
        self._after_markers(meta, job, now)

    def _marker_answered(
        self, meta: TransactionMetadata, job: MarkerJob, tp: tuple[str, int], error: ErrorCode
    ) -> None:
        outcome = marker_outcome(error, self.routing.partition_registration(*tp) is not None)
        if outcome is MarkerOutcome.RETRY:
            return
        if outcome is MarkerOutcome.DROPPED:
            log.warning("transaction %s: marker for %s-%d not needed (%s)", meta.transactional_id, *tp, error.name)
        job.remaining.discard(tp)

    def _after_markers(self, meta: TransactionMetadata, job: MarkerJob, now: int) -> None:
        """Complete the transaction once every marker is written, else schedule a retry (unless
        only answers from other leaders are awaited)."""
        if not job.remaining:
            if self._complete(meta, job):
                meta.markers = None
                return
        elif job.remaining <= job.in_flight:
            return
        job.next_attempt_ms = now + job.backoff_ms
        log.warning(
            "transaction %s: %d marker(s) not written yet (%s); retrying in %d ms",
            meta.transactional_id,
            len(job.remaining),
            ", ".join(f"{t}-{p}" for t, p in sorted(job.remaining)) or "completion not logged",
            job.backoff_ms,
        )
        job.backoff_ms = min(job.backoff_ms * 2, MARKER_RETRY_MAX_MS)

    def _current_job(self, meta: TransactionMetadata, job: MarkerJob) -> bool:
        """Whether ``job`` is still ``meta``'s, and ``meta`` still served here (no unload since)."""
        return self.transactions.get(meta.transactional_id) is meta and meta.markers is job

    async def _prepare_replicated(self, meta: TransactionMetadata, job: MarkerJob) -> None:
        assert job.prepare_end is not None
        partition = self._partition_of(meta.transactional_id)
        error = await self._host.wait_committed(TRANSACTION_TOPIC, partition, job.prepare_end, WRITE_TIMEOUT_SECONDS)
        job.awaiting_prepare = False
        if not self._current_job(meta, job):
            return
        if error is None or error is ErrorCode.none:
            job.prepare_end = None
            self.attempt_markers(meta, _now_ms())
            return
        log.warning("transaction %s: PrepareX not replicated (%s)", meta.transactional_id, error.name)
        self._after_markers(meta, job, _now_ms())

    async def _send_markers(
        self, meta: TransactionMetadata, job: MarkerJob, leader: int, spec: MarkerSpec, partitions: list[tuple[str, int]]
    ) -> None:
        assert self.remote_markers is not None
        try:
            answers = await self.remote_markers.send(leader, spec, partitions)
        finally:
            job.in_flight.difference_update(partitions)
        for tp, error in answers.items():
            self._marker_answered(meta, job, tp, error)
        if self._current_job(meta, job):
            self._after_markers(meta, job, _now_ms())

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction markers task failed", exc_info=task.exception())

    def _complete(self, meta: TransactionMetadata, job: MarkerJob) -> bool:
        """Log CompleteX (rolling the producer id over after a TV2 epoch overflow); False if logging failed."""
        before = meta.snapshot()
        meta.state = TxnState.COMPLETE_COMMIT if job.commit else TxnState.COMPLETE_ABORT
        meta.partitions = set()
        if job.next_producer_id != NO_PRODUCER_ID:
            self._set_producer_id(meta, job.next_producer_id)
        meta.last_update_ms = _now_ms()
        try:
            self._persist_or_restore(meta, before)
        except TxnError:
            return False
        return True

    def retry_markers(self, now_ms: int | None = None) -> int:
        """Retry the markers that are due (the broker calls this periodically); how many are still pending."""
        now = _now_ms() if now_ms is None else now_ms
        waiting = [m for m in self.transactions.values() if m.markers is not None]
        for meta in waiting:
            assert meta.markers is not None
            if meta.markers.next_attempt_ms <= now:
                self.attempt_markers(meta, now)
        return sum(1 for m in waiting if m.markers is not None)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
