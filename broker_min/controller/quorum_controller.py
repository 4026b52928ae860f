"""The active controller of a KRaft cluster: Kafka's QuorumController over the metadata log.

One :class:`QuorumController` runs on every quorum voter; it is *active* only while its
Raft node leads the quorum and has replayed the whole log (every entry below the end of
its own log is committed and applied to the :class:`MetadataLoader`'s image). Every call
on an inactive controller raises :class:`NotControllerError` (NOT_CONTROLLER on the wire),
and brokers then look for the new leader.

Writes are serialized by one lock: an operation reads the image, builds metadata records
and appends them to the Raft log as one batch; :meth:`RaftNode.append` returns once the
batch is committed, and by then the loader has applied it, so the next operation sees it.
A batch is atomic: a request's records all commit or none do.

What maps to what in Kafka (metadata/src/main/java/org/apache/kafka/controller):

- :meth:`register_broker` / :meth:`broker_heartbeat`: ClusterControlManager.registerBroker and
  ReplicationControlManager.processBrokerHeartbeat with BrokerHeartbeatManager's states
  (FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW). The broker epoch is the offset of
  the RegisterBrokerRecord; a broker is unfenced once its metadata offset reaches it.
  Unlike Kafka (which amends a registration of the same incarnation and keeps its epoch),
  every registration here gets a new epoch and starts fenced; an unfenced broker that
  re-registers first loses its leaderships and ISR memberships, as if fenced.
- the session check (BrokerHeartbeatManager.findOneStaleBroker): a broker not heard from for
  ``broker.session.timeout.ms`` is fenced, one per batch.
- leader election (PartitionChangeBuilder): keep a leader that is in the ISR and usable
  (registered, unfenced, not in controlled shutdown); else the first usable ISR member in
  replica order; else, when ``unclean.leader.election.enable`` (topic config over the
  controller setting), the first usable replica with the ISR reset to it; else no leader
  (-1). An ISR is never emptied: removing its last member leaves it there.
- preferred leader election (``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.ms``, a partition whose first replica is usable and in
  the ISR but not the leader gets it back.
- :meth:`alter_partition`: ReplicationControlManager.alterPartition and its checks.
- :meth:`create_topics`, :meth:`delete_topics`, :meth:`create_partitions`,
  :meth:`incremental_alter_configs` (topics only), :meth:`allocate_producer_ids`.

Not built: ELR (KIP-966), leader recovery state (an unclean leader is not marked
RECOVERING), reassignments, broker configs and features, controller registrations, quotas
and create-topic policies, racks in placement, and DescribeQuorum.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafkakit.broker.log import LogConfig
from kafkakit.broker.metadata import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    TOPIC_RESOURCE,
    BrokerEndpoint,
    BrokerRegistration,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataImage,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRegistration,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicImage,
    TopicRecord,
    UnfenceBrokerRecord,
    encode,
)
from kafkakit.broker.metadata.loader import MetadataLoader
from kafkakit.broker.raft import NotLeaderError, RaftNode, Role
from kafkakit.broker.state import topic_name_error
from kafkakit.errors import KafkaConfigError
from kio.schema.errors import ErrorCode

from .placement import PlacementError, place

log = logging.getLogger("kafkakit.broker.controller")

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
# Kafka's ConfigSource ids (DescribeConfigs / CreateTopics v5+).
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5
# Kafka's AlterConfigOp.OpType.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: Topic configs that hold lists (APPEND/SUBTRACT apply to these only).
LIST_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The controller's settings, with Kafka's defaults."""

    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    broker_heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.ms
    producer_id_block_size: int = 1000  # ProducerIdManager's block size (not configurable in Kafka)


class ControllerError(Exception):
    """A request the controller refuses, with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class NotControllerError(ControllerError):
    """This node is not the active controller (NOT_CONTROLLER): ask the quorum leader."""

    def __init__(self, message: str = "this node is not the active controller") -> None:
        super().__init__(ErrorCode.not_controller, message)


# -- request and result shapes -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """What a BrokerHeartbeat answers."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


@dataclass(slots=True)
class NewTopic:
    """One topic of a CreateTopics request (-1 = the controller's default)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    #: Manual assignment: partition index -> replicas (then both counts must be -1).
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One effective topic config as CreateTopics v5+ reports it."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(slots=True)
class CreateTopicResult:
    """The answer for one topic of a CreateTopics request."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topic_id: uuid.UUID = uuid.UUID(int=0)
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[TopicConfig] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """The answer for one topic of a DeleteTopics request."""

    name: str | None
    topic_id: uuid.UUID
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """One topic of a CreatePartitions request: the new total ``count``."""

    name: str
    count: int
    #: Replicas of each new partition, in order (None: placed by the controller).
    assignments: list[list[int]] | None = None


@dataclass(frozen=True, slots=True)
class NamedResult:
    """An error (or none) for one named item: a CreatePartitions topic, a config resource."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    resource_type: int = TOPIC_RESOURCE


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One IncrementalAlterConfigs change: SET, DELETE, APPEND or SUBTRACT."""

    name: str
    op: int
    value: str | None


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """One resource of an IncrementalAlterConfigs request."""

    resource_type: int
    name: str
    ops: list[ConfigOp]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request (``new_isr``: (broker id, broker epoch or -1))."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    """The answer for one partition of an AlterPartition request."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


class _State(enum.Enum):
    """BrokerHeartbeatManager's BrokerControlState."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(slots=True)
class _Session:
    """The active controller's view of one broker's heartbeats (in memory only)."""

    last_contact: float
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1


# -- the controller ------------------------------------------------------------------------------


class QuorumController:
    """The cluster's controller logic on one quorum voter (active only on the Raft leader)."""

    def __init__(
        self,
        node_id: int,
        raft: RaftNode,
        loader: MetadataLoader,
        settings: ControllerSettings | None = None,
        *,
        cluster_id: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.raft = raft
        self.loader = loader
        self.settings = settings or ControllerSettings()
        self.cluster_id = cluster_id if cluster_id is not None else raft.config.cluster_id
        self._rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self._active_epoch = -1
        self._sessions: dict[int, _Session] = {}
        self._placement_start = self._rng.randrange(1 << 16)
        self._next_balance = 0.0
        self._leaderless_scanned = -2
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background task (activation, session expiry, leader elections)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"controller-{self.node_id}"
            )

    async def stop(self) -> None:
        """Stop the background task; the controller stays inactive (NOT_CONTROLLER) from now on."""
        self._stopped = True
        self._active_epoch = -1
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def image(self) -> MetadataImage:
        """The metadata image this node has applied."""
        return self.loader.image

    @property
    def is_active(self) -> bool:
        """Whether this node is the active controller now (activating it if it just may be)."""
        raft = self.raft
        if raft.role is not Role.LEADER or self._stopped:
            self._active_epoch = -1
            return False
        if self._active_epoch != raft.epoch:
            self._active_epoch = -1
            # Kafka's leader tells its listeners only once they read up to its epoch start:
            # until its whole log is committed (and so applied: delivery is synchronous with
            # the high watermark), the image may miss the previous leader's records.
            if raft.high_watermark < raft.log.end_offset:
                return False
            self._activate(raft.epoch)
        return True

    def _activate(self, epoch: int) -> None:
        now = time.monotonic()
        self._active_epoch = epoch
        # A new active controller treats every unfenced broker as just heard from.
        self._sessions = {b: _Session(now) for b, reg in self.image.brokers.items() if not reg.fenced}
        self._next_balance = now + self.settings.leader_imbalance_check_interval_ms / 1000
        self._leaderless_scanned = -2
        log.info("node %d: active controller in epoch %d", self.node_id, epoch)

    def _check_active(self) -> None:
        if not self.is_active:
            leader = self.raft.leader_and_epoch().leader_id
            raise NotControllerError(f"node {self.node_id} is not the active controller (leader: {leader})")

    async def _append(self, records: Sequence[MetadataRecord]) -> int:
        """Commit ``records`` as one batch; the offset of the last (the image then holds them)."""
        if not records:
            return self.image.offset
        self._check_active()
        try:
            last = await self.raft.append([encode(r) for r in records])
        except NotLeaderError as exc:
            self._active_epoch = -1
            raise NotControllerError(str(exc)) from None
        if self.image.offset < last:
            await self.loader.wait_for_offset(last, timeout=self.settings.broker_session_timeout_ms / 1000)
        return last

    # -- background ------------------------------------------------------------------------------

    async def _run(self) -> None:
        tick = min(0.05, self.settings.broker_session_timeout_ms / 20000)
        while True:
            await asyncio.sleep(tick)
            try:
                if not self.is_active:
                    continue
                await self._fence_stale_brokers()
                await self._elect_leaderless()
                now = time.monotonic()
                if self.settings.auto_leader_rebalance_enable and now >= self._next_balance:
                    self._next_balance = now + self.settings.leader_imbalance_check_interval_ms / 1000
                    await self._balance_leaders()
            except NotControllerError:
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller %d: background task failed", self.node_id)

    async def _fence_stale_brokers(self) -> None:
        timeout = self.settings.broker_session_timeout_ms / 1000
        while True:
            async with self._lock:
                self._check_active()
                image = self.image
                now = time.monotonic()
                stale = None
                for broker_id, reg in sorted(image.brokers.items()):
                    if reg.fenced:
                        continue
                    session = self._sessions.setdefault(broker_id, _Session(now))
                    if now - session.last_contact > timeout:
                        stale = reg
                        break
                if stale is None:
                    return
                log.info(
                    "controller %d: fencing broker %d, not heard from for %d ms",
                    self.node_id,
                    stale.broker_id,
                    self.settings.broker_session_timeout_ms,
                )
                await self._append(self._fence_records(image, stale))

    async def _elect_leaderless(self) -> None:
        """Give leaderless partitions a leader once one is possible (a live ISR member, or unclean)."""
        if self.image.offset == self._leaderless_scanned:
            return
        async with self._lock:
            self._check_active()
            image = self.image
            records: list[MetadataRecord] = []
            for topic, index, part in _all_partitions(image):
                if part.leader == NO_LEADER:
                    change = self._partition_change(image, topic, index, part)
                    if change is not None:
                        records.append(change)
            self._leaderless_scanned = image.offset
            if records:
                log.info(
                    "controller %d: electing leaders of %d leaderless partitions", self.node_id, len(records)
                )
                await self._append(records)

    async def _balance_leaders(self) -> None:
        async with self._lock:
            self._check_active()
            image = self.image
            records: list[MetadataRecord] = []
            for topic, index, part in _all_partitions(image):
                if part.replicas and part.leader != part.replicas[0]:
                    change = self._partition_change(image, topic, index, part, preferred=True)
                    if change is not None:
                        records.append(change)
            if records:
                log.info(
                    "controller %d: preferred leader election for %d partitions", self.node_id, len(records)
                )
                await self._append(records)

    # -- elections -------------------------------------------------------------------------------

    def _usable(
        self, image: MetadataImage, broker_id: int, add: int = NO_LEADER, remove: int = NO_LEADER
    ) -> bool:
        """May lead or join an ISR: registered, unfenced and not shutting down (``add``/``remove`` override)."""
        if broker_id == remove:
            return False
        if broker_id == add:
            return True
        reg = image.brokers.get(broker_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    def _unclean_enabled(self, image: MetadataImage, topic: str) -> bool:
        value = image.topic_configs(topic).get(UNCLEAN_LEADER_ELECTION)
        if value is None:
            return self.settings.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _partition_change(
        self,
        image: MetadataImage,
        topic: TopicImage,
        index: int,
        part: PartitionRegistration,
        *,
        target_isr: Sequence[int] | None = None,
        remove: int = NO_LEADER,
        add: int = NO_LEADER,
        preferred: bool = False,
    ) -> PartitionChangeRecord | None:
        """Kafka's PartitionChangeBuilder: the record moving ``part`` to ``target_isr`` and a fitting leader."""
        isr = [r for r in (part.isr if target_isr is None else target_isr) if r != remove]

        def acceptable(r: int) -> bool:
            return self._usable(image, r, add, remove)

        def valid(r: int) -> bool:
            return r in isr and acceptable(r)

        unclean = False
        if preferred and part.replicas and valid(part.replicas[0]):
            leader = part.replicas[0]
        elif valid(part.leader):
            leader = part.leader
        else:
            leader = next((r for r in part.replicas if valid(r)), NO_LEADER)
            if leader == NO_LEADER and not preferred and self._unclean_enabled(image, topic.name):
                leader = next((r for r in part.replicas if acceptable(r)), NO_LEADER)
                unclean = leader != NO_LEADER
                if unclean:
                    log.warning(
                        "controller %d: unclean leader election of %d for %s-%d (data may be lost)",
                        self.node_id,
                        leader,
                        topic.name,
                        index,
                    )
        new_isr: tuple[int, ...] | None = None
        if unclean:
            new_isr = (leader,)
        elif isr and tuple(isr) != part.isr:
            new_isr = tuple(isr)  # an empty target leaves the ISR as it is (its last member stays)
        leader_field = leader if leader != part.leader else NO_LEADER_CHANGE
        if new_isr is None and leader_field == NO_LEADER_CHANGE:
            return None
        return PartitionChangeRecord(topic.topic_id, index, isr=new_isr, leader=leader_field)

    def _removal_changes(self, image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
        """Move leadership away from ``broker_id`` and drop it from every ISR."""
        out: list[MetadataRecord] = []
        for topic, index, part in _all_partitions(image):
            if broker_id in part.isr or part.leader == broker_id:
                change = self._partition_change(image, topic, index, part, remove=broker_id)
                if change is not None:
                    out.append(change)
        return out

    def _fence_records(self, image: MetadataImage, reg: BrokerRegistration) -> list[MetadataRecord]:
        records = self._removal_changes(image, reg.broker_id)
        records.append(FenceBrokerRecord(reg.broker_id, reg.broker_epoch))
        return records

    def _unfence_records(self, image: MetadataImage, reg: BrokerRegistration) -> list[MetadataRecord]:
        records: list[MetadataRecord] = [UnfenceBrokerRecord(reg.broker_id, reg.broker_epoch)]
        for topic, index, part in _all_partitions(image):
            if part.leader == NO_LEADER:
                change = self._partition_change(image, topic, index, part, add=reg.broker_id)
                if change is not None:
                    records.append(change)
        return records

    # -- brokers ---------------------------------------------------------------------------------

    def _has_valid_session(self, reg: BrokerRegistration) -> bool:
        session = self._sessions.get(reg.broker_id)
        if reg.fenced or session is None:
            return False
        return time.monotonic() - session.last_contact <= self.settings.broker_session_timeout_ms / 1000

    def _check_broker_epoch(
        self, image: MetadataImage, broker_id: int, broker_epoch: int
    ) -> BrokerRegistration:
        reg = image.brokers.get(broker_id)
        if reg is None:
            raise ControllerError(ErrorCode.stale_broker_epoch, f"no registration for broker {broker_id}")
        if reg.broker_epoch != broker_epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"broker {broker_id}: expected epoch {reg.broker_epoch}, got {broker_epoch}",
            )
        return reg

    async def register_broker(
        self,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None = None,
    ) -> int:
        """Register (or re-register) a broker, fenced; its new broker epoch."""
        async with self._lock:
            self._check_active()
            if cluster_id != self.cluster_id:
                raise ControllerError(
                    ErrorCode.inconsistent_cluster_id,
                    f"Expected cluster ID {self.cluster_id}, but got cluster ID {cluster_id}",
                )
            if broker_id < 0:
                raise ControllerError(ErrorCode.invalid_request, f"invalid broker id {broker_id}")
            image = self.image
            existing = image.brokers.get(broker_id)
            records: list[MetadataRecord] = []
            if existing is not None:
                if existing.incarnation_id != incarnation_id and self._has_valid_session(existing):
                    raise ControllerError(
                        ErrorCode.duplicate_broker_registration,
                        "Another broker is registered with that broker id.",
                    )
                if not existing.fenced:
                    records += self._removal_changes(image, broker_id)
            # Kafka's broker epoch: the offset of the RegisterBrokerRecord (no await from here to append).
            epoch = self.raft.log.end_offset + len(records)
            records.append(
                RegisterBrokerRecord(broker_id, epoch, incarnation_id, tuple(endpoints), rack, True)
            )
            await self._append(records)
            self._sessions[broker_id] = _Session(time.monotonic())
            log.info("controller %d: registered broker %d with epoch %d", self.node_id, broker_id, epoch)
            return epoch

    async def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> HeartbeatReply:
        """A broker's heartbeat: keep its session, unfence it when caught up, run its controlled shutdown."""
        self._check_active()
        # Contact counts when the heartbeat arrives, not when the lock frees up after a slow write.
        self._check_broker_epoch(self.image, broker_id, broker_epoch)
        now = time.monotonic()
        session = self._sessions.setdefault(broker_id, _Session(now))
        session.last_contact = now
        session.metadata_offset = current_metadata_offset
        async with self._lock:
            self._check_active()
            image = self.image
            reg = self._check_broker_epoch(image, broker_id, broker_epoch)
            session = self._sessions.setdefault(broker_id, _Session(now))
            current = _state_of(reg)
            following = self._next_state(
                image, reg, current, session, current_metadata_offset, want_fence, want_shut_down
            )
            records: list[MetadataRecord] = []
            if following is not current:
                if following is _State.UNFENCED:
                    records = self._unfence_records(image, reg)
                elif following is _State.CONTROLLED_SHUTDOWN:
                    records = [BrokerRegistrationChangeRecord(broker_id, broker_epoch, True)]
                    records += self._removal_changes(image, broker_id)
                elif current is not _State.FENCED:  # FENCED or SHUTDOWN_NOW from a live state
                    records = self._fence_records(image, reg)
            last = await self._append(records)
            if following is _State.CONTROLLED_SHUTDOWN and current is not _State.CONTROLLED_SHUTDOWN:
                session.controlled_shutdown_offset = last
            session.last_contact = time.monotonic()
            return HeartbeatReply(
                is_caught_up=current_metadata_offset >= reg.broker_epoch,
                is_fenced=following in (_State.FENCED, _State.SHUTDOWN_NOW),
                in_controlled_shutdown=following is _State.CONTROLLED_SHUTDOWN,
                should_shut_down=following is _State.SHUTDOWN_NOW,
            )

    def _next_state(
        self,
        image: MetadataImage,
        reg: BrokerRegistration,
        current: _State,
        session: _Session,
        offset: int,
        want_fence: bool,
        want_shut_down: bool,
    ) -> _State:
        """BrokerHeartbeatManager.calculateNextBrokerState."""
        if current is _State.FENCED:
            if want_shut_down:
                return _State.SHUTDOWN_NOW
            if not want_fence and offset >= reg.broker_epoch:
                return _State.UNFENCED
            return _State.FENCED
        if current is _State.UNFENCED:
            if want_fence:
                return _State.SHUTDOWN_NOW if want_shut_down else _State.FENCED
            if want_shut_down:
                return _State.CONTROLLED_SHUTDOWN if _leads_any(image, reg.broker_id) else _State.SHUTDOWN_NOW
            return _State.UNFENCED
        # Controlled shutdown: done once it leads nothing and every active broker has seen that.
        if _leads_any(image, reg.broker_id):
            return _State.CONTROLLED_SHUTDOWN
        if session.controlled_shutdown_offset <= self._lowest_active_offset(image, reg.broker_id):
            return _State.SHUTDOWN_NOW
        return _State.CONTROLLED_SHUTDOWN

    def _lowest_active_offset(self, image: MetadataImage, excluding: int) -> int:
        offsets = [
            self._sessions[b].metadata_offset
            for b, reg in image.brokers.items()
            if b != excluding and b in self._sessions and _state_of(reg) is _State.UNFENCED
        ]
        return min(offsets, default=2**63 - 1)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """A block of producer ids for a broker: (first id, count)."""
        async with self._lock:
            self._check_active()
            image = self.image
            self._check_broker_epoch(image, broker_id, broker_epoch)
            start = image.next_producer_id
            size = self.settings.producer_id_block_size
            await self._append([ProducerIdsRecord(broker_id, broker_epoch, start + size)])
            return start, size

    # -- partitions ------------------------------------------------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> list[IsrChangeResult]:
        """A partition leader's ISR changes (AlterPartition); a stale broker epoch raises."""
        async with self._lock:
            self._check_active()
            image = self.image
            self._check_broker_epoch(image, broker_id, broker_epoch)
            results: list[IsrChangeResult | None] = []
            records: list[MetadataRecord] = []
            for change in changes:
                topic = image.topics_by_id.get(change.topic_id)
                if topic is None:
                    results.append(
                        IsrChangeResult(change.topic_id, change.partition, ErrorCode.unknown_topic_id)
                    )
                    continue
                part = topic.partitions.get(change.partition)
                error = (
                    ErrorCode.unknown_topic_or_partition
                    if part is None
                    else self._validate_isr_change(image, broker_id, part, change)
                )
                if part is None or error is not ErrorCode.none:
                    results.append(IsrChangeResult(change.topic_id, change.partition, error))
                    continue
                record = self._partition_change(
                    image, topic, change.partition, part, target_isr=[b for b, _ in change.new_isr]
                )
                if record is not None and record.leader not in (NO_LEADER_CHANGE, broker_id):
                    # Only a reassignment could do this (not built): the leader must refetch metadata.
                    results.append(
                        IsrChangeResult(change.topic_id, change.partition, ErrorCode.new_leader_elected)
                    )
                    records.append(record)
                    continue
                if record is not None:
                    records.append(record)
                results.append(None)  # answered from the image once written
            await self._append(records)
            image = self.image
            out: list[IsrChangeResult] = []
            for change, result in zip(changes, results, strict=True):
                if result is not None:
                    out.append(result)
                    continue
                part = image.topics_by_id[change.topic_id].partitions[change.partition]
                out.append(
                    IsrChangeResult(
                        change.topic_id,
                        change.partition,
                        ErrorCode.none,
                        part.leader,
                        part.leader_epoch,
                        part.isr,
                        part.partition_epoch,
                    )
                )
            return out

    def _validate_isr_change(
        self, image: MetadataImage, broker_id: int, part: PartitionRegistration, change: IsrChange
    ) -> ErrorCode:
        """ReplicationControlManager.validateAlterPartitionData."""
        if change.leader_epoch > part.leader_epoch or change.partition_epoch > part.partition_epoch:
            return ErrorCode.not_controller  # the leader knows newer metadata than this controller
        if change.leader_epoch < part.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if broker_id != part.leader:
            return ErrorCode.invalid_request
        if change.partition_epoch < part.partition_epoch:
            return ErrorCode.invalid_update_version
        new_isr = [b for b, _ in change.new_isr]
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(part.replicas):
            return ErrorCode.invalid_request
        if part.leader not in new_isr:
            return ErrorCode.invalid_request
        for member, epoch in change.new_isr:
            reg = image.brokers.get(member)
            if reg is None or reg.fenced or reg.in_controlled_shutdown or epoch not in (-1, reg.broker_epoch):
                return ErrorCode.ineligible_replica
        return ErrorCode.none

    # -- topics ----------------------------------------------------------------------------------

    def _live_brokers(self, image: MetadataImage) -> list[int]:
        return [b.broker_id for b in image.live_brokers() if not b.in_controlled_shutdown]

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """Create topics (all in one batch); per-topic errors as Kafka's controller answers them."""
        async with self._lock:
            self._check_active()
            image = self.image
            names = [t.name for t in topics]
            records: list[MetadataRecord] = []
            results: list[CreateTopicResult] = []
            for topic in topics:
                if names.count(topic.name) > 1:
                    results.append(
                        CreateTopicResult(topic.name, ErrorCode.invalid_request, "Duplicate topic name.")
                    )
                    continue
                try:
                    result, topic_records = self._create_topic(image, topic)
                except ControllerError as exc:
                    results.append(CreateTopicResult(topic.name, exc.code, exc.message))
                    continue
                results.append(result)
                records += topic_records
            if not validate_only:
                await self._append(records)
            return results

    def _create_topic(
        self, image: MetadataImage, topic: NewTopic
    ) -> tuple[CreateTopicResult, list[MetadataRecord]]:
        reason = topic_name_error(topic.name)
        if reason is not None:
            raise ControllerError(ErrorCode.invalid_topic_exception, reason)
        if topic.name in image.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        collision = _colliding_topic(image, topic.name)
        if collision is not None:
            raise ControllerError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{topic.name}' collides with existing topic: {collision}",
            )
        configs = {k: v for k, v in topic.configs.items() if v is not None}
        effective = self._validate_topic_configs(configs)
        live = self._live_brokers(image)
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if topic.num_partitions != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            if sorted(topic.assignments) != list(range(len(topic.assignments))):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            assignment = [list(topic.assignments[i]) for i in range(len(topic.assignments))]
            self._check_manual_assignment(image, assignment, None)
        else:
            if topic.replication_factor < -1 or topic.replication_factor == 0:
                raise ControllerError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if topic.num_partitions < -1 or topic.num_partitions == 0:
                raise ControllerError(
                    ErrorCode.invalid_partitions,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            count = self.settings.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = (
                self.settings.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            assignment = self._place(live, count, rf)
        topic_id = uuid.uuid4()
        records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
        records += [ConfigRecord(TOPIC_RESOURCE, topic.name, k, v) for k, v in sorted(configs.items())]
        for index, replicas in enumerate(assignment):
            isr = tuple(r for r in replicas if self._usable(image, r))
            records.append(PartitionRecord(topic_id, index, tuple(replicas), isr, isr[0]))
        result = CreateTopicResult(
            topic.name,
            topic_id=topic_id,
            num_partitions=len(assignment),
            replication_factor=len(assignment[0]),
            configs=[
                TopicConfig(k, v, DYNAMIC_TOPIC_CONFIG if k in configs else DEFAULT_CONFIG)
                for k, v in sorted(effective.items())
            ],
        )
        return result, records

    def _place(self, live: list[int], count: int, rf: int) -> list[list[int]]:
        try:
            assignment = place(
                live, count, rf, start=self._placement_start, shift=self._rng.randrange(1 << 16)
            )
        except PlacementError as exc:
            raise ControllerError(
                ErrorCode.invalid_replication_factor, f"Unable to replicate the partition {rf} time(s): {exc}"
            ) from None
        # The next topic's leaders continue the round-robin, so leadership stays even across topics.
        self._placement_start += count
        return assignment

    def _check_manual_assignment(
        self, image: MetadataImage, assignment: list[list[int]], rf: int | None
    ) -> None:
        """ReplicationControlManager.validateManualPartitionAssignment, plus a usable replica per partition."""
        for replicas in assignment:
            if not replicas:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes an empty replica list.",
                )
            for broker in replicas:
                if broker not in image.brokers:
                    raise ControllerError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
                    )
            if len(set(replicas)) != len(replicas):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "The manual partition assignment includes a broker more than once.",
                )
            if rf is not None and len(replicas) != rf:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                    f"this is not consistent with previous partitions, which have {rf} replica(s).",
                )
            rf = len(replicas)
            if not any(self._usable(image, r) for r in replicas):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment are fenced or in controlled shutdown.",
                )

    def _validate_topic_configs(self, configs: Mapping[str, str]) -> dict[str, str]:
        """The effective configs of a topic with these overrides; INVALID_CONFIG for a bad value."""
        try:
            effective = LogConfig.from_topic_configs(dict(configs), LogConfig()).to_topic_configs()
        except KafkaConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        unclean = configs.get(UNCLEAN_LEADER_ELECTION)
        if unclean is not None and unclean.strip().lower() not in ("true", "false"):
            raise ControllerError(
                ErrorCode.invalid_config,
                f"{UNCLEAN_LEADER_ELECTION}: expected true or false, got {unclean!r}",
            )
        effective.setdefault(
            UNCLEAN_LEADER_ELECTION, str(self.settings.unclean_leader_election_enable).lower()
        )
        return effective

    async def delete_topics(
        self, topics: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> list[DeleteTopicResult]:
        """Delete topics named by name or by id (one of the two per entry)."""
        async with self._lock:
            self._check_active()
            image = self.image
            zero = uuid.UUID(int=0)
            keys = [topic_id if topic_id not in (None, zero) else name for name, topic_id in topics]
            records: list[MetadataRecord] = []
            results: list[DeleteTopicResult] = []
            for (name, topic_id), key in zip(topics, keys, strict=True):
                by_id = topic_id is not None and topic_id != zero
                if key is None:
                    results.append(
                        DeleteTopicResult(name, zero, ErrorCode.invalid_request, "Neither topic name nor id.")
                    )
                    continue
                if keys.count(key) > 1:
                    what = "id" if by_id else "name"
                    results.append(
                        DeleteTopicResult(
                            name, topic_id or zero, ErrorCode.invalid_request, f"Duplicate topic {what}."
                        )
                    )
                    continue
                found = (
                    image.topics_by_id.get(topic_id) if by_id and topic_id else image.topics.get(name or "")
                )
                if found is None:
                    code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                    results.append(DeleteTopicResult(name, topic_id or zero, code))
                    continue
                records.append(RemoveTopicRecord(found.topic_id))
                results.append(DeleteTopicResult(found.name, found.topic_id))
            await self._append(records)
            return results

    async def create_partitions(
        self, topics: Sequence[NewPartitions], validate_only: bool = False
    ) -> list[NamedResult]:
        """Add partitions to topics (CreatePartitions)."""
        async with self._lock:
            self._check_active()
            image = self.image
            names = [t.name for t in topics]
            records: list[MetadataRecord] = []
            results: list[NamedResult] = []
            for request in topics:
                if names.count(request.name) > 1:
                    results.append(
                        NamedResult(request.name, ErrorCode.invalid_request, "Duplicate topic name.")
                    )
                    continue
                try:
                    records += self._new_partitions(image, request)
                except ControllerError as exc:
                    results.append(NamedResult(request.name, exc.code, exc.message))
                    continue
                results.append(NamedResult(request.name))
            if not validate_only:
                await self._append(records)
            return results

    def _new_partitions(self, image: MetadataImage, request: NewPartitions) -> list[MetadataRecord]:
        topic = image.topics.get(request.name)
        if topic is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{request.name}' does not exist."
            )
        current = len(topic.partitions)
        if request.count < current:
            raise ControllerError(
                ErrorCode.invalid_partitions,
                f"The topic {request.name} currently has {current} partition(s); "
                f"{request.count} would not be an increase.",
            )
        if request.count == current:
            raise ControllerError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        rf = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
        added = request.count - current
        if request.assignments is not None:
            if len(request.assignments) != added:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(request.assignments)} assignment(s) were specified.",
                )
            assignment = [list(a) for a in request.assignments]
            self._check_manual_assignment(image, assignment, rf)
        else:
            assignment = self._place(self._live_brokers(image), added, rf)
        records: list[MetadataRecord] = []
        for offset, replicas in enumerate(assignment):
            isr = tuple(r for r in replicas if self._usable(image, r))
            records.append(PartitionRecord(topic.topic_id, current + offset, tuple(replicas), isr, isr[0]))
        return records

    async def incremental_alter_configs(
        self, resources: Sequence[ConfigResource], validate_only: bool = False
    ) -> list[NamedResult]:
        """SET/DELETE/APPEND/SUBTRACT topic configs (each resource all or nothing)."""
        async with self._lock:
            self._check_active()
            image = self.image
            keys = [(r.resource_type, r.name) for r in resources]
            records: list[MetadataRecord] = []
            results: list[NamedResult] = []
            for resource, key in zip(resources, keys, strict=True):
                if keys.count(key) > 1:
                    results.append(
                        NamedResult(
                            resource.name,
                            ErrorCode.invalid_request,
                            "Duplicate resource.",
                            resource.resource_type,
                        )
                    )
                    continue
                try:
                    records += self._alter_configs(image, resource)
                except ControllerError as exc:
                    results.append(NamedResult(resource.name, exc.code, exc.message, resource.resource_type))
                    continue
                results.append(NamedResult(resource.name, resource_type=resource.resource_type))
            if not validate_only:
                await self._append(records)
            return results

    def _alter_configs(self, image: MetadataImage, resource: ConfigResource) -> list[MetadataRecord]:
        if resource.resource_type != TOPIC_RESOURCE:
            raise ControllerError(ErrorCode.invalid_request, "this controller alters topic configs only")
        if resource.name not in image.topics:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{resource.name}' does not exist."
            )
        before = image.topic_configs(resource.name)
        configs = dict(before)
        defaults = self._validate_topic_configs({})
        for change in resource.ops:
            key, value = change.name, change.value
            if change.op == DELETE:
                configs.pop(key, None)
            elif value is None:
                raise ControllerError(ErrorCode.invalid_request, f"config {key!r}: a value is required")
            elif change.op == SET:
                configs[key] = value
            elif change.op in (APPEND, SUBTRACT):
                if key not in LIST_CONFIGS:
                    raise ControllerError(
                        ErrorCode.invalid_config, f"config {key!r} is not a list: it cannot be appended to"
                    )
                items = [i for i in configs.get(key, defaults.get(key, "")).split(",") if i]
                for item in (i.strip() for i in value.split(",") if i.strip()):
                    if change.op == APPEND and item not in items:
                        items.append(item)
                    elif change.op == SUBTRACT and item in items:
                        items.remove(item)
                configs[key] = ",".join(items)
            else:
                raise ControllerError(
                    ErrorCode.invalid_request, f"config {key!r}: unknown operation {change.op}"
                )
        self._validate_topic_configs(configs)
        changed = sorted(set(before) | set(configs))
        return [
            ConfigRecord(TOPIC_RESOURCE, resource.name, k, configs.get(k))
            for k in changed
            if before.get(k) != configs.get(k)
        ]


# -- helpers -------------------------------------------------------------------------------------


def _state_of(reg: BrokerRegistration) -> _State:
    if reg.fenced:
        return _State.FENCED
    return _State.CONTROLLED_SHUTDOWN if reg.in_controlled_shutdown else _State.UNFENCED


def _all_partitions(image: MetadataImage) -> list[tuple[TopicImage, int, PartitionRegistration]]:
    return [
        (topic, index, part)
        for topic in image.topics.values()
        for index, part in sorted(topic.partitions.items())
    ]


def _leads_any(image: MetadataImage, broker_id: int) -> bool:
    return any(part.leader == broker_id for _, _, part in _all_partitions(image))


def _colliding_topic(image: MetadataImage, name: str) -> str | None:
    """An existing topic whose name differs from ``name`` only in '.' vs '_' (Kafka's metrics collide)."""
    if "." not in name and "_" not in name:
        return None
    folded = name.replace(".", "_")
    for other in image.topics:
        if other != name and other.replace(".", "_") == folded:
            return other
    return None


__all__ = [
    "ConfigOp",
    "ConfigResource",
    "ControllerError",
    "ControllerSettings",
    "CreateTopicResult",
    "DeleteTopicResult",
    "HeartbeatReply",
    "IsrChange",
    "IsrChangeResult",
    "NamedResult",
    "NewPartitions",
    "NewTopic",
    "NotControllerError",
    "QuorumController",
    "TopicConfig",
]
