"""A transaction's state as the coordinator keeps it: Kafka's ``TransactionMetadata`` and its states.

The states and their logged ids (Kafka's ``TransactionState``), the per-transactional-id
metadata with its undo snapshot and logged form, the markers still to write for a
transaction in PrepareX, and the errors and ``ImplicitAdd`` modes the coordinator
answers with.  :mod:`.transactions` drives them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .txn_records import TxnLogValue, partition_pairs

# Kafka's transaction.max.timeout.ms default.
MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
MAX_EPOCH = 2**15 - 1
COORDINATOR_EPOCH = 0
NO_PRODUCER_ID = -1
NO_EPOCH = -1
# Marker retry backoff (Kafka retries every few hundred ms until it succeeds).
MARKER_RETRY_INITIAL_MS = 100
MARKER_RETRY_MAX_MS = 5_000


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


PREPARING_STATES = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE_STATES = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
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


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka never hands out epoch 32767, so the coordinator can always fence once more."""
    return epoch >= MAX_EPOCH - 1


class TxnError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class ImplicitAdd(enum.Enum):
    """How a Produce/TxnOffsetCommit treats a partition not in the transaction (Kafka's
    ``TransactionSupportedOperation``, chosen by the request version)."""

    REFUSE = "INVALID_TXN_STATE"  # older clients
    ABORTABLE = "TRANSACTION_ABORTABLE"  # Produce v11, TxnOffsetCommit v4 (KIP-890 part 1)
    ADD = "add"  # Produce v12+, TxnOffsetCommit v5+ (transaction version 2)


@dataclass(slots=True)
class MarkerJob:
    """Markers still to write for a transaction in PrepareX (retried until written).

    ``in_flight``: partitions whose WriteTxnMarkers to another leader awaits its answer.
    ``prepare_end``: in cluster mode, the ``__transaction_state`` offset the PrepareX record
    must be replicated up to before any marker goes out (None: it is).
    """

    commit: bool
    producer_id: int
    epoch: int
    remaining: set[tuple[str, int]]
    next_producer_id: int = NO_PRODUCER_ID  # TV2 epoch overflow: the id the producer gets afterwards
    backoff_ms: int = MARKER_RETRY_INITIAL_MS
    next_attempt_ms: int = 0
    coordinator_epoch: int = COORDINATOR_EPOCH
    in_flight: set[tuple[str, int]] = field(default_factory=set)
    prepare_end: int | None = None
    awaiting_prepare: bool = False


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
    # The epoch before the last bump that a producer may still present (KIP-360 retries/recovery).
    last_producer_epoch: int = NO_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    # Kafka's ClientTransactionVersion: 2 once the client used transaction version 2 requests, else 0.
    client_transaction_version: int = 0
    markers: MarkerJob | None = None

    def snapshot(self) -> tuple[object, ...]:
        """The mutable fields, to undo a transition whose logging failed (see :meth:`restore`)."""
        return (
            self.producer_id, self.producer_epoch, self.timeout_ms, self.state, set(self.partitions),
            self.start_ms, self.last_update_ms, self.last_producer_epoch, self.previous_producer_id,
            self.client_transaction_version,
        )  # fmt: skip

    def restore(self, snapshot: tuple[object, ...]) -> None:
        """Undo to a :meth:`snapshot` (the producer id index is the caller's)."""
        (
            self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
            self.start_ms, self.last_update_ms, self.last_producer_epoch, self.previous_producer_id,
            self.client_transaction_version,
        ) = snapshot  # type: ignore[assignment]  # fmt: skip

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        """The state a logged value describes (its marker job, if any, is the coordinator's to start)."""
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            TxnState(value.status),
            set(value.partitions),
            value.start_ms,
            value.last_update_ms,
            previous_producer_id=value.previous_producer_id,
            client_transaction_version=value.client_transaction_version,
        )

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
            self.previous_producer_id,
            self.markers.next_producer_id
            if self.markers is not None and self.state in PREPARING_STATES
            else NO_PRODUCER_ID,
            self.client_transaction_version,
        )
