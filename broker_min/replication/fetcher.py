"""The follower side of replication: one fetcher task per leader node (Kafka's ReplicaFetcherThread).

A :class:`FollowerFetcher` owns the partitions this node follows on one leader
and runs one loop over one connection:

1. Truncation first (KIP-101/KIP-279), for every partition that has a new leader
   epoch: OffsetForLeaderEpoch v4 (``replica_id`` = this node) for the latest
   epoch of the follower's log; the leader answers where that epoch ends in its
   log, and the follower cuts everything after the point where both logs agree
   (:func:`truncation_offset`, Kafka's rules, repeated with an older epoch
   while the logs disagree about the epoch itself).
2. Then Fetch v12 rounds, sessionless (epoch -1), ``replica_id`` = this node,
   read_uncommitted, from each partition's log end offset, waiting up to
   ``replica.fetch.wait.max.ms`` at the leader.  Returned batches are written
   with the leader's offsets and epochs (``PartitionLog.append_as_follower``) and
   the HW follows the leader's: min(leader HW, own log end).  The leader reads
   the fetch offset as this follower's log end: that is how it learns the
   follower's progress (HW, ISR).
3. OFFSET_OUT_OF_RANGE below the leader's log start empties the log to restart
   there; above it (a tail the leader does not have) the log is cut to the
   leader's HW.  Other partition errors pause that partition for
   ``replica.fetch.backoff.ms``; a connection failure pauses the whole fetcher.

Partitions are added and removed by the replica manager as metadata arrives;
an answer for a partition that was removed or re-added meanwhile is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkakit.broker.log import LogError, read_batch_header
from kafkakit.broker.peer_connection import BrokerConnection
from kafkakit.protocol.build import make_request
from kafkakit.records.header import HEADER_SIZE
from kio.schema.errors import ErrorCode

from .settings import ReplicationSettings

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker.replication")

FETCH = 1
FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH = 23
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
UNDEFINED = -1

Key = tuple[str, int]


@dataclass(eq=False, slots=True)
class FetchState:
    """A followed partition in its fetcher: the leader epoch it follows and what is next."""

    topic: str
    partition: int
    leader_epoch: int
    truncating: bool = True
    #: The epoch the next OffsetForLeaderEpoch asks about; None: the log's latest.
    epoch_to_check: int | None = None
    #: Loop time before which the partition is not fetched (after an error).
    delayed_until: float = 0.0

    @property
    def key(self) -> Key:
        return self.topic, self.partition


def truncation_offset(log: PartitionLog, leader_epoch: int, leader_end: int) -> tuple[int, int | None]:
    """Where a follower cuts its log given the leader's OffsetForLeaderEpoch answer
    ``(leader_epoch, leader_end)``, and None when that settles it, or the older epoch to
    ask about next (Kafka's AbstractFetcherThread.getOffsetTruncationState)."""
    log_end = log.log_end_offset
    if leader_end == UNDEFINED:  # the leader knows no such epoch: keep what is committed
        return min(log.high_watermark, log_end), None
    if leader_epoch == UNDEFINED:
        return min(leader_end, log_end), None
    own_epoch, own_end = log.end_offset_for_epoch(leader_epoch)
    if own_epoch == UNDEFINED:
        return min(leader_end, log_end), None
    if own_epoch == leader_epoch:
        return min(leader_end, own_end), None
    # The logs disagree about that epoch: cut to where both agree it has ended and ask again
    # about the older epoch (strictly older than asked: the rounds end).
    return min(own_end, leader_end, log_end), own_epoch


class FollowerFetcher:
    """Replicates the partitions this node follows on leader ``leader_id`` (module docstring)."""

    def __init__(
        self,
        leader_id: int,
        node_id: int,
        settings: ReplicationSettings,
        state: BrokerState,
        resolve: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.leader_id = leader_id
        self.node_id = node_id
        self.settings = settings
        self.state = state
        self._resolve = resolve
        self._partitions: dict[Key, FetchState] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: BrokerConnection | None = None

    # -- partitions ------------------------------------------------------------------------------

    @property
    def partitions(self) -> dict[Key, FetchState]:
        return self._partitions

    def add_partition(self, key: Key, leader_epoch: int) -> None:
        """Follow ``key`` under ``leader_epoch``, truncating first."""
        self._partitions[key] = FetchState(key[0], key[1], leader_epoch)
        self._wakeup.set()

    def remove_partition(self, key: Key) -> None:
        self._partitions.pop(key, None)

    # -- running ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop (in the running event loop)."""
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=f"kafkakit-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        """Stop the loop and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._close()

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _run(self) -> None:
        backoff = self.settings.replica_fetch_backoff_ms / 1000
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.info("node %d: fetching from leader %d failed: %r", self.node_id, self.leader_id, exc)
                self._close()
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("node %d: fetcher for leader %d failed", self.node_id, self.leader_id)
                self._close()
                await asyncio.sleep(backoff)

    async def _round(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        ready = [s for s in self._partitions.values() if s.delayed_until <= now]
        if not ready:
            delays = [s.delayed_until - now for s in self._partitions.values()]
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delays) if delays else None):
                    await self._wakeup.wait()
            return
        connection = await self._connect()
        truncating = [s for s in ready if s.truncating]
        if truncating:
            await self._truncate(connection, truncating)
        else:
            await self._fetch(connection, ready)

    async def _connect(self) -> BrokerConnection:
        if self._connection is not None and not self._connection.broken:
            return self._connection
        self._close()
        address = self._resolve(self.leader_id)
        if address is None:
            raise ConnectionRefusedError(
                f"leader {self.leader_id} has no {self.settings.inter_broker_listener} endpoint"
            )
        timeout = self.settings.replica_socket_timeout_ms / 1000
        self._connection = await BrokerConnection.open(*address, f"broker-{self.node_id}-fetcher", timeout)
        return self._connection

    def _delay(self, fetch: FetchState) -> None:
        fetch.delayed_until = (
            asyncio.get_running_loop().time() + self.settings.replica_fetch_backoff_ms / 1000
        )

    def _current(self, topic: str, partition: int, sent: dict[Key, FetchState]) -> FetchState | None:
        """The partition's state if it is still the one the request was made for."""
        fetch = sent.get((topic, partition))
        return fetch if fetch is not None and self._partitions.get(fetch.key) is fetch else None

    def _log(self, fetch: FetchState) -> PartitionLog | None:
        return self.state.partition_log(fetch.topic, fetch.partition)

    # -- truncation ------------------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection, partitions: list[FetchState]) -> None:
        topics: dict[str, list[dict[str, int]]] = {}
        sent: dict[Key, FetchState] = {}
        for fetch in partitions:
            partition_log = self._log(fetch)
            if partition_log is None:
                self._delay(fetch)
                continue
            epoch = fetch.epoch_to_check
            if epoch is None:
                epoch = partition_log.leader_epochs.latest_epoch
            if epoch == UNDEFINED:  # nothing to compare: keep what is committed
                self._cut(fetch, partition_log, partition_log.high_watermark)
                fetch.truncating = False
                continue
            sent[fetch.key] = fetch
            topics.setdefault(fetch.topic, []).append(
                {
                    "partition": fetch.partition,
                    "current_leader_epoch": fetch.leader_epoch,
                    "leader_epoch": epoch,
                }
            )
        if not topics:
            return
        request = make_request(
            OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            replica_id=self.node_id,
            topics=[{"topic": name, "partitions": parts} for name, parts in topics.items()],
        )
        response = await connection.request(request, self.settings.replica_socket_timeout_ms / 1000)
        for topic in response.topics:
            for answer in topic.partitions:
                asked = self._current(topic.topic, answer.partition, sent)
                if asked is None:
                    continue
                partition_log = self._log(asked)
                if answer.error_code != ErrorCode.none or partition_log is None:
                    self._partition_error(asked, answer.error_code)
                    continue
                offset, next_epoch = truncation_offset(partition_log, answer.leader_epoch, answer.end_offset)
                self._cut(asked, partition_log, offset)
                asked.epoch_to_check = next_epoch
                asked.truncating = next_epoch is not None

    def _cut(self, fetch: FetchState, partition_log: PartitionLog, offset: int) -> None:
        if offset < partition_log.log_end_offset:
            log.info(
                "node %d: truncating %s-%d from %d to %d (leader %d, epoch %d)",
                self.node_id, fetch.topic, fetch.partition, partition_log.log_end_offset, offset,
                self.leader_id, fetch.leader_epoch,
            )  # fmt: skip
            partition_log.truncate_to(offset)
            self.state.producer_states.forget_partition(fetch.topic, fetch.partition)

    # -- fetching --------------------------------------------------------------------------------

    async def _fetch(self, connection: BrokerConnection, partitions: list[FetchState]) -> None:
        settings = self.settings
        topics: dict[str, list[dict[str, int]]] = {}
        sent: dict[Key, FetchState] = {}
        offsets: dict[Key, int] = {}
        for fetch in partitions:
            partition_log = self._log(fetch)
            if partition_log is None:
                self._delay(fetch)
                continue
            sent[fetch.key] = fetch
            offsets[fetch.key] = partition_log.log_end_offset
            topics.setdefault(fetch.topic, []).append(
                {
                    "partition": fetch.partition,
                    "current_leader_epoch": fetch.leader_epoch,
                    "fetch_offset": partition_log.log_end_offset,
                    "last_fetched_epoch": UNDEFINED,
                    "log_start_offset": partition_log.log_start_offset,
                    "partition_max_bytes": settings.replica_fetch_max_bytes,
                }
            )
        if not topics:
            return
        request = make_request(
            FETCH,
            FETCH_VERSION,
            cluster_id=None,
            replica_id=self.node_id,
            max_wait=settings.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=settings.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[{"topic": name, "partitions": parts} for name, parts in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        timeout = (settings.replica_fetch_wait_max_ms + settings.replica_socket_timeout_ms) / 1000
        response = await connection.request(request, timeout)
        if response.error_code != ErrorCode.none:
            for fetch in sent.values():
                self._partition_error(fetch, response.error_code)
            return
        for topic in response.responses:
            for answer in topic.partitions:
                asked = self._current(topic.topic, answer.partition_index, sent)
                if asked is None:
                    continue
                partition_log = self._log(asked)
                if partition_log is None or partition_log.log_end_offset != offsets[asked.key]:
                    continue  # the log changed under the request (recreated, truncated)
                if answer.error_code == ErrorCode.none:
                    self._apply(asked, partition_log, answer)
                elif answer.error_code == ErrorCode.offset_out_of_range:
                    self._out_of_range(asked, partition_log, answer)
                else:
                    self._partition_error(asked, answer.error_code)

    def _apply(self, fetch: FetchState, partition_log: PartitionLog, answer: Any) -> None:
        records = answer.records
        leader_hw = int(answer.high_watermark)
        try:
            if records:
                self._maybe_restart_at_batch(fetch, partition_log, records)
                partition_log.append_as_follower(records, high_watermark=leader_hw)
                if self.state.producer_states.loaded(partition_log) is not None:
                    self.state.producer_states.forget_partition(fetch.topic, fetch.partition)
            else:
                partition_log.update_high_watermark(leader_hw)
        except LogError as exc:
            log.warning(
                "node %d: cannot append %s-%d from leader %d: %s",
                self.node_id, fetch.topic, fetch.partition, self.leader_id, exc,
            )  # fmt: skip
            fetch.truncating = True
            self._delay(fetch)
            return
        leader_start = int(answer.log_start_offset)
        if partition_log.log_start_offset < leader_start <= partition_log.high_watermark:
            partition_log.delete_records_before(leader_start)  # the leader's retention/DeleteRecords

    def _maybe_restart_at_batch(self, fetch: FetchState, partition_log: PartitionLog, records: bytes) -> None:
        """An empty log whose start fell inside the leader's first batch (DeleteRecords in the
        middle of a batch) restarts at that batch's base offset (Kafka does the same)."""
        if len(records) < HEADER_SIZE:
            return
        first = read_batch_header(records, 0)
        log_end = partition_log.log_end_offset
        if log_end == partition_log.log_start_offset and first.base_offset < log_end <= first.last_offset:
            partition_log.truncate_fully_and_start_at(first.base_offset)

    def _out_of_range(self, fetch: FetchState, partition_log: PartitionLog, answer: Any) -> None:
        leader_start, leader_hw = int(answer.log_start_offset), int(answer.high_watermark)
        if 0 <= partition_log.log_end_offset < leader_start:
            log.info(
                "node %d: %s-%d is behind leader %d's log start %d: restarting the log there",
                self.node_id, fetch.topic, fetch.partition, self.leader_id, leader_start,
            )  # fmt: skip
            partition_log.truncate_fully_and_start_at(leader_start)
            self.state.producer_states.forget_partition(fetch.topic, fetch.partition)
        elif leader_hw >= 0:
            self._cut(fetch, partition_log, min(leader_hw, partition_log.log_end_offset))
        else:
            fetch.truncating = True
            self._delay(fetch)

    def _partition_error(self, fetch: FetchState, code: ErrorCode) -> None:
        log.debug(
            "node %d: leader %d answered %s for %s-%d", self.node_id, self.leader_id, code.name,
            fetch.topic, fetch.partition,
        )  # fmt: skip
        self._delay(fetch)
