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

This module is the facade: activation, the lock, ``_append`` and the background task
(session expiry, leaderless partitions, preferred leader election every
``leader.imbalance.check.interval.ms`` when ``auto.leader.rebalance.enable``). The records
come from the managers, as in Kafka (metadata/src/main/java/org/apache/kafka/controller):

- :mod:`.cluster_control`: :meth:`register_broker`, :meth:`broker_heartbeat`, broker
  sessions, fencing and unfencing, controlled shutdown (ClusterControlManager,
  BrokerHeartbeatManager).
- :mod:`.replication_control`: :meth:`alter_partition`, :meth:`create_topics`,
  :meth:`delete_topics`, :meth:`create_partitions` and the partition scans of elections
  (ReplicationControlManager); :mod:`.partition_change`: one partition's leader election,
  clean, unclean or preferred, and ISR update (PartitionChangeBuilder).
- :mod:`.config_control`: :meth:`incremental_alter_configs`, topics only
  (ConfigurationControlManager).
- :mod:`.producer_ids`: :meth:`allocate_producer_ids` (ProducerIdControlManager).
- :mod:`.acl_control`: :meth:`create_acls`, :meth:`delete_acls` (AclControlManager);
  :mod:`.scram_control`: :meth:`alter_user_scram_credentials` (ScramControlManager).
- :mod:`.api_types`: the settings, errors and request/result types (re-exported here).

Not built: ELR (KIP-966), leader recovery state (an unclean leader is not marked
RECOVERING), reassignments, broker configs and features, controller registrations, quotas
and create-topic policies, racks in placement, and DescribeQuorum.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Sequence

from kafkakit.acls import AclBinding, AclBindingFilter
from kafkakit.broker.metadata import BrokerEndpoint, MetadataImage, MetadataRecord, encode
from kafkakit.broker.metadata.loader import MetadataLoader
from kafkakit.broker.raft import NotLeaderError, RaftNode, Role
from kafkakit.broker.security.authorizer import InvalidAclError

from .acl_control import AclControlManager, AclCreateResult, AclDeleteResult
from .api_types import (
    ConfigResource,
    ControllerSettings,
    CreateTopicResult,
    DeleteTopicResult,
    HeartbeatReply,
    IsrChange,
    IsrChangeResult,
    NamedResult,
    NewPartitions,
    NewTopic,
    NotControllerError,
)
from .cluster_control import ClusterControlManager
from .config_control import ConfigControlManager
from .producer_ids import ProducerIdControlManager
from .replication_control import ReplicationControlManager
from .scram_control import ScramAlterResult, ScramControlManager, ScramDeletion, ScramUpsertion

log = logging.getLogger("kafkakit.broker.controller")


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
        self._configs = ConfigControlManager(self.settings)
        self._replication = ReplicationControlManager(node_id, self.settings, self._configs, self._rng)
        self._cluster = ClusterControlManager(self.settings, self._replication)
        self._producer_ids = ProducerIdControlManager(self.settings)
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
        self._cluster.reset_sessions(self.image, now)
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
        while True:
            async with self._lock:
                self._check_active()
                image = self.image
                stale = self._cluster.find_stale_broker(image)
                if stale is None:
                    return
                log.info(
                    "controller %d: fencing broker %d, not heard from for %d ms",
                    self.node_id,
                    stale.broker_id,
                    self.settings.broker_session_timeout_ms,
                )
                await self._append(self._cluster.fence_records(image, stale))

    async def _elect_leaderless(self) -> None:
        """Give leaderless partitions a leader once one is possible (a live ISR member, or unclean)."""
        if self.image.offset == self._leaderless_scanned:
            return
        async with self._lock:
            self._check_active()
            image = self.image
            records = self._replication.leaderless_elections(image)
            self._leaderless_scanned = image.offset
            if records:
                log.info(
                    "controller %d: electing leaders of %d leaderless partitions", self.node_id, len(records)
                )
                await self._append(records)

    async def _balance_leaders(self) -> None:
        async with self._lock:
            self._check_active()
            records = self._replication.preferred_elections(self.image)
            if records:
                log.info(
                    "controller %d: preferred leader election for %d partitions", self.node_id, len(records)
                )
                await self._append(records)

    # -- brokers (cluster_control) ---------------------------------------------------------------

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
            # Kafka's broker epoch: the offset of the RegisterBrokerRecord (no await from here to append).
            epoch, records = self._cluster.register_broker(
                self.image,
                self.cluster_id,
                self.raft.log.end_offset,
                broker_id,
                cluster_id,
                incarnation_id,
                endpoints,
                rack,
            )
            await self._append(records)
            self._cluster.registered(broker_id)
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
        now = self._cluster.heartbeat_contact(self.image, broker_id, broker_epoch, current_metadata_offset)
        async with self._lock:
            self._check_active()
            beat = self._cluster.heartbeat(
                self.image, broker_id, broker_epoch, current_metadata_offset, want_fence, want_shut_down, now
            )
            last = await self._append(beat.records)
            return self._cluster.heartbeat_written(beat, last)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """A block of producer ids for a broker: (first id, count)."""
        async with self._lock:
            self._check_active()
            image = self.image
            self._cluster.check_broker_epoch(image, broker_id, broker_epoch)
            block, records = self._producer_ids.generate_next_block(image, broker_id, broker_epoch)
            await self._append(records)
            return block

    # -- partitions and topics (replication_control) ---------------------------------------------

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> list[IsrChangeResult]:
        """A partition leader's ISR changes (AlterPartition); a stale broker epoch raises."""
        async with self._lock:
            self._check_active()
            image = self.image
            self._cluster.check_broker_epoch(image, broker_id, broker_epoch)
            results, records = self._replication.alter_partition(image, broker_id, changes)
            await self._append(records)
            return self._replication.alter_partition_results(self.image, changes, results)

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool = False
    ) -> list[CreateTopicResult]:
        """Create topics (all in one batch); per-topic errors as Kafka's controller answers them."""
        async with self._lock:
            self._check_active()
            results, records = self._replication.create_topics(self.image, topics)
            if not validate_only:
                await self._append(records)
            return results

    async def delete_topics(
        self, topics: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> list[DeleteTopicResult]:
        """Delete topics named by name or by id (one of the two per entry)."""
        async with self._lock:
            self._check_active()
            results, records = self._replication.delete_topics(self.image, topics)
            await self._append(records)
            return results

    async def create_partitions(
        self, topics: Sequence[NewPartitions], validate_only: bool = False
    ) -> list[NamedResult]:
        """Add partitions to topics (CreatePartitions)."""
        async with self._lock:
            self._check_active()
            results, records = self._replication.create_partitions(self.image, topics)
            if not validate_only:
                await self._append(records)
            return results

    # -- configs (config_control) ----------------------------------------------------------------

    async def incremental_alter_configs(
        self, resources: Sequence[ConfigResource], validate_only: bool = False
    ) -> list[NamedResult]:
        """SET/DELETE/APPEND/SUBTRACT topic configs (each resource all or nothing)."""
        async with self._lock:
            self._check_active()
            results, records = self._configs.incremental_alter_configs(self.image, resources)
            if not validate_only:
                await self._append(records)
            return results

    # -- ACLs and SCRAM credentials (acl_control, scram_control) ---------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding | InvalidAclError]) -> list[AclCreateResult]:
        """Create ACLs (CreateAcls); an InvalidAclError entry is answered INVALID_REQUEST."""
        async with self._lock:
            self._check_active()
            results, records = AclControlManager().create_acls(self.image, bindings)
            await self._append(records)
            return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter | InvalidAclError]) -> list[AclDeleteResult]:
        """Delete the ACLs each filter matches (DeleteAcls), all in one batch."""
        async with self._lock:
            self._check_active()
            results, records = AclControlManager().delete_acls(self.image, filters)
            await self._append(records)
            return results

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        """Delete and set SCRAM credentials (AlterUserScramCredentials), the valid ones in one batch."""
        async with self._lock:
            self._check_active()
            results, records = ScramControlManager().alter_credentials(self.image, deletions, upsertions)
            await self._append(records)
            return results


__all__ = ["QuorumController"]
