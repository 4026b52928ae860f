"""The transactional producer's state machine and its talks with the coordinators.

A transaction on the wire, transaction version 1 (what every broker since
Kafka 0.11 speaks, with Produce <= v11, TxnOffsetCommit <= v4, EndTxn <= v4):

1. FindCoordinator (key type 1) for the transactional id, then InitProducerId
   with it: the coordinator fences older instances (bumps the epoch) and
   finishes or aborts whatever transaction they left open.
2. AddPartitionsToTxn before the first Produce to each new partition; the
   partitions first needed while one request is in flight go in the next one.
3. Produce with the transactional bit and sequence numbers.
4. For consume-transform-produce: AddOffsetsToTxn (transaction coordinator),
   then TxnOffsetCommit to the GROUP coordinator carrying the consumer's
   generation, member id and instance id (KIP-447), so a zombie is fenced.
5. EndTxn (commit or abort); the coordinator writes the markers.

Transaction version 2 (KIP-890), used when the transaction coordinator's
ApiVersions finalizes the feature ``transaction.version`` >= 2 (the default of
Kafka 4.0+) and it speaks Produce v12, TxnOffsetCommit v5 and EndTxn v5:

- no AddPartitionsToTxn: a Produce v12 adds its partition to the transaction
  (the partition leader asks the coordinator itself);
- no AddOffsetsToTxn: TxnOffsetCommit v5 adds the offsets partition;
- EndTxn v5 bumps the epoch at the end of EVERY transaction and returns the new
  producer id/epoch, which the producer adopts (sequences restart at 0).  A
  retried EndTxn (lost response) carries the old epoch; the coordinator
  recognises it (its epoch is exactly one higher) and answers success again.

The version is chosen once, in ``init_transactions`` (Java decides at the same
point; switching mid-life would need an extra epoch bump).

Recovery (KIP-360 / KIP-588): a fencing error during a transaction (EndTxn,
AddPartitionsToTxn, TxnOffsetCommit, or INVALID_PRODUCER_EPOCH from Produce)
has two causes the error code cannot tell apart: a newer instance called
InitProducerId, or the coordinator aborted our transaction because it exceeded
``transaction_timeout_ms`` (and bumped the epoch).  kafkakit asks the
coordinator: InitProducerId with the current producer id and epoch succeeds
only in the second case (the coordinator remembers the epoch it bumped from;
a new instance's InitProducerId erases that), so the producer continues with the
bumped epoch; in the first case it answers PRODUCER_FENCED, which is fatal.

:func:`complete_transaction` finishes a transaction prepared by another
process (:meth:`Producer.prepare_transaction`), for two-phase commit sinks.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    CommitFailedError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionStateError,
)
from kafkakit.net.security import PLAINTEXT, SecurityConfig
from kafkakit.producer.coordinators import GROUP_KEY, TRANSACTION_KEY, Coordinators
from kafkakit.producer.idempotence import ProducerIdentity
from kafkakit.producer.transaction_versions import (
    TRANSACTION_VERSION_1,
    TRANSACTION_VERSION_2,
    TRANSACTION_VERSION_FEATURE,
    choose_version,
    supported_transaction_version,
    version_range,
)
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from kafkakit.consumer.group import GroupMetadata

__all__ = [
    # Re-exported: the coordinators and transaction versions moved to their own modules.
    "GROUP_KEY",
    "TRANSACTION_KEY",
    "TRANSACTION_VERSION_1",
    "TRANSACTION_VERSION_2",
    "TRANSACTION_VERSION_FEATURE",
    "TransactionHandle",
    "TransactionManager",
    "TransactionState",
    "choose_version",
    "complete_transaction",
    "supported_transaction_version",
    "version_range",
]

log = logging.getLogger(__name__)

_GROUP_FENCING = frozenset({22, 25, 82})  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    PREPARED = "prepared"
    ABORTABLE_ERROR = "abortable_error"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class TransactionHandle:
    """A prepared transaction that any process can complete with :func:`complete_transaction`.

    Plain data: ``to_json``/``from_json`` (or ``dataclasses.asdict``) carry it
    between processes.  ``coordinator_host``/``coordinator_port`` are a hint;
    the coordinator is looked up again if it moved.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_version: int = TRANSACTION_VERSION_1
    coordinator_host: str | None = None
    coordinator_port: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransactionHandle:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a TransactionHandle: {text!r}")
        return cls(**data)


def _error_code(response: Any) -> list[int]:
    return [int(response.error_code)]


def _add_partitions_codes(response: Any) -> list[int]:
    return [
        int(p.partition_error_code)
        for topic in response.results_by_topic_v3_and_below
        for p in topic.results_by_partition
    ]


def _txn_offset_codes(response: Any) -> list[int]:
    return [int(p.error_code) for topic in response.topics for p in topic.partitions]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


class TransactionManager:
    """One transactional producer's transaction state, coordinator calls and partition set.

    The producer calls the public coroutines; the sender asks
    :meth:`partition_added` before draining a partition and reports failed
    batches through :meth:`on_batch_error`.
    """

    def __init__(
        self,
        cluster: Cluster,
        identity: ProducerIdentity,
        *,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        max_block_ms: int = 60000,
        wake_sender: Callable[[], None] = lambda: None,
        reset_sequences: Callable[[], None] = lambda: None,
    ) -> None:
        if identity.transactional_id is None:
            raise ValueError("a TransactionManager needs a transactional id")
        self.transactional_id: str = identity.transactional_id
        self.identity = identity
        self.state = TransactionState.UNINITIALIZED
        #: Chosen in init_transactions from what the coordinator advertises.
        self.transaction_version = TRANSACTION_VERSION_1
        #: Highest version init_transactions may choose (tests lower it to exercise version 1).
        self.max_transaction_version = TRANSACTION_VERSION_2
        self._coordinators = Coordinators(cluster, request_timeout_ms)
        # How long a transactional call keeps retrying its coordinator (which may move: a
        # coordinator failover takes seconds), each request within request_timeout_ms.
        self._timeout = max(max_block_ms, request_timeout_ms) / 1000
        self._backoff = retry_backoff_ms / 1000
        self._wake_sender = wake_sender
        self._reset_sequences = reset_sequences
        self._added: set[TopicPartition] = set()
        self._pending: set[TopicPartition] = set()
        self._adding: asyncio.Task[None] | None = None
        self._offsets_added = False
        self._abortable: KafkaError | None = None
        self._needs_bump = False  # a sequence gap: a new epoch is needed after the abort
        self._fence_suspect = False  # a fencing error: a newer instance, or the coordinator's timeout?
        self._coordinator_aborted = False  # the coordinator aborted it and we hold the bumped epoch
        self._resync: asyncio.Task[None] | None = None  # TV2: epoch after a transaction completed elsewhere

    # -- what the sender asks -------------------------------------------------------

    @property
    def abortable_error(self) -> KafkaError | None:
        """Why the current transaction can only be aborted (None while it is healthy)."""
        return self._abortable

    @property
    def _open(self) -> bool:
        return self.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.PREPARED,
        )

    def partition_added(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent now; if not, AddPartitionsToTxn is scheduled."""
        if self._resync is not None and not self._resync.done():
            return False  # the epoch is being re-read; it wakes the sender
        if tp in self._added:
            return True
        if not self._open:
            return False
        if self.transaction_version >= TRANSACTION_VERSION_2:
            self._added.add(tp)  # Produce v12 adds it (KIP-890)
            return True
        self._pending.add(tp)
        if self._adding is None or self._adding.done():
            self._adding = asyncio.ensure_future(self._add_pending_partitions())
        return False

    def on_batch_error(
        self, error: BaseException, *, sequence_gap: bool = False, fence_suspect: bool = False
    ) -> None:
        """A batch (or a coordinator call) of the current transaction failed: it can only be aborted now.

        ``fence_suspect``: a fencing error, which abort/commit resolve by asking
        the coordinator (see the module docstring) rather than dying at once.
        """
        if sequence_gap:
            self._needs_bump = True
        if fence_suspect or isinstance(error, ProducerFencedError):
            self._fence_suspect = True
        if self._abortable is None and self.state is not TransactionState.FATAL:
            self._abortable = error if isinstance(error, KafkaError) else KafkaError(repr(error))
            if self._open:
                self.state = TransactionState.ABORTABLE_ERROR

    async def _add_pending_partitions(self) -> None:
        try:
            while self._pending:
                partitions, self._pending = self._pending, set()
                partitions -= self._added
                if not partitions:
                    continue
                await self._call_txn(
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    _add_partitions_codes,
                    what="AddPartitionsToTxn",
                    v3_and_below_transactional_id=self.transactional_id,
                    v3_and_below_producer_id=self.identity.producer_id,
                    v3_and_below_producer_epoch=self.identity.epoch,
                    v3_and_below_topics=[
                        {"name": name, "partitions": parts} for name, parts in _by_topic(partitions).items()
                    ],
                )
                self._added |= partitions
                self._wake_sender()
        except KafkaError as exc:
            self.on_batch_error(exc)
            self._wake_sender()

    # -- coordinator calls -------------------------------------------------------------

    async def _call_txn(
        self, api_key: int, codes_of: Callable[[Any], Iterable[int]], *, what: str, **fields: Any
    ) -> Any:
        """A request to the transaction coordinator; fencing raises ProducerFencedError (not yet fatal)."""
        return await self._coordinators.call(
            TRANSACTION_KEY,
            self.transactional_id,
            api_key,
            codes_of,
            what=f"{what} for {self.transactional_id!r}",
            timeout=self._timeout,
            backoff=self._backoff,
            transaction_version=self.transaction_version,
            **fields,
        )

    def _set_fatal(self, error: KafkaError) -> None:
        self.identity.set_fatal(error)
        self.state = TransactionState.FATAL

    async def _init_producer_id(self, *, bump: bool) -> None:
        """InitProducerId; with ``bump`` for the current id/epoch (KIP-360).  Fencing is fatal."""
        identity = self.identity
        try:
            response = await self._call_txn(
                ApiKey.INIT_PRODUCER_ID,
                _error_code,
                what="InitProducerId",
                transactional_id=self.transactional_id,
                transaction_timeout=identity.transaction_timeout_ms,
                producer_id=identity.producer_id if bump else -1,
                producer_epoch=identity.epoch if bump else -1,
            )
        except ProducerFencedError as exc:
            self._set_fatal(exc)
            raise
        self._adopt(int(response.producer_id), int(response.producer_epoch))

    def _adopt(self, producer_id: int, epoch: int) -> None:
        """A new producer id/epoch from the coordinator: every partition numbers from 0 again."""
        identity = self.identity
        if (producer_id, epoch) == (identity.producer_id, identity.epoch):
            return
        identity.producer_id, identity.epoch = producer_id, epoch
        self._reset_sequences()
        log.info("transactional id %r: producer id %s epoch %s", self.transactional_id, producer_id, epoch)

    async def end_transaction(self, commit: bool) -> None:
        """EndTxn for the current producer id/epoch (retrying CONCURRENT_TRANSACTIONS and lost responses).

        With transaction version 2 the response carries the bumped epoch, adopted here.
        """
        response = await self._call_txn(
            ApiKey.END_TXN,
            _error_code,
            what="EndTxn(commit)" if commit else "EndTxn(abort)",
            transactional_id=self.transactional_id,
            producer_id=self.identity.producer_id,
            producer_epoch=self.identity.epoch,
            committed=commit,
        )
        producer_id = int(getattr(response, "producer_id", -1))
        if self.transaction_version >= TRANSACTION_VERSION_2 and producer_id >= 0:
            self._adopt(producer_id, int(response.producer_epoch))

    async def _resolve_fencing(self, cause: KafkaError) -> None:
        """Fenced by a newer instance (fatal, raises ProducerFencedError) or aborted by the coordinator?

        InitProducerId with our id and epoch succeeds only when no newer instance
        initialised since: the coordinator then aborted the transaction itself
        (timeout) and we continue with the epoch it returns (KIP-588).
        Call only with nothing in flight: it renumbers the sequences.
        """
        log.warning(
            "transactional id %r: %s; asking the coordinator whether we were fenced",
            self.transactional_id,
            cause,
        )
        try:
            await self._init_producer_id(bump=True)
        except ProducerFencedError as exc:
            raise ProducerFencedError(
                f"{exc}; a newer producer with transactional id {self.transactional_id!r} took over ({cause})"
            ) from cause
        self._fence_suspect = False
        self._needs_bump = False
        self._coordinator_aborted = True
        self._abortable = TransactionAbortedError(
            f"the coordinator aborted the transaction of {self.transactional_id!r} "
            f"(it exceeded transaction_timeout_ms={self.identity.transaction_timeout_ms}?): {cause}"
        )

    # -- the public steps ----------------------------------------------------------------

    def _require(self, *states: TransactionState, action: str) -> None:
        self.identity.check_fatal()
        if self.state in states:
            return
        if self.state is TransactionState.ABORTABLE_ERROR:
            raise TransactionStateError(
                f"cannot {action}: the transaction failed ({self._abortable}); call abort_transaction()"
            ) from self._abortable
        raise TransactionStateError(f"cannot {action} in state {self.state.value}")

    def check_can_send(self) -> None:
        if self.state is not TransactionState.IN_TRANSACTION:
            self._require(
                TransactionState.IN_TRANSACTION, action="send records (call begin_transaction() first)"
            )

    async def init_transactions(self) -> None:
        self._require(TransactionState.UNINITIALIZED, action="init_transactions (already initialised)")
        await self._init_producer_id(bump=False)  # also finds the coordinator, retrying
        conn = await self._coordinators.connection(TRANSACTION_KEY, self.transactional_id)
        self.transaction_version = min(supported_transaction_version(conn), self.max_transaction_version)
        log.info(
            "transactional id %r: transaction version %d", self.transactional_id, self.transaction_version
        )
        self.state = TransactionState.READY

    def begin_transaction(self) -> None:
        self._require(TransactionState.READY, action="begin_transaction")
        self.state = TransactionState.IN_TRANSACTION

    async def _await_resync(self) -> None:
        if self._resync is not None:
            await asyncio.shield(self._resync)
            self.identity.check_fatal()

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group: GroupMetadata
    ) -> None:
        """AddOffsetsToTxn (version 1 only), then TxnOffsetCommit to the group coordinator (KIP-447 fencing)."""
        self._require(TransactionState.IN_TRANSACTION, action="send_offsets_to_transaction")
        await self._await_resync()
        try:
            if self.transaction_version < TRANSACTION_VERSION_2:
                await self._call_txn(
                    ApiKey.ADD_OFFSETS_TO_TXN,
                    _error_code,
                    what="AddOffsetsToTxn",
                    transactional_id=self.transactional_id,
                    producer_id=self.identity.producer_id,
                    producer_epoch=self.identity.epoch,
                    group_id=group.group_id,
                )
            self._offsets_added = True
            await self._coordinators.call(
                GROUP_KEY,
                group.group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                _txn_offset_codes,
                what=f"TxnOffsetCommit for group {group.group_id!r}",
                timeout=self._timeout,
                backoff=self._backoff,
                transaction_version=self.transaction_version,
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.identity.producer_id,
                producer_epoch=self.identity.epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=_offset_topics(offsets),
            )
        except KafkaError as exc:
            code = getattr(exc, "code", None)
            error: KafkaError = exc
            if code in _GROUP_FENCING:
                error = CommitFailedError(
                    f"the consumer of group {group.group_id!r} is no longer generation {group.generation_id}: {exc}"
                )
            elif isinstance(exc, ProducerFencedError):
                error = TransactionStateError(
                    f"{exc}: the transaction was fenced or timed out; call abort_transaction() "
                    "(it raises ProducerFencedError if a newer producer took over)"
                )
            self.on_batch_error(error, fence_suspect=isinstance(exc, ProducerFencedError))
            raise error from exc

    async def commit(self, flush: Callable[[], Awaitable[None]]) -> None:
        self._require(
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.PREPARED,
            TransactionState.ABORTABLE_ERROR,
            action="commit_transaction",
        )
        if self.state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.COMMITTING
        if self.state is not TransactionState.PREPARED:
            # Also when already failed: nothing may be in flight when _resolve_fencing renumbers.
            await self._flush_for_end(flush)
        await self._await_resync()
        if self._abortable is None and (self._added or self._offsets_added):
            try:
                await self.end_transaction(commit=True)
            except ProducerFencedError as exc:
                self.on_batch_error(exc, fence_suspect=True)
            except InvalidTxnStateError as exc:
                # Version 2 answers a commit of a transaction the coordinator aborted (timeout)
                # with INVALID_TXN_STATE: find out as for fencing.
                self.on_batch_error(exc, fence_suspect=True)
            except KafkaError as exc:
                self._abortable_unless_retriable(exc)
                raise
        if self._abortable is not None:
            if self._fence_suspect:
                await self._resolve_fencing(self._abortable)  # ProducerFencedError when really fenced
            self.state = TransactionState.ABORTABLE_ERROR
            self._require(action="commit_transaction")
        self._reset()

    def _abortable_unless_retriable(self, error: KafkaError) -> None:
        # e.g. TRANSACTION_ABORTABLE; after a timeout or a lost connection commit may be retried.
        if not error.retriable and not isinstance(error, KafkaTimeoutError):
            self.on_batch_error(error)

    async def prepare(self, flush: Callable[[], Awaitable[None]]) -> TransactionHandle:
        self._require(TransactionState.IN_TRANSACTION, action="prepare_transaction")
        self.state = TransactionState.PREPARED
        await self._flush_for_end(flush)
        await self._await_resync()
        if self._abortable is not None:
            self.state = TransactionState.ABORTABLE_ERROR
            self._require(action="prepare_transaction")
        hint = self._coordinators.hints.get((TRANSACTION_KEY, self.transactional_id))
        return TransactionHandle(
            self.transactional_id,
            self.identity.producer_id,
            self.identity.epoch,
            self.transaction_version,
            hint[0] if hint else None,
            hint[1] if hint else None,
        )

    def forget_prepared(self) -> None:
        """The prepared transaction is completed elsewhere (``complete_transaction``): start afresh.

        With transaction version 2 that EndTxn bumped the epoch; InitProducerId
        with the epoch we prepared under returns the bumped one (the coordinator
        treats it as a retry), read in the background before the next request.
        """
        self._require(TransactionState.PREPARED, action="forget_prepared_transaction")
        self._reset()
        if self.transaction_version >= TRANSACTION_VERSION_2:
            self._resync = asyncio.ensure_future(self._resync_epoch())

    async def _resync_epoch(self) -> None:
        try:
            await self._init_producer_id(bump=True)
        except KafkaError as exc:
            if self.identity.fatal is None:
                self._set_fatal(exc)
            log.error(
                "transactional id %r: cannot read the epoch after a prepared transaction: %s",
                self.transactional_id,
                exc,
            )
        finally:
            self._wake_sender()

    async def _flush_for_end(self, flush: Callable[[], Awaitable[None]]) -> None:
        await flush()
        # A partition may still be on its way into the transaction (its batches then wait).
        while self._adding is not None and not self._adding.done():
            await asyncio.shield(self._adding)
            await flush()

    async def abort(
        self,
        fail_queued: Callable[[], bool],
        wait_in_flight: Callable[[], Awaitable[None]],
    ) -> None:
        self._require(
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
            TransactionState.ABORTING,
            TransactionState.PREPARED,
            TransactionState.COMMITTING,
            action="abort_transaction",
        )
        self.state = TransactionState.ABORTING
        if fail_queued():
            self._needs_bump = True  # a retried batch with a sequence was dropped: a gap
        await wait_in_flight()
        if self._adding is not None and not self._adding.done():
            self._adding.cancel()
        await self._await_resync()
        self.identity.check_fatal()
        if not self._coordinator_aborted:
            await self._end_for_abort()
        if self._needs_bump:
            await self._init_producer_id(bump=True)
        self._reset()

    async def _end_for_abort(self) -> None:
        """EndTxn(abort), or, when the coordinator says we are fenced, find out whether we really are."""
        epoch_before = self.identity.epoch
        if self._added or self._offsets_added:
            try:
                await self.end_transaction(commit=False)
            except (ProducerFencedError, InvalidTxnStateError, InvalidProducerIdMappingError) as exc:
                # Fenced, timed out, (version 2) no partition ever reached the coordinator, or
                # the coordinator forgot the id: InitProducerId with our id and epoch settles it.
                await self._resolve_fencing(exc)
                return
        elif self._fence_suspect and self._abortable is not None:
            await self._resolve_fencing(self._abortable)
            return
        if self.identity.epoch != epoch_before:
            self._needs_bump = False  # EndTxn v5 bumped the epoch already

    def _reset(self) -> None:
        self._added.clear()
        self._pending.clear()
        self._offsets_added = False
        self._abortable = None
        self._fence_suspect = False
        self._coordinator_aborted = False
        self._needs_bump = False
        self.state = TransactionState.READY

    async def close(self) -> None:
        for task in (self._adding, self._resync):
            if task is not None and not task.done():
                task.cancel()
        await self._coordinators.close()


def _offset_topics(offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, value in sorted(offsets.items()):
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
        offset, metadata = om.offset, om.metadata
        epoch = -1 if om.leader_epoch is None else om.leader_epoch
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": epoch,
                "committed_metadata": metadata,
            }
        )
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


async def complete_transaction(
    bootstrap_servers: str | Sequence[str],
    handle: TransactionHandle,
    commit: bool,
    *,
    client_id: str = "kafkakit-txn-completer",
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
    security: SecurityConfig | None = None,
) -> None:
    """Commit (or abort) the transaction a producer prepared, from any process.

    ``security`` carries TLS/SASL settings (a :class:`~kafkakit.net.security.SecurityConfig`,
    built from the same keywords as the Producer's), for secured clusters.

    Sends EndTxn with the handle's producer id and epoch, in the handle's
    transaction version.  Completing twice in the same way is harmless (the
    coordinator acknowledges a repeated EndTxn, also with version 2, where the
    first one bumped the epoch).  Raises :class:`ProducerFencedError` when the
    transaction is gone: a newer producer with the same transactional id called
    ``init_transactions`` (which aborts it), or the coordinator aborted it after
    ``transaction_timeout_ms`` (with version 2, Kafka answers that commit with
    ``InvalidTxnStateError``); ``InvalidTxnStateError`` when it was completed
    the other way.  Never returns normally for a transaction it did not complete
    as asked.
    """
    if not isinstance(handle, TransactionHandle):
        raise TypeError(f"handle must be a TransactionHandle, not {type(handle).__name__}")
    if handle.transaction_version not in (TRANSACTION_VERSION_1, TRANSACTION_VERSION_2):
        raise ValueError(f"transaction version {handle.transaction_version} handles are not supported")
    cluster = Cluster(
        bootstrap_servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        security=security or PLAINTEXT,
    )
    identity = ProducerIdentity(transactional_id=handle.transactional_id, transaction_timeout_ms=0)
    identity.producer_id, identity.epoch = handle.producer_id, handle.producer_epoch
    manager = TransactionManager(
        cluster, identity, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms
    )
    manager.transaction_version = handle.transaction_version
    if handle.coordinator_host is not None and handle.coordinator_port is not None:
        manager._coordinators.hints[(TRANSACTION_KEY, handle.transactional_id)] = (
            handle.coordinator_host,
            handle.coordinator_port,
        )
    try:
        await cluster.start()
        await manager.end_transaction(commit)
    finally:
        await manager.close()
        await cluster.close()
