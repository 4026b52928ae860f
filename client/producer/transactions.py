"""The transactional producer's state machine and its talks with the coordinators.

A transaction on the wire (transaction version 1, which Apache Kafka 4.x still
accepts from clients using Produce <= v11 and EndTxn <= v4):

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

Transaction version 2 (KIP-890) is not used yet: kafkakit's client speaks
Produce up to v11 and EndTxn up to v4, so brokers treat it as version 1.

:func:`complete_transaction` finishes a transaction prepared by another
process (:meth:`Producer.prepare_transaction`), for two-phase commit sinks.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.cluster import Cluster
from kafkakit.errors import (
    CommitFailedError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionStateError,
    for_code,
)
from kafkakit.net.connection import BrokerConnection
from kafkakit.producer.idempotence import FENCING_CODES, ProducerIdentity, fenced_error
from kafkakit.protocol.framing import ApiKey
from kafkakit.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from kafkakit.consumer.group import GroupMetadata

log = logging.getLogger(__name__)

GROUP_KEY = 0
TRANSACTION_KEY = 1
#: Transaction version kafkakit speaks (see the module docstring).
TRANSACTION_VERSION = 1
_COORDINATOR_MOVED = frozenset({14, 15, 16})  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_CONCURRENT_TRANSACTIONS = 51
_NOT_ATTEMPTED = 55  # OPERATION_NOT_ATTEMPTED: another partition of the request failed
_GROUP_FENCING = frozenset({22, 25, 82})  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID
#: CONCURRENT_TRANSACTIONS clears within milliseconds (markers being written): retry quickly.
_CONCURRENT_BACKOFF = 0.02


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
    transaction_version: int = TRANSACTION_VERSION
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


class _Coordinators:
    """Finds coordinators with FindCoordinator and keeps one connection per (key type, key)."""

    def __init__(self, cluster: Cluster, request_timeout_ms: int) -> None:
        self._cluster = cluster
        self._request_timeout_ms = request_timeout_ms
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self.hints: dict[tuple[int, str], tuple[str, int]] = {}

    async def connection(self, key_type: int, key: str) -> BrokerConnection:
        conn = self._conns.get((key_type, key))
        if conn is not None and conn.connected:
            return conn
        hint = self.hints.get((key_type, key))
        if hint is None:
            hint = await self._find(key_type, key)
        conn = BrokerConnection(
            hint[0], hint[1], client_id=self._cluster.client_id, request_timeout_ms=self._request_timeout_ms
        )
        try:
            await conn.connect()
        except KafkaError:
            self.hints.pop((key_type, key), None)
            raise
        self._conns[(key_type, key)] = conn
        return conn

    async def _find(self, key_type: int, key: str) -> tuple[str, int]:
        conn = await self._cluster.any_connection()
        response = await conn.call(ApiKey.FIND_COORDINATOR, key=key, key_type=key_type)
        code = int(response.error_code)
        if code:
            raise for_code(code)(f"FindCoordinator for {key!r} (key type {key_type})")
        address = (str(response.host), int(response.port))
        self.hints[(key_type, key)] = address
        return address

    def drop(self, key_type: int, key: str, reason: str) -> None:
        self.hints.pop((key_type, key), None)
        conn = self._conns.pop((key_type, key), None)
        if conn is not None:
            log.info("dropping coordinator %s:%s for %r: %s", conn.host, conn.port, key, reason)
            asyncio.ensure_future(conn.close())

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def call(
        self,
        key_type: int,
        key: str,
        api_key: int,
        codes_of: Callable[[Any], Iterable[int]],
        *,
        what: str,
        timeout: float,
        backoff: float,
        **fields: Any,
    ) -> Any:
        """Send one request to the coordinator of ``key``, retrying what is retriable.

        Returns the response when ``codes_of`` finds no error; raises the first
        non-retriable error's typed exception (fencing codes as ProducerFencedError).
        """
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            delay = backoff
            try:
                conn = await self.connection(key_type, key)
                response = await conn.call(api_key, **fields)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self.drop(key_type, key, str(exc))
                last = exc
            else:
                codes = [int(c) for c in codes_of(response) if int(c)]
                real = [c for c in codes if c != _NOT_ATTEMPTED] or codes
                if not real:
                    return response
                code = real[0]
                if code in FENCING_CODES:
                    raise fenced_error(code, what)
                error = for_code(code)(what)
                if code in _COORDINATOR_MOVED:
                    self.drop(key_type, key, str(error))
                elif code == _CONCURRENT_TRANSACTIONS:
                    delay = _CONCURRENT_BACKOFF
                elif not error.retriable:
                    raise error
                last = error
            if time.monotonic() + delay >= deadline:
                raise KafkaTimeoutError(f"{what}: gave up after {timeout:.0f}s; last error: {last}") from last
            await asyncio.sleep(delay)


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
        wake_sender: Callable[[], None] = lambda: None,
    ) -> None:
        if identity.transactional_id is None:
            raise ValueError("a TransactionManager needs a transactional id")
        self.transactional_id: str = identity.transactional_id
        self.identity = identity
        self.state = TransactionState.UNINITIALIZED
        self._coordinators = _Coordinators(cluster, request_timeout_ms)
        self._timeout = request_timeout_ms / 1000
        self._backoff = retry_backoff_ms / 1000
        self._wake_sender = wake_sender
        self._added: set[TopicPartition] = set()
        self._pending: set[TopicPartition] = set()
        self._adding: asyncio.Task[None] | None = None
        self._offsets_added = False
        self._abortable: KafkaError | None = None
        self._needs_bump = False  # a sequence gap: a new epoch is needed after the abort

    # -- what the sender asks -------------------------------------------------------

    @property
    def abortable_error(self) -> KafkaError | None:
        """Why the current transaction can only be aborted (None while it is healthy)."""
        return self._abortable

    def partition_added(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent now; if not, AddPartitionsToTxn is scheduled."""
        if tp in self._added:
            return True
        if self.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.PREPARED,
        ):
            self._pending.add(tp)
            if self._adding is None or self._adding.done():
                self._adding = asyncio.ensure_future(self._add_pending_partitions())
        return False

    def on_batch_error(self, error: BaseException, *, sequence_gap: bool = False) -> None:
        """A batch of the current transaction failed: the transaction can only be aborted now."""
        if sequence_gap:
            self._needs_bump = True
        if isinstance(error, ProducerFencedError):
            self._set_fatal(error)
            return
        if self._abortable is None and self.state is not TransactionState.FATAL:
            self._abortable = error if isinstance(error, KafkaError) else KafkaError(repr(error))
            if self.state in (
                TransactionState.IN_TRANSACTION,
                TransactionState.COMMITTING,
                TransactionState.PREPARED,
            ):
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
        try:
            return await self._coordinators.call(
                TRANSACTION_KEY,
                self.transactional_id,
                api_key,
                codes_of,
                what=f"{what} for {self.transactional_id!r}",
                timeout=self._timeout,
                backoff=self._backoff,
                **fields,
            )
        except ProducerFencedError as exc:
            self._set_fatal(exc)
            raise

    def _set_fatal(self, error: KafkaError) -> None:
        self.identity.set_fatal(error)
        self.state = TransactionState.FATAL

    async def _init_producer_id(self, *, bump: bool) -> None:
        identity = self.identity
        response = await self._call_txn(
            ApiKey.INIT_PRODUCER_ID,
            _error_code,
            what="InitProducerId",
            transactional_id=self.transactional_id,
            transaction_timeout=identity.transaction_timeout_ms,
            producer_id=identity.producer_id if bump else -1,
            producer_epoch=identity.epoch if bump else -1,
        )
        identity.producer_id = int(response.producer_id)
        identity.epoch = int(response.producer_epoch)
        log.info(
            "transactional id %r: producer id %s epoch %s",
            self.transactional_id,
            identity.producer_id,
            identity.epoch,
        )

    async def end_transaction(self, commit: bool) -> None:
        """Send EndTxn for the current producer id/epoch (retrying CONCURRENT_TRANSACTIONS)."""
        await self._call_txn(
            ApiKey.END_TXN,
            _error_code,
            what="EndTxn(commit)" if commit else "EndTxn(abort)",
            transactional_id=self.transactional_id,
            producer_id=self.identity.producer_id,
            producer_epoch=self.identity.epoch,
            committed=commit,
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
        await self._init_producer_id(bump=False)
        self.state = TransactionState.READY

    def begin_transaction(self) -> None:
        self._require(TransactionState.READY, action="begin_transaction")
        self.state = TransactionState.IN_TRANSACTION

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], group: GroupMetadata
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator (KIP-447 fencing)."""
        self._require(TransactionState.IN_TRANSACTION, action="send_offsets_to_transaction")
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
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, value in sorted(offsets.items()):
            offset, metadata = (
                (value.offset, value.metadata) if isinstance(value, OffsetAndMetadata) else (int(value), "")
            )
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )
        try:
            await self._coordinators.call(
                GROUP_KEY,
                group.group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                _txn_offset_codes,
                what=f"TxnOffsetCommit for group {group.group_id!r}",
                timeout=self._timeout,
                backoff=self._backoff,
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.identity.producer_id,
                producer_epoch=self.identity.epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
            )
        except ProducerFencedError as exc:
            self._set_fatal(exc)
            raise
        except KafkaError as exc:
            code = getattr(exc, "code", None)
            error: KafkaError = exc
            if code in _GROUP_FENCING:
                error = CommitFailedError(
                    f"the consumer of group {group.group_id!r} is no longer generation {group.generation_id}: {exc}"
                )
            self.on_batch_error(error)
            raise error from exc

    async def commit(self, flush: Callable[[], Awaitable[None]]) -> None:
        self._require(
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.PREPARED,
            action="commit_transaction",
        )
        if self.state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.COMMITTING
            await self._flush_for_end(flush)
        if self._abortable is not None:
            self.state = TransactionState.ABORTABLE_ERROR
            self._require(action="commit_transaction")
        if self._added or self._offsets_added:
            await self.end_transaction(commit=True)
        self._reset()

    async def prepare(self, flush: Callable[[], Awaitable[None]]) -> TransactionHandle:
        self._require(TransactionState.IN_TRANSACTION, action="prepare_transaction")
        self.state = TransactionState.PREPARED
        await self._flush_for_end(flush)
        if self._abortable is not None:
            self.state = TransactionState.ABORTABLE_ERROR
            self._require(action="prepare_transaction")
        hint = self._coordinators.hints.get((TRANSACTION_KEY, self.transactional_id))
        return TransactionHandle(
            self.transactional_id,
            self.identity.producer_id,
            self.identity.epoch,
            TRANSACTION_VERSION,
            hint[0] if hint else None,
            hint[1] if hint else None,
        )

    def forget_prepared(self) -> None:
        """The prepared transaction is completed elsewhere (``complete_transaction``): start afresh."""
        self._require(TransactionState.PREPARED, action="forget_prepared_transaction")
        self._reset()

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
        reset_sequences: Callable[[], None],
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
        self.identity.check_fatal()
        if self._added or self._offsets_added:
            await self.end_transaction(commit=False)
        if self._needs_bump:
            await self._init_producer_id(bump=True)
            reset_sequences()
            self._needs_bump = False
        self._reset()

    def _reset(self) -> None:
        self._added.clear()
        self._pending.clear()
        self._offsets_added = False
        self._abortable = None
        self.state = TransactionState.READY

    async def close(self) -> None:
        if self._adding is not None and not self._adding.done():
            self._adding.cancel()
        await self._coordinators.close()


async def complete_transaction(
    bootstrap_servers: str | Sequence[str],
    handle: TransactionHandle,
    commit: bool,
    *,
    client_id: str = "kafkakit-txn-completer",
    request_timeout_ms: int = 30000,
    retry_backoff_ms: int = 100,
) -> None:
    """Commit (or abort) the transaction a producer prepared, from any process.

    Sends EndTxn with the handle's producer id and epoch.  Raises
    :class:`ProducerFencedError` when the transaction is gone: a newer producer
    with the same transactional id called ``init_transactions`` (which aborts
    it), or the coordinator aborted it after ``transaction_timeout_ms``.
    """
    if not isinstance(handle, TransactionHandle):
        raise TypeError(f"handle must be a TransactionHandle, not {type(handle).__name__}")
    if handle.transaction_version != TRANSACTION_VERSION:
        raise ValueError(f"transaction version {handle.transaction_version} handles are not supported")
    cluster = Cluster(
        bootstrap_servers,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
    )
    identity = ProducerIdentity(transactional_id=handle.transactional_id, transaction_timeout_ms=0)
    identity.producer_id, identity.epoch = handle.producer_id, handle.producer_epoch
    manager = TransactionManager(
        cluster, identity, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms
    )
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
