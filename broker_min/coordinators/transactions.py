"""The transaction coordinator: Kafka's ``TransactionCoordinator`` on one node, transaction versions 1 and 2.

Per transactional id it keeps a producer id, an epoch, the timeout and the
state machine Empty -> Ongoing -> PrepareCommit/PrepareAbort ->
CompleteCommit/CompleteAbort, logged to the internal topic
``__transaction_state`` in Kafka's record format (:mod:`.txn_records`;
TransactionLogValue v1 when transaction version 2 is enabled, as Kafka 4.x
writes it) and replayed on start-up.  Ending a transaction logs PrepareX, writes the
COMMIT/ABORT marker to every partition in the transaction, and logs CompleteX
(EndTxn and the markers are :mod:`.txn_completion`'s).
A marker for the group's ``__consumer_offsets`` partition is what turns the
transaction's offsets (logged by TxnOffsetCommit as a transactional batch)
into committed offsets, live and on replay.  A crash after PrepareX leaves it
in the log, and :meth:`TransactionCoordinator.load` writes the markers again
(a second marker closes nothing).

Markers that cannot be written (an I/O error) are retried with exponential
backoff, as Kafka's ``TransactionMarkerChannelManager`` does, and the
transaction stays in PrepareX meanwhile (requests get CONCURRENT_TRANSACTIONS);
a partition that no longer exists is skipped, as Kafka skips partitions
without a leader.

Transaction version 2 (KIP-890) is chosen per request, as Kafka does: Produce
v12+ and TxnOffsetCommit v5+ add their partition to the transaction
implicitly, and EndTxn v5+ bumps the epoch on every commit or abort (markers
carry the new epoch) and returns the new producer id and epoch; a retry with
the previous epoch after completion succeeds.

Epochs (KIP-360/KIP-588): a fence (a timeout, or a new instance finding an
open transaction) bumps the epoch and remembers the old one as the *last*
epoch, so the fenced producer's InitProducerId with its (id, epoch) recovers
the current epoch instead of being fenced; a new instance (no id presented)
clears it.

Partitions (cluster mode, issue 13): a transactional id belongs to one
``__transaction_state`` partition and is served only while that partition is
loaded here (:meth:`TransactionCoordinator.load_partition` when this node becomes
its leader, :meth:`TransactionCoordinator.unload_partition` when it stops, which
also abandons the markers of its transactions); other ids get NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS while the partition loads.  :meth:`load` loads every
partition (a single node).  Markers go through :mod:`.markers`: appended here for
partitions this node leads, sent as WriteTxnMarkers to the leader of the others
once :attr:`TransactionCoordinator.remote_markers` is set (cluster mode, where
they also wait for the PrepareX record to be replicated first, and handlers
await :meth:`TransactionCoordinator.settle` before answering a write).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from kafkakit.broker.log import LogError, PartitionLog
from kafkakit.records import encode_batch
from kio.schema.errors import ErrorCode

from .markers import (
    LeadershipView,
    RemoteMarkers,
)
from .partitions import (
    WRITE_TIMEOUT_SECONDS,
    CoordinatorPartitions,
    coordinator_write_error,
    replay_cooperatively,
)
from .txn_completion import CompletionHost, TxnCompletion
from .txn_metadata import (
    KNOWN_STATE_NAMES,
    MAX_EPOCH,
    MAX_TRANSACTION_TIMEOUT_MS,
    NO_EPOCH,
    NO_PRODUCER_ID,
    PREPARING_STATES,
    ImplicitAdd,
    TransactionMetadata,
    TxnError,
    TxnState,
    is_epoch_exhausted,
    state_name,
)
from .txn_records import (
    TRANSACTION_TOPIC,
    TxnLogValue,
    encode_txn_key,
    encode_txn_value,
    partition_for_transactional_id,
    replay_partition,
)

if TYPE_CHECKING:
    from kafkakit.broker.coordinators.group_coordinator import GroupCoordinator
    from kafkakit.broker.producer_state import ProducerIdAllocator, ProducerStateRegistry

__all__ = [  # the transaction types stay importable from here
    "KNOWN_STATE_NAMES",
    "MAX_EPOCH",
    "TRANSACTION_TOPIC",
    "ImplicitAdd",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TxnError",
    "TxnState",
    "state_name",
]

log = logging.getLogger("kafkakit.broker")

TRANSACTION_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
class TransactionHost(CompletionHost, Protocol):
    """What the coordinator needs from the broker (BrokerState)."""

    def transaction_topic_partitions(self) -> int | None:
        """Partition count of ``__transaction_state``, None before its first use."""
        ...

    def transaction_topic_log(self, partition: int) -> PartitionLog:
        """A partition of ``__transaction_state``, creating the topic on first use."""
        ...

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition holding ``group_id``."""
        ...


class TransactionCoordinator:
    """All transactional ids of this broker."""

    def __init__(
        self,
        host: TransactionHost,
        producer_ids: ProducerIdAllocator,
        producer_states: ProducerStateRegistry,
        groups: GroupCoordinator,
        default_partitions: int = 1,
        log_value_version: int = 0,
    ) -> None:
        self._host = host
        # TransactionLogValue version to write: Kafka writes v1 once transaction version 2 is enabled.
        self._log_value_version = log_value_version
        self._producer_ids = producer_ids
        self._producer_states = producer_states
        self._groups = groups
        self._default_partitions = default_partitions
        self.transactions: dict[str, TransactionMetadata] = {}
        self._by_producer: dict[int, TransactionMetadata] = {}
        #: ``__transaction_state`` partitions loaded or loading here.
        self.partitions = CoordinatorPartitions(TRANSACTION_TOPIC)
        self._written: dict[int, int] = {}  # log end after this coordinator's last append, per partition
        self._completion = TxnCompletion(
            host,
            producer_ids,
            producer_states,
            groups,
            self.transactions,
            self.partitions,
            self._written,
            self._partition_of,
            self._check_served,
            self._persist_or_restore,
            self._set_producer_id,
        )
        #: Appends markers to partitions this node leads (also WriteTxnMarkers from other nodes).
        self.local_markers = self._completion.local_markers

    @property
    def remote_markers(self) -> RemoteMarkers | None:
        """Sends markers to other leaders; None on a single node, where every marker is local."""
        return self._completion.remote_markers

    @remote_markers.setter
    def remote_markers(self, value: RemoteMarkers | None) -> None:
        self._completion.remote_markers = value

    @property
    def routing(self) -> LeadershipView:
        """Where the transactions' partitions are led (the host unless replaced)."""
        return self._completion.routing

    @routing.setter
    def routing(self, value: LeadershipView) -> None:
        self._completion.routing = value

    # ================================================================ partitions: load / unload

    def load(self) -> None:
        """Load every ``__transaction_state`` partition now (a single node coordinates them all);
        transactions a crash left in PrepareX are completed."""
        for partition in range(self._partition_count()):
            token = self.partitions.begin_load(partition, 0)
            if token is None:
                continue
            values = dict(self._replay(partition))
            self.partitions.finish_load(partition, token)
            self._adopt(values)
        if self.transactions:
            log.info("loaded %d transactional id(s)", len(self.transactions))

    async def load_partition(self, partition: int, epoch: int = 0) -> bool:
        """Become the coordinator of ``partition``'s transactional ids (Kafka's
        ``loadTransactionsForTxnTopicPartition``): replay it, yielding to the loop
        (COORDINATOR_LOAD_IN_PROGRESS meanwhile), serve it and complete transactions left in
        PrepareX.  False if ignored (loaded at ``epoch`` or later), superseded or failed."""
        token = self.partitions.begin_load(partition, epoch)
        if token is None:
            return False
        self._written.pop(partition, None)  # appends from an earlier leadership are not ours to wait for
        values: dict[str, TxnLogValue | None] = {}

        def apply(item: tuple[str, TxnLogValue | None]) -> None:
            values[item[0]] = item[1]

        try:
            done = await replay_cooperatively(
                self._replay(partition), apply, lambda: self.partitions.is_current(partition, token)
            )
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_TOPIC, partition)
            self.partitions.abandon(partition, token)
            return False
        if not done or not self.partitions.finish_load(partition, token):
            return False
        count = self._adopt(values)
        log.info("loaded %s-%d at epoch %d: %d transactional id(s)", TRANSACTION_TOPIC, partition, epoch, count)
        return True

    def unload_partition(self, partition: int, epoch: int | None = None) -> bool:
        """Stop coordinating ``partition``'s transactional ids (Kafka's
        ``removeTransactionsForTxnTopicPartition``): forget them and abandon their markers.
        Ignored (False) when loaded at ``epoch`` or later; None always unloads."""
        if not self.partitions.unload(partition, epoch):
            return False
        dropped = [m for tid, m in self.transactions.items() if self._partition_of(tid) == partition]
        for meta in dropped:
            meta.markers = None
            self._forget(meta.transactional_id)
        log.info("unloaded %s-%d: %d transactional id(s)", TRANSACTION_TOPIC, partition, len(dropped))
        return True

    @property
    def owned_partitions(self) -> frozenset[int]:
        """The ``__transaction_state`` partitions whose transactional ids this node coordinates."""
        return self.partitions.active

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """None when this node coordinates ``transactional_id``, else NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS."""
        return self.partitions.error(self._partition_of(transactional_id))

    def _check_served(self, transactional_id: str) -> None:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            raise TxnError(error, f"{transactional_id}: {error.name}")

    async def settle(self, transactional_id: str) -> ErrorCode | None:
        """Wait until what was logged to ``transactional_id``'s partition is replicated (at once on a
        single node); None, or the error to answer instead (Kafka's mapping of a failed append)."""
        partition = self._partition_of(transactional_id)
        end = self._written.get(partition)
        if end is None:
            return None
        error = await self._host.wait_committed(TRANSACTION_TOPIC, partition, end, WRITE_TIMEOUT_SECONDS)
        if error is not None and error is not ErrorCode.none:
            return coordinator_write_error(error)
        # Unloaded meanwhile (this node resigned): the write may not survive, as in Kafka.
        return self.partitions.error(partition)

    def shutdown(self) -> None:
        """Cancel marker sends in flight (cluster mode; there are none on a single node)."""
        self._completion.shutdown()

    def _partition_count(self) -> int:
        return self._host.transaction_topic_partitions() or self._default_partitions

    def _partition_of(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self._partition_count())

    def _adopt(self, values: Mapping[str, TxnLogValue | None]) -> int:
        """Index a loaded partition's transactions; write the markers of those left in PrepareX."""
        adopted = []
        for transactional_id, value in values.items():
            if value is None:
                continue
            meta = TransactionMetadata.from_log(transactional_id, value)
            self._index(meta)
            adopted.append((meta, value.next_producer_id))
        for meta, next_producer_id in adopted:
            if meta.state in PREPARING_STATES:
                log.info("transaction %s: completing %s after loading", meta.transactional_id, meta.state.name)
                self._completion.start_markers(meta, meta.state == TxnState.PREPARE_COMMIT, next_producer_id)
        return len(adopted)

    def _replay(self, partition: int) -> Iterator[tuple[str, TxnLogValue | None]]:
        count = self._host.transaction_topic_partitions()
        if count is None or not 0 <= partition < count:
            return iter(())
        return replay_partition(self._host.transaction_topic_log(partition), partition)

    def _index(self, meta: TransactionMetadata) -> None:
        old = self.transactions.get(meta.transactional_id)
        if old is not None and self._by_producer.get(old.producer_id) is old:
            del self._by_producer[old.producer_id]
        self.transactions[meta.transactional_id] = meta
        self._by_producer[meta.producer_id] = meta

    def _forget(self, transactional_id: str) -> None:
        old = self.transactions.pop(transactional_id, None)
        if old is not None and self._by_producer.get(old.producer_id) is old:
            del self._by_producer[old.producer_id]

    def _set_producer_id(self, meta: TransactionMetadata, producer_id: int) -> None:
        if self._by_producer.get(meta.producer_id) is meta:
            del self._by_producer[meta.producer_id]
        meta.previous_producer_id = meta.producer_id
        meta.producer_id = producer_id
        meta.producer_epoch = 0
        self._by_producer[producer_id] = meta

    # ================================================================ InitProducerId

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_EPOCH
    ) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer (Kafka's ``handleInitProducerId``).

        Without a presented (id, epoch) it is a new instance: any open
        transaction is aborted and the epoch bumped past it, fencing older
        instances.  With one (InitProducerId v3+, KIP-360) the current
        producer recovers: its epoch is bumped, or, when it presents the epoch
        a fence or an earlier bump replaced, the current epoch comes back
        unchanged; anything else is PRODUCER_FENCED.

        Raises :class:`TxnError`: INVALID_REQUEST for an empty id,
        INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS while markers are
        being written, PRODUCER_FENCED.
        """
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request, "empty transactional id")
        if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            raise TxnError(
                ErrorCode.invalid_transaction_timeout,
                f"transaction timeout {timeout_ms} ms is not in (0, {MAX_TRANSACTION_TIMEOUT_MS}]",
            )
        self._check_served(transactional_id)
        now = _now_ms()
        expected = producer_id >= 0 and epoch >= 0
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(transactional_id, self._producer_ids.allocate(), 0, timeout_ms)
            meta.last_update_ms = now
            self._persist(meta)
            self._index(meta)
            return meta.producer_id, meta.producer_epoch
        if meta.state in PREPARING_STATES:
            raise TxnError(ErrorCode.concurrent_transactions)
        if expected and not (
            producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id and is_epoch_exhausted(epoch))
        ):
            raise TxnError(
                ErrorCode.producer_fenced, f"{transactional_id}: producer {producer_id} is not current"
            )
        if meta.state == TxnState.ONGOING:
            log.info("transaction %s: InitProducerId aborts the open transaction", transactional_id)
            self._fence_and_abort(meta)
            if meta.state in PREPARING_STATES:  # a marker could not be written yet: retry later
                raise TxnError(ErrorCode.concurrent_transactions)
        before = meta.snapshot()
        if is_epoch_exhausted(meta.producer_epoch) and (not expected or epoch == meta.producer_epoch):
            last = meta.producer_epoch if expected else NO_EPOCH
            self._set_producer_id(meta, self._producer_ids.allocate())
            meta.last_producer_epoch = last
        elif not expected:
            meta.producer_epoch += 1
            meta.last_producer_epoch = NO_EPOCH
        elif epoch == meta.producer_epoch:
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_epoch += 1
        elif epoch != meta.last_producer_epoch:
            raise TxnError(
                ErrorCode.producer_fenced,
                f"{transactional_id}: epoch {epoch} is neither the current epoch {meta.producer_epoch} "
                f"nor the last one {meta.last_producer_epoch}",
            )
        # else: a retry of a bump (or a fenced producer recovering): the current epoch, unchanged.
        meta.timeout_ms = timeout_ms
        meta.state = TxnState.EMPTY
        meta.partitions = set()
        meta.start_ms = -1
        meta.last_update_ms = now
        self._persist_or_restore(meta, before)
        return meta.producer_id, meta.producer_epoch

    def _fence_and_abort(self, meta: TransactionMetadata) -> None:
        """Kafka's epoch fence: epoch + 1 (the old one remembered), then abort with the new epoch."""
        before = meta.snapshot()
        meta.last_producer_epoch = meta.producer_epoch
        meta.producer_epoch += 1  # may reach MAX_EPOCH: the next InitProducerId rotates the id
        meta.state = TxnState.PREPARE_ABORT
        meta.last_update_ms = _now_ms()
        self._persist_or_restore(meta, before)
        meta.markers = self._completion.marker_job(meta, False, NO_PRODUCER_ID)
        self._completion.await_replication(meta, meta.markers)
        self._completion.attempt_markers(meta, _now_ms())

    # ================================================================ adding to a transaction

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
        self._check_served(transactional_id)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(
                ErrorCode.invalid_producer_id_mapping, f"{transactional_id}: unknown producer {producer_id}"
            )
        if meta.producer_epoch != epoch:
            raise TxnError(
                ErrorCode.producer_fenced,
                f"{transactional_id}: epoch {epoch} is not the current epoch {meta.producer_epoch}",
            )
        if meta.state in PREPARING_STATES:
            raise TxnError(ErrorCode.concurrent_transactions)
        return meta

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn for partitions that exist (the caller checks them); raises :class:`TxnError`."""
        self._add(self._current(transactional_id, producer_id, epoch), set(partitions), 0)

    def _add(self, meta: TransactionMetadata, wanted: set[tuple[str, int]], client_version: int) -> None:
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return
        now = _now_ms()
        before = meta.snapshot()
        meta.client_transaction_version = client_version
        if meta.state != TxnState.ONGOING:
            meta.partitions = set()
            meta.start_ms = now
        meta.partitions |= wanted
        meta.state = TxnState.ONGOING
        meta.last_update_ms = now
        self._persist_or_restore(meta, before)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        self.add_partitions(
            transactional_id, producer_id, epoch, [self._host.offsets_partition_for(group_id)]
        )

    def check_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        implicit: ImplicitAdd = ImplicitAdd.REFUSE,
    ) -> None:
        """TxnOffsetCommit needs the group's offsets partition in the ongoing transaction.

        Kafka verifies the partition with the coordinator; TxnOffsetCommit v5
        (transaction version 2) adds it instead.  Raises :class:`TxnError`.
        """
        self._check_served(transactional_id)
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        if epoch != meta.producer_epoch:
            raise TxnError(ErrorCode.invalid_producer_epoch)
        if meta.state in PREPARING_STATES:
            raise TxnError(ErrorCode.concurrent_transactions)
        offsets_partition = self._host.offsets_partition_for(group_id)
        if meta.state == TxnState.ONGOING and offsets_partition in meta.partitions:
            return
        if implicit is ImplicitAdd.ADD:
            self._add(meta, {offsets_partition}, 2)
            return
        code = (
            ErrorCode.transaction_abortable
            if implicit is ImplicitAdd.ABORTABLE
            else ErrorCode.invalid_txn_state
        )
        raise TxnError(code, f"{transactional_id}: group {group_id}'s offsets are not in the transaction")

    def check_produce(
        self,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
        implicit: ImplicitAdd = ImplicitAdd.REFUSE,
    ) -> ErrorCode | None:
        """Why a transactional batch may not be appended to ``topic``-``partition``, or None.

        Kafka's produce-side verification: an unknown producer is
        INVALID_PRODUCER_ID_MAPPING, another epoch INVALID_PRODUCER_EPOCH, a
        transaction whose markers are being written NOT_ENOUGH_REPLICAS (which
        every producer retries); a partition not in the transaction is added
        (Produce v12+), TRANSACTION_ABORTABLE (v11) or INVALID_TXN_STATE.
        """
        meta = self._by_producer.get(producer_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if meta.state in PREPARING_STATES:
            return ErrorCode.not_enough_replicas
        if meta.state == TxnState.ONGOING and (topic, partition) in meta.partitions:
            return None
        if implicit is ImplicitAdd.ADD:
            try:
                self._add(meta, {(topic, partition)}, 2)
            except TxnError as exc:
                return exc.code
            return None
        return (
            ErrorCode.transaction_abortable
            if implicit is ImplicitAdd.ABORTABLE
            else ErrorCode.invalid_txn_state
        )

    # ================================================================ EndTxn and markers (.txn_completion)

    def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, bump_epoch: bool = False
    ) -> tuple[int, int]:
        """Commit or abort; the producer id and epoch to use next.  Raises :class:`TxnError`.

        ``bump_epoch`` is transaction version 2 (EndTxn v5+).  Returns once
        PrepareX is logged and every marker that can be written is; markers
        that failed are retried in the background (the transaction stays in
        PrepareX), as Kafka answers before its markers are written.
        """
        return self._completion.end_transaction(transactional_id, producer_id, epoch, commit, bump_epoch)

    def retry_markers(self, now_ms: int | None = None) -> int:
        """Retry the markers that are due (the broker calls this periodically); how many are still pending."""
        return self._completion.retry_markers(now_ms)

    # ================================================================ timeouts

    def abort_timed_out(self, now_ms: int | None = None) -> list[str]:
        """Abort (with an epoch fence) every Ongoing transaction older than its timeout; their ids."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [
            meta
            for meta in self.transactions.values()
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms
        ]
        for meta in expired:
            log.info("transaction %s timed out after %d ms: aborting", meta.transactional_id, meta.timeout_ms)
            try:
                self._fence_and_abort(meta)
            except TxnError as exc:
                log.error("transaction %s: could not log the abort: %s", meta.transactional_id, exc)
        return [m.transactional_id for m in expired]

    # ================================================================ admin

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int = -1
    ) -> list[TransactionMetadata]:
        """ListTransactions: every id matching the filters (empty filters match all)."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        now = _now_ms()
        return [
            meta
            for meta in self.transactions.values()
            if (not wanted_states or state_name(meta.state) in wanted_states)
            and (not wanted_ids or meta.producer_id in wanted_ids)
            and (
                min_duration_ms < 0
                or (meta.state == TxnState.ONGOING and now - meta.start_ms >= min_duration_ms)
            )
        ]

    # ================================================================ persistence

    def _persist_or_restore(self, meta: TransactionMetadata, before: tuple[object, ...]) -> None:
        """Log ``meta``; if that fails, undo its in-memory changes too and raise :class:`TxnError`."""
        try:
            self._persist(meta)
        except TxnError:
            if self._by_producer.get(meta.producer_id) is meta:
                del self._by_producer[meta.producer_id]
            meta.restore(before)
            self._by_producer[meta.producer_id] = meta
            raise

    def _persist(self, meta: TransactionMetadata) -> None:
        partition = self._partition_of(meta.transactional_id)
        txn_log = self._host.transaction_topic_log(partition)
        now = _now_ms()
        value = encode_txn_value(meta.to_log(), self._log_value_version)
        record = (encode_txn_key(meta.transactional_id), value, now, ())
        try:
            result = txn_log.append(encode_batch([record]))
        except LogError as exc:
            log.error(
                "transaction %s: appending to %s failed: %s", meta.transactional_id, TRANSACTION_TOPIC, exc
            )
            raise TxnError(ErrorCode.coordinator_not_available, str(exc)) from None
        self._written[partition] = result.last_offset + 1
        self._host.notify_append(TRANSACTION_TOPIC, partition)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
