"""The transaction coordinator (transaction version 1): Kafka's ``TransactionCoordinator`` on one node.

Per transactional id it keeps a producer id, an epoch, the timeout and the
state machine Empty -> Ongoing -> PrepareCommit/PrepareAbort ->
CompleteCommit/CompleteAbort, logged to the internal topic
``__transaction_state`` in Kafka's record format (:mod:`.txn_records`) and
replayed on start-up.  Every partition lives on this node, so ending a
transaction runs to completion inside one call: log PrepareX, write the
COMMIT/ABORT control batch to every partition in the transaction (and to the
group's ``__consumer_offsets`` partition), apply or drop the pending
transactional offsets, log CompleteX.  A crash between the two log writes
leaves PrepareX, which :meth:`TransactionCoordinator.load` completes (markers
are idempotent for readers: a second marker closes nothing).

Limits (logged, never silent): pending transactional offsets live in memory,
so a transaction that had offsets and was still Ongoing when the broker
stopped is aborted on start-up (with an epoch bump, as a timeout would).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kafkakit.broker.log import LogError, PartitionLog
from kafkakit.records import build_control_batch, decode_batch, encode_batch
from kio.schema.errors import ErrorCode

from .txn_records import (
    TxnLogValue,
    TxnRecordError,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    partition_for_transactional_id,
    partition_pairs,
)

if TYPE_CHECKING:
    from kafkakit.broker.coordinators.group_coordinator import GroupCoordinator
    from kafkakit.broker.producer_state import ProducerIdAllocator, ProducerStateRegistry

log = logging.getLogger("kafkakit.broker")

TRANSACTION_TOPIC = "__transaction_state"
TRANSACTION_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
# Kafka's transaction.max.timeout.ms default.
MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
MAX_EPOCH = 2**15 - 1
COORDINATOR_EPOCH = 0
NO_PRODUCER_ID = -1
NO_EPOCH = -1


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (as logged)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_STATE_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
KNOWN_STATE_NAMES = frozenset(_STATE_NAMES.values())


def state_name(state: TxnState) -> str:
    """Kafka's name of a state, as ListTransactions and DescribeTransactions report it."""
    return _STATE_NAMES[state]


class TxnError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id's state."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1

    def to_log(self) -> TxnLogValue:
        """The logged form."""
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            partition_pairs(self.partitions),
            self.last_update_ms,
            self.start_ms,
        )


class TransactionHost(Protocol):
    """What the coordinator needs from the broker."""

    def partition_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of an existing partition."""
        ...

    def transaction_topic_partitions(self) -> int | None:
        """Partition count of ``__transaction_state``, None before its first use."""
        ...

    def transaction_topic_log(self, partition: int) -> PartitionLog:
        """A partition of ``__transaction_state``, creating the topic on first use."""
        ...

    def offsets_partition_for(self, group_id: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition holding ``group_id``."""
        ...

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake fetches waiting on the partition."""
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
    ) -> None:
        self._host = host
        self._producer_ids = producer_ids
        self._producer_states = producer_states
        self._groups = groups
        self._default_partitions = default_partitions
        self.transactions: dict[str, TransactionMetadata] = {}
        self._by_producer: dict[int, TransactionMetadata] = {}
        # Groups whose offsets each ongoing transaction (by producer id) will commit.
        self._groups_in_txn: dict[int, set[str]] = {}

    # ================================================================ load

    def load(self) -> None:
        """Replay ``__transaction_state``; finish transactions a crash left in PrepareX."""
        for transactional_id, value in self._replay():
            if value is None:
                self._forget(transactional_id)
                continue
            meta = TransactionMetadata(
                transactional_id,
                value.producer_id,
                value.producer_epoch,
                value.timeout_ms,
                TxnState(value.status),
                set(value.partitions),
                value.start_ms,
                value.last_update_ms,
            )
            self._index(meta)
        for meta in list(self.transactions.values()):
            if meta.state in _PREPARING:
                log.info(
                    "transaction %s: completing %s after restart", meta.transactional_id, meta.state.name
                )
                self._write_markers_and_complete(meta, meta.state == TxnState.PREPARE_COMMIT)
            elif meta.state == TxnState.ONGOING and self._has_offsets_partition(meta):
                log.warning(
                    "transaction %s: aborting an ongoing transaction with offset commits "
                    "(pending transactional offsets do not survive a restart)",
                    meta.transactional_id,
                )
                self._abort_with_epoch_bump(meta)
        if self.transactions:
            log.info("loaded %d transactional id(s)", len(self.transactions))

    def _has_offsets_partition(self, meta: TransactionMetadata) -> bool:
        return any(topic == "__consumer_offsets" for topic, _ in meta.partitions)

    def _replay(self) -> Iterator[tuple[str, TxnLogValue | None]]:
        count = self._host.transaction_topic_partitions()
        if count is None:
            return
        for partition in range(count):
            txn_log = self._host.transaction_topic_log(partition)
            for header, data in txn_log.iter_batches():
                if header.is_control:
                    continue
                for record in decode_batch(data.read_bytes(), 0, header, TRANSACTION_TOPIC, partition):
                    if record.key is None:
                        continue
                    try:
                        tid = decode_txn_key(bytes(record.key))
                        value = None if record.value is None else decode_txn_value(bytes(record.value))
                        if value is not None:
                            TxnState(value.status)  # an unknown status is unreadable
                    except (TxnRecordError, UnicodeDecodeError, ValueError) as exc:
                        log.warning("skipping unreadable __transaction_state record: %s", exc)
                        continue
                    yield tid, value

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

    # ================================================================ InitProducerId

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_EPOCH
    ) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer; aborts its open transaction (fencing).

        Raises :class:`TxnError`: INVALID_REQUEST for an empty id,
        INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED
        when a presented (id, epoch) is not the current one.
        """
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request, "empty transactional id")
        if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            raise TxnError(
                ErrorCode.invalid_transaction_timeout,
                f"transaction timeout {timeout_ms} ms is not in (0, {MAX_TRANSACTION_TIMEOUT_MS}]",
            )
        now = _now_ms()
        meta = self.transactions.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(transactional_id, self._producer_ids.allocate(), 0, timeout_ms)
            meta.last_update_ms = now
            self._persist(meta)
            self._index(meta)
            return meta.producer_id, meta.producer_epoch
        if meta.state in _PREPARING:
            raise TxnError(ErrorCode.concurrent_transactions)
        if producer_id != NO_PRODUCER_ID and (producer_id, epoch) != (meta.producer_id, meta.producer_epoch):
            raise TxnError(
                ErrorCode.producer_fenced, f"{transactional_id}: ({producer_id}, {epoch}) is not current"
            )
        if meta.state == TxnState.ONGOING:
            log.info("transaction %s: a new producer instance aborts the open transaction", transactional_id)
            self._abort_with_epoch_bump(meta)
            meta.timeout_ms = timeout_ms
            meta.last_update_ms = now
            self._persist(meta)
            return meta.producer_id, meta.producer_epoch
        self._bump_epoch(meta)
        meta.timeout_ms = timeout_ms
        meta.state = TxnState.EMPTY
        meta.partitions = set()
        meta.last_update_ms = now
        self._persist(meta)
        return meta.producer_id, meta.producer_epoch

    def _bump_epoch(self, meta: TransactionMetadata) -> None:
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            if self._by_producer.get(meta.producer_id) is meta:
                del self._by_producer[meta.producer_id]
            meta.producer_id = self._producer_ids.allocate()
            meta.producer_epoch = 0
            self._by_producer[meta.producer_id] = meta
        else:
            meta.producer_epoch += 1

    def _abort_with_epoch_bump(self, meta: TransactionMetadata) -> None:
        """Fence the current producer (epoch + 1) and abort its transaction with the new epoch."""
        old_id, old_epoch = meta.producer_id, meta.producer_epoch
        self._bump_epoch(meta)
        meta.state = TxnState.PREPARE_ABORT
        meta.last_update_ms = _now_ms()
        self._persist(meta)
        # Markers carry the producer id whose data they close (a new id after epoch exhaustion).
        marker_epoch = meta.producer_epoch if meta.producer_id == old_id else old_epoch
        self._write_markers_and_complete(meta, False, old_id, marker_epoch)

    # ================================================================ adding to a transaction

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
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
        if meta.state in _PREPARING:
            raise TxnError(ErrorCode.concurrent_transactions)
        return meta

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn for partitions that exist (the caller checks them); raises :class:`TxnError`."""
        meta = self._current(transactional_id, producer_id, epoch)
        wanted = set(partitions)
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return
        now = _now_ms()
        if meta.state != TxnState.ONGOING:
            meta.partitions = set()
            meta.start_ms = now
            self._groups_in_txn.pop(meta.producer_id, None)
        meta.partitions |= wanted
        meta.state = TxnState.ONGOING
        meta.last_update_ms = now
        self._persist(meta)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        self.add_partitions(
            transactional_id, producer_id, epoch, [self._host.offsets_partition_for(group_id)]
        )
        self._groups_in_txn.setdefault(producer_id, set()).add(group_id)

    def check_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> None:
        """TxnOffsetCommit is allowed only inside an ongoing transaction that added the group."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        if epoch != meta.producer_epoch:
            raise TxnError(ErrorCode.invalid_producer_epoch)
        if meta.state != TxnState.ONGOING or group_id not in self._groups_in_txn.get(producer_id, ()):
            raise TxnError(
                ErrorCode.invalid_txn_state, f"{transactional_id}: group {group_id} not in the transaction"
            )

    def check_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> ErrorCode | None:
        """Why a transactional batch may not be appended to ``topic``-``partition``, or None."""
        meta = self._by_producer.get(producer_id)
        if meta is None:
            return ErrorCode.invalid_producer_id_mapping
        if epoch < meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if (
            epoch > meta.producer_epoch
            or meta.state != TxnState.ONGOING
            or (topic, partition) not in meta.partitions
        ):
            return ErrorCode.invalid_txn_state
        return None

    # ================================================================ EndTxn

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """Commit or abort; returns when every marker is written.  Raises :class:`TxnError`."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping)
        if meta.producer_epoch != epoch:
            raise TxnError(ErrorCode.producer_fenced)
        state = meta.state
        if state == TxnState.ONGOING:
            meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            meta.last_update_ms = _now_ms()
            self._persist(meta)
            self._write_markers_and_complete(meta, commit)
            return
        if (state, commit) in ((TxnState.COMPLETE_COMMIT, True), (TxnState.COMPLETE_ABORT, False)):
            return  # a retry of an EndTxn that already completed
        if (state, commit) in ((TxnState.PREPARE_COMMIT, True), (TxnState.PREPARE_ABORT, False)):
            raise TxnError(ErrorCode.concurrent_transactions)
        raise TxnError(
            ErrorCode.invalid_txn_state,
            f"{transactional_id}: cannot {'commit' if commit else 'abort'} in state {state.name}",
        )

    def _write_markers_and_complete(
        self,
        meta: TransactionMetadata,
        commit: bool,
        producer_id: int | None = None,
        epoch: int | None = None,
    ) -> None:
        now = _now_ms()
        producer_id = meta.producer_id if producer_id is None else producer_id
        epoch = meta.producer_epoch if epoch is None else epoch
        marker = build_control_batch(producer_id, epoch, commit, COORDINATOR_EPOCH, now)
        for topic, partition in sorted(meta.partitions):
            self._write_marker(topic, partition, marker, producer_id, commit)
        groups = self._groups_in_txn.pop(producer_id, set())
        self._groups.complete_transactional_offsets(producer_id, commit)
        if groups and not commit:
            log.info("transaction %s: dropped offsets of group(s) %s", meta.transactional_id, sorted(groups))
        meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        meta.partitions = set()
        meta.last_update_ms = _now_ms()
        self._persist(meta)

    def _write_marker(
        self, topic: str, partition: int, marker: bytes, producer_id: int, commit: bool
    ) -> None:
        partition_log = self._host.partition_log(topic, partition)
        if partition_log is None:
            log.warning(
                "transaction marker for %s-%d skipped: the partition no longer exists", topic, partition
            )
            return
        producer_state = self._producer_states.for_log(partition_log)
        try:
            result = partition_log.append(marker)
        except LogError as exc:
            # Kafka retries markers forever; here the disk failed, which the log reports loudly too.
            log.error("writing a transaction marker to %s-%d failed: %s", topic, partition, exc)
            return
        producer_state.record(result.batches)
        producer_state.complete_transaction(producer_id, result.base_offset, commit)
        self._host.notify_append(topic, partition)

    # ================================================================ timeouts

    def abort_timed_out(self, now_ms: int | None = None) -> list[str]:
        """Abort (with an epoch bump) every Ongoing transaction older than its timeout; their ids."""
        now = _now_ms() if now_ms is None else now_ms
        expired = [
            meta
            for meta in self.transactions.values()
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms
        ]
        for meta in expired:
            log.info("transaction %s timed out after %d ms: aborting", meta.transactional_id, meta.timeout_ms)
            self._abort_with_epoch_bump(meta)
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

    def _persist(self, meta: TransactionMetadata) -> None:
        count = self._host.transaction_topic_partitions() or self._default_partitions
        partition = partition_for_transactional_id(meta.transactional_id, count)
        txn_log = self._host.transaction_topic_log(partition)
        now = _now_ms()
        record = (encode_txn_key(meta.transactional_id), encode_txn_value(meta.to_log()), now, ())
        try:
            txn_log.append(encode_batch([record]))
        except LogError as exc:
            log.error(
                "transaction %s: appending to %s failed: %s", meta.transactional_id, TRANSACTION_TOPIC, exc
            )
            raise TxnError(ErrorCode.coordinator_not_available, str(exc)) from None
        self._host.notify_append(TRANSACTION_TOPIC, partition)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
