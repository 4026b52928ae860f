"""The replica manager: leads and follows this node's partitions as the metadata image says.

It is a metadata publisher (:meth:`ReplicaManager.on_metadata`, called with each
node's image and the delta just applied) and the leader-side authority the
handlers ask (:class:`~.hooks.LeaderHook`):

* Topics are mirrored into ``state.topics`` (the registry the Metadata and other
  handlers read); partitions with this node among their replicas get a
  replicated log (``single_replica=False``: the HW moves only by replication);
  logs of removed topics and of partitions this node no longer replicates go.
* Leader (Kafka's makeLeader): the log starts the new leader epoch at its log end
  (``become_leader``), follower tracking starts afresh, cached producer state is
  dropped (rebuilt from the log on first use, so idempotence and transactions
  survive a leader change) and the HW starts at the log's checkpointed HW.
* Follower (makeFollower): leader state and its acks=all waiters end
  (NOT_LEADER_OR_FOLLOWER), and the partition moves to the fetcher of its new
  leader, which truncates before fetching (:mod:`.fetcher`).
* Follower fetches (:meth:`ReplicaManager.on_follower_fetch`) move the HW, wake
  acks=all waiters and consumer long polls, and add caught-up followers to the ISR;
  a periodic check (every replica.lag.time.max.ms / 2) removes lagging ones.  ISR
  changes go to the controller as AlterPartition v3 through ``isr_channel``, one in
  flight per partition (:mod:`.leader` has the rules).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from kafkakit.broker.log import LogConfig
from kafkakit.broker.metadata import (
    NO_LEADER,
    TOPIC_RESOURCE,
    MetadataDelta,
    MetadataImage,
    PartitionRegistration,
)
from kafkakit.broker.state import TopicInfo
from kafkakit.errors import KafkaConfigError
from kafkakit.protocol.build import make_request
from kio.schema.errors import ErrorCode

from .fetcher import FollowerFetcher
from .leader import LeaderPartition, PendingIsr
from .settings import ReplicationSettings

if TYPE_CHECKING:
    from kafkakit.broker.log import PartitionLog
    from kafkakit.broker.state import BrokerState

log = logging.getLogger("kafkakit.broker.replication")

ALTER_PARTITION = 56
ALTER_PARTITION_VERSION = 3
MIN_INSYNC_REPLICAS = "min.insync.replicas"
#: AlterPartition errors after which the leader waits for the metadata instead of retrying.
_AWAIT_METADATA = frozenset({ErrorCode.fenced_leader_epoch, ErrorCode.invalid_update_version})

Key = tuple[str, int]
IsrChannel = Callable[[Any], Awaitable[Any]]


class ReplicaManager:
    """Leader and follower replicas of one node (see the module docstring).

    ``isr_channel`` sends an AlterPartition request to the active controller and returns its
    response; ``broker_epoch`` gives this node's current broker epoch (from its registration).
    """

    def __init__(
        self,
        state: BrokerState,
        node_id: int,
        settings: ReplicationSettings,
        isr_channel: IsrChannel,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.state = state
        self.node_id = node_id
        self.settings = settings
        self._isr_channel = isr_channel
        self._broker_epoch = broker_epoch
        self._image: MetadataImage | None = None
        self._leaders: dict[Key, LeaderPartition] = {}
        #: Followed partitions: key -> (leader id, leader epoch).
        self._following: dict[Key, tuple[int, int]] = {}
        self._fetchers: dict[int, FollowerFetcher] = {}
        self._min_insync: dict[str, int] = {}
        self._synced = False
        self._running = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start fetching for the followed partitions, the ISR check and the HW checkpoints."""
        if self._running:
            return
        self._running = True
        for fetcher in self._fetchers.values():
            fetcher.start()
        self._spawn(self._isr_check_loop())
        self._spawn(self._checkpoint_loop())

    async def stop(self) -> None:
        """Stop every fetcher and background task (leadership stays as the metadata says)."""
        self._running = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(f.stop() for f in self._fetchers.values()), return_exceptions=True)

    @property
    def running(self) -> bool:
        return self._running

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what the handlers ask (LeaderHook / ReplicaManagerHook) ---------------------------------

    def is_leader(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._leaders

    def leader_partition(self, topic: str, partition: int) -> LeaderPartition | None:
        """The leader state of a partition this node leads (for tests and diagnostics)."""
        return self._leaders.get((topic, partition))

    def min_insync_replicas(self, topic: str) -> int:
        return self._min_insync.get(topic, self.settings.min_insync_replicas)

    def check_produce(self, topic: str, partition: int, acks: int) -> ErrorCode | None:
        """Whether a Produce may append here: NOT_LEADER_OR_FOLLOWER on a non-leader, and for
        acks=all NOT_ENOUGH_REPLICAS while the ISR is smaller than min.insync.replicas."""
        leader = self._leaders.get((topic, partition))
        if leader is None:
            known = self._image is not None and self._image.partition(topic, partition) is not None
            return ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
        if acks == -1 and len(leader.isr) < self.min_insync_replicas(topic):
            return ErrorCode.not_enough_replicas
        return None

    def on_leader_append(self, topic: str, partition: int) -> None:
        """After an append on this leader: the HW may move at once (an ISR of this node alone)."""
        leader = self._leaders.get((topic, partition))
        if leader is not None:
            self._advance_high_watermark(leader)

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout: float) -> ErrorCode | None:
        """Wait until the HW reaches ``end_offset``: None, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when
        the ISR is below min.insync.replicas by then, REQUEST_TIMED_OUT after ``timeout`` seconds,
        NOT_LEADER_OR_FOLLOWER when this node does not lead the partition (any more)."""
        leader = self._leaders.get((topic, partition))
        if leader is None:
            return ErrorCode.not_leader_or_follower
        self._advance_high_watermark(leader)
        if leader.log.high_watermark >= end_offset:
            ok = len(leader.isr) >= self.min_insync_replicas(topic)
            return None if ok else ErrorCode.not_enough_replicas_after_append
        future: asyncio.Future[ErrorCode | None] = asyncio.get_running_loop().create_future()
        leader.waiters.append((end_offset, future))
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                return await future
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            if not future.done():
                future.cancel()

    def on_follower_fetch(self, topic: str, partition: int, replica_id: int, fetch_offset: int) -> ErrorCode | None:
        """A follower fetches ``fetch_offset``: record its log end, move the HW, maybe add it to the
        ISR.  NOT_LEADER_OR_FOLLOWER when this node does not lead or the replica is not assigned."""
        leader = self._leaders.get((topic, partition))
        if leader is None:
            return ErrorCode.not_leader_or_follower
        follower = leader.followers.get(replica_id)
        if follower is None:
            return ErrorCode.not_leader_or_follower
        leader_end = leader.log.log_end_offset
        if not 0 <= fetch_offset <= leader_end:
            return None  # the read answers OFFSET_OUT_OF_RANGE
        now = _now_ms()
        follower.record_fetch(fetch_offset, leader_end, now)
        if (
            replica_id not in leader.maximal_isr
            and leader.pending is None
            and now >= leader.retry_after_ms
            and leader.may_join_isr(follower)
            and self._isr_eligible(replica_id)
        ):
            log.info(
                "node %d: expanding the ISR of %s-%d with %d (at offset %d)",
                self.node_id, topic, partition, replica_id, fetch_offset,
            )  # fmt: skip
            self._alter_isr(leader, (*leader.isr, replica_id))
        self._advance_high_watermark(leader)
        return None

    def _advance_high_watermark(self, leader: LeaderPartition) -> None:
        candidate = leader.high_watermark_candidate(
            _now_ms(), self.settings.replica_lag_time_max_ms, self._isr_eligible
        )
        if candidate > leader.log.high_watermark:
            leader.log.update_high_watermark(candidate)
            self.state.notify_append(leader.topic, leader.partition)  # consumer long polls
        leader.complete_waiters(self.min_insync_replicas(leader.topic))

    def _isr_eligible(self, replica_id: int) -> bool:
        """A registered, unfenced broker that is not shutting down (Kafka's isReplicaIsrEligible)."""
        image = self._image
        broker = image.brokers.get(replica_id) if image is not None else None
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    # -- metadata --------------------------------------------------------------------------------

    def on_metadata(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Act on the metadata just applied to ``image`` (the first call takes in the whole image)."""
        self._image = image
        full = not self._synced
        self._synced = True
        removed = set(delta.removed_topics)
        if full:
            removed |= {info.name for info in self.state.topics if info.name not in image.topics}
        for name in removed:
            if name not in image.topics:
                self._drop_topic(name)
        touched = set(image.topics) if full else (
            delta.created_topics
            | {topic for topic, _ in delta.changed_partitions}
            | {name for kind, name in delta.changed_configs if kind == TOPIC_RESOURCE}
        )  # fmt: skip
        for name in sorted(touched):
            self._mirror_topic(image, name)
        if full:
            keys = {(t.name, p) for t in image.topics.values() for p in t.partitions}
            keys |= {k for k in self.state.logs.partitions() if k[0] in image.topics}
        else:
            keys = set(delta.changed_partitions)
        for key in sorted(keys):
            self._apply_partition(image, key)
        if delta.changed_brokers:
            for leader in self._leaders.values():
                self._advance_high_watermark(leader)  # a fenced replica no longer holds the HW

    def _drop_topic(self, name: str) -> None:
        for key in [k for k in (*self._leaders, *self._following) if k[0] == name]:
            self._stop_replica(key, delete=False)
        self._min_insync.pop(name, None)
        if self.state.delete_topic(name) is None:
            self.state.logs.delete_topic(name)
        log.info("node %d: removed topic %s", self.node_id, name)

    def _mirror_topic(self, image: MetadataImage, name: str) -> None:
        topic = image.topics.get(name)
        if topic is None:
            return
        configs = image.topic_configs(name)
        info = TopicInfo(name, topic.topic_id, max(topic.partitions, default=-1) + 1, configs)
        existing = self.state.topics.get(name)
        if existing is not None and existing.topic_id != topic.topic_id:
            self._drop_topic(name)  # an older topic of the same name: its data goes
            existing = None
        self._min_insync[name] = _min_insync(configs, self.settings.min_insync_replicas)
        if existing == info:
            return
        if existing is not None:
            self.state.topics.remove(name)
        self.state.topics.add(info)
        if existing is None or existing.configs != configs:
            self.state.logs.update_topic_config(name, self._log_config(name, configs))

    def _log_config(self, topic: str, configs: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_topic_configs(configs, self.state.default_log_config)
        except KafkaConfigError as exc:
            log.warning("node %d: topic %s has bad configs (%s): using the defaults", self.node_id, topic, exc)
            return self.state.default_log_config

    def _apply_partition(self, image: MetadataImage, key: Key) -> None:
        registration = image.partition(*key)
        if registration is None or self.node_id not in registration.replicas:
            self._stop_replica(key, delete=True)
        elif registration.leader == self.node_id:
            self._become_leader(image, key, registration)
        else:
            self._become_follower(key, registration)

    def _ensure_log(self, key: Key) -> PartitionLog:
        existing = self.state.logs.get(*key)
        if existing is not None and not existing.single_replica:
            return existing
        info = self.state.topics.get(key[0])
        config = self._log_config(key[0], info.configs if info is not None else {})
        return self.state.logs.create(key[0], key[1], config, single_replica=False)

    def _become_leader(self, image: MetadataImage, key: Key, registration: PartitionRegistration) -> None:
        now = _now_ms()
        current = self._leaders.get(key)
        if current is not None and current.leader_epoch == registration.leader_epoch:
            if current.update_registration(registration, self.node_id, now):
                self._advance_high_watermark(current)
            return
        self._stop_following(key)
        partition_log = self._ensure_log(key)
        if registration.leader_epoch >= partition_log.leader_epoch:
            partition_log.become_leader(registration.leader_epoch)
        else:
            log.warning(
                "node %d: leading %s-%d in epoch %d, older than its log's %d",
                self.node_id, key[0], key[1], registration.leader_epoch, partition_log.leader_epoch,
            )  # fmt: skip
        self.state.producer_states.forget_partition(*key)
        topic_id = image.topics[key[0]].topic_id
        leader = LeaderPartition.create(key[0], key[1], topic_id, partition_log, registration, self.node_id, now)
        if current is not None:
            leader.waiters = current.waiters  # a new epoch under the same leader: appends stay
        self._leaders[key] = leader
        log.info(
            "node %d: leading %s-%d in epoch %d from offset %d (HW %d, ISR %s)",
            self.node_id, key[0], key[1], registration.leader_epoch, partition_log.log_end_offset,
            partition_log.high_watermark, list(registration.isr),
        )  # fmt: skip
        self._advance_high_watermark(leader)

    def _become_follower(self, key: Key, registration: PartitionRegistration) -> None:
        leader = self._leaders.pop(key, None)
        if leader is not None:
            leader.fail_waiters(ErrorCode.not_leader_or_follower)
            self.state.notify_append(*key)  # consumer long polls answer NOT_LEADER_OR_FOLLOWER
        target = (registration.leader, registration.leader_epoch)
        partition_log = self._ensure_log(key)
        if leader is None and self._following.get(key) == target:
            return  # the same leader and epoch: an ISR or replica change
        self._stop_following(key)
        partition_log.become_follower(registration.leader_epoch)
        self.state.producer_states.forget_partition(*key)
        self._following[key] = target
        if registration.leader == NO_LEADER:
            return
        fetcher = self._fetchers.get(registration.leader)
        if fetcher is None:
            fetcher = self._fetchers[registration.leader] = FollowerFetcher(
                registration.leader, self.node_id, self.settings, self.state, self._leader_address
            )
        fetcher.add_partition(key, registration.leader_epoch)
        if self._running:
            fetcher.start()
        log.info(
            "node %d: following %s-%d on leader %d in epoch %d",
            self.node_id, key[0], key[1], registration.leader, registration.leader_epoch,
        )  # fmt: skip

    def _stop_following(self, key: Key) -> None:
        followed = self._following.pop(key, None)
        if followed is None:
            return
        fetcher = self._fetchers.get(followed[0])
        if fetcher is None:
            return
        fetcher.remove_partition(key)
        if not fetcher.partitions:
            del self._fetchers[followed[0]]
            if fetcher.running:
                self._spawn(fetcher.stop())

    def _stop_replica(self, key: Key, *, delete: bool) -> None:
        leader = self._leaders.pop(key, None)
        if leader is not None:
            leader.fail_waiters(ErrorCode.not_leader_or_follower)
        self._stop_following(key)
        self.state.producer_states.forget_partition(*key)
        if delete and self.state.logs.delete_partition(*key):
            log.info("node %d: deleted the replica of %s-%d", self.node_id, *key)

    def _leader_address(self, leader_id: int) -> tuple[str, int] | None:
        image = self._image
        broker = image.brokers.get(leader_id) if image is not None else None
        endpoint = broker.endpoint(self.settings.inter_broker_listener) if broker is not None else None
        return None if endpoint is None else (endpoint.host, endpoint.port)

    # -- ISR changes -----------------------------------------------------------------------------

    async def _isr_check_loop(self) -> None:
        interval = self.settings.replica_lag_time_max_ms / 2000
        while True:
            await asyncio.sleep(interval)
            try:
                self.shrink_isr()
            except Exception:
                log.exception("node %d: ISR check failed", self.node_id)

    def shrink_isr(self) -> None:
        """Ask to remove the ISR followers that have not caught up within the lag time."""
        now = _now_ms()
        for leader in list(self._leaders.values()):
            if leader.pending is not None or now < leader.retry_after_ms:
                continue
            lagging = leader.out_of_sync(now, self.settings.replica_lag_time_max_ms)
            if lagging:
                log.info(
                    "node %d: shrinking the ISR of %s-%d: %s are out of sync",
                    self.node_id, leader.topic, leader.partition, lagging,
                )  # fmt: skip
                self._alter_isr(leader, tuple(r for r in leader.isr if r not in lagging))

    def _alter_isr(self, leader: LeaderPartition, new_isr: tuple[int, ...]) -> None:
        if not self._running:
            return
        pending = PendingIsr(new_isr, tuple(dict.fromkeys((*leader.isr, *new_isr))), leader.partition_epoch)
        leader.pending = pending
        self._spawn(self._send_alter_partition(leader, pending))

    async def _send_alter_partition(self, leader: LeaderPartition, pending: PendingIsr) -> None:
        image = self._image
        brokers = image.brokers if image is not None else {}
        request = make_request(
            ALTER_PARTITION,
            ALTER_PARTITION_VERSION,
            broker_id=self.node_id,
            broker_epoch=self._broker_epoch(),
            topics=[
                {
                    "topic_id": leader.topic_id,
                    "partitions": [
                        {
                            "partition_index": leader.partition,
                            "leader_epoch": leader.leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": r, "broker_epoch": b.broker_epoch if (b := brokers.get(r)) else -1}
                                for r in pending.new_isr
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": pending.partition_epoch,
                        }
                    ],
                }
            ],
        )
        try:
            response = await self._isr_channel(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("node %d: AlterPartition for %s-%d failed: %r", self.node_id, leader.topic, leader.partition, exc)
            self._retry_later(leader, pending)
            return
        self._on_alter_partition(leader, pending, response)

    def _on_alter_partition(self, leader: LeaderPartition, pending: PendingIsr, response: Any) -> None:
        if self._leaders.get(leader.key) is not leader or leader.pending is not pending:
            return  # leadership or the ISR moved on meanwhile
        code = response.error_code
        answer = None
        if code == ErrorCode.none:
            answer = next(
                (p for t in response.topics if t.topic_id == leader.topic_id for p in t.partitions
                 if p.partition_index == leader.partition),
                None,
            )  # fmt: skip
            code = answer.error_code if answer is not None else ErrorCode.unknown_server_error
        if answer is not None and code == ErrorCode.none:
            if answer.leader_epoch != leader.leader_epoch or answer.partition_epoch < leader.partition_epoch:
                leader.pending = None  # an answer about an older state: ignored
                return
            leader.pending = None
            leader.apply_isr(tuple(answer.isr), answer.partition_epoch)
            log.info(
                "node %d: ISR of %s-%d is now %s (partition epoch %d)",
                self.node_id, leader.topic, leader.partition, list(leader.isr), leader.partition_epoch,
            )  # fmt: skip
            self._advance_high_watermark(leader)
        elif code in _AWAIT_METADATA:
            log.info(
                "node %d: AlterPartition for %s-%d refused (%s): waiting for the metadata",
                self.node_id, leader.topic, leader.partition, code.name,
            )  # fmt: skip
            pending.awaiting_metadata = True
        else:
            log.warning(
                "node %d: AlterPartition for %s-%d refused: %s", self.node_id, leader.topic, leader.partition, code.name
            )
            self._retry_later(leader, pending)

    def _retry_later(self, leader: LeaderPartition, pending: PendingIsr) -> None:
        if leader.pending is pending:
            leader.pending = None
            leader.retry_after_ms = _now_ms() + self.settings.replica_fetch_backoff_ms

    # -- high watermark checkpoints -------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        interval = self.settings.high_watermark_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                if not any(p.closed for p in self.state.logs.partitions().values()):
                    self.state.logs.checkpoint_high_watermarks()
            except Exception:
                log.exception("node %d: writing the high watermark checkpoint failed", self.node_id)


def _min_insync(configs: dict[str, str], default: int) -> int:
    raw = configs.get(MIN_INSYNC_REPLICAS)
    if raw is None:
        return default
    try:
        return max(int(raw), 1)
    except ValueError:
        return default


def _now_ms() -> float:
    return time.monotonic() * 1000


__all__ = ["ReplicaManager"]
