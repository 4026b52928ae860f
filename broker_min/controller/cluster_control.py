"""Brokers on the controller: Kafka's ClusterControlManager and BrokerHeartbeatManager.

- registration (ClusterControlManager.registerBroker): the broker epoch is the offset of the
  RegisterBrokerRecord, and a registered broker starts fenced. Unlike Kafka (which amends a
  registration of the same incarnation and keeps its epoch), every registration here gets a
  new epoch; an unfenced broker that re-registers first loses its leaderships and ISR
  memberships, as if fenced. Another incarnation of a broker id with a live session is
  refused (DUPLICATE_BROKER_REGISTRATION).
- heartbeats (ReplicationControlManager.processBrokerHeartbeat with BrokerHeartbeatManager's
  states FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW): a broker is unfenced once its
  metadata offset reaches its epoch; a controlled shutdown moves its leaderships away and
  ends (SHUTDOWN_NOW) once it leads nothing and every active broker has seen that.
- sessions (BrokerHeartbeatManager.findOneStaleBroker): a broker not heard from for
  ``broker.session.timeout.ms`` is fenced. Sessions live in memory on the active controller
  only; a newly active controller treats every unfenced broker as just heard from.
- fencing and unfencing records: the Fence/UnfenceBrokerRecord with the partition changes
  :class:`~.replication_control.ReplicationControlManager` builds for them.

Like the other managers, this one builds records; the facade holds the lock and appends them.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kafkakit.broker.metadata import (
    BrokerEndpoint,
    BrokerRegistration,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataImage,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from kio.schema.errors import ErrorCode

from .api_types import ControllerError, ControllerSettings, HeartbeatReply
from .partition_change import leads_any
from .replication_control import ReplicationControlManager


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


@dataclass(slots=True)
class Heartbeat:
    """A heartbeat being processed: its state change and the records that make it."""

    reg: BrokerRegistration
    session: _Session
    metadata_offset: int
    current: _State
    following: _State
    records: list[MetadataRecord] = field(default_factory=list)


class ClusterControlManager:
    """Broker registrations, heartbeats and sessions, fencing and controlled shutdown."""

    def __init__(self, settings: ControllerSettings, replication: ReplicationControlManager) -> None:
        self.settings = settings
        self.replication = replication
        self._sessions: dict[int, _Session] = {}

    def reset_sessions(self, image: MetadataImage, now: float) -> None:
        """On activation: every unfenced broker counts as just heard from."""
        self._sessions = {b: _Session(now) for b, reg in image.brokers.items() if not reg.fenced}

    def check_broker_epoch(
        self, image: MetadataImage, broker_id: int, broker_epoch: int
    ) -> BrokerRegistration:
        """The broker's registration; STALE_BROKER_EPOCH unless ``broker_epoch`` is its current one."""
        reg = image.brokers.get(broker_id)
        if reg is None:
            raise ControllerError(ErrorCode.stale_broker_epoch, f"no registration for broker {broker_id}")
        if reg.broker_epoch != broker_epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"broker {broker_id}: expected epoch {reg.broker_epoch}, got {broker_epoch}",
            )
        return reg

    def _has_valid_session(self, reg: BrokerRegistration) -> bool:
        session = self._sessions.get(reg.broker_id)
        if reg.fenced or session is None:
            return False
        return time.monotonic() - session.last_contact <= self.settings.broker_session_timeout_ms / 1000

    # -- registration ----------------------------------------------------------------------------

    def register_broker(
        self,
        image: MetadataImage,
        expected_cluster_id: str,
        next_offset: int,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None,
    ) -> tuple[int, list[MetadataRecord]]:
        """The new broker epoch and the records registering the broker (fenced).

        ``next_offset`` is the offset the first record will get: the epoch is the offset of the
        RegisterBrokerRecord, so nothing may be appended between this call and the append.
        """
        if cluster_id != expected_cluster_id:
            raise ControllerError(
                ErrorCode.inconsistent_cluster_id,
                f"Expected cluster ID {expected_cluster_id}, but got cluster ID {cluster_id}",
            )
        if broker_id < 0:
            raise ControllerError(ErrorCode.invalid_request, f"invalid broker id {broker_id}")
        existing = image.brokers.get(broker_id)
        records: list[MetadataRecord] = []
        if existing is not None:
            if existing.incarnation_id != incarnation_id and self._has_valid_session(existing):
                raise ControllerError(
                    ErrorCode.duplicate_broker_registration,
                    "Another broker is registered with that broker id.",
                )
            if not existing.fenced:
                records += self.replication.removal_changes(image, broker_id)
        epoch = next_offset + len(records)
        records.append(RegisterBrokerRecord(broker_id, epoch, incarnation_id, tuple(endpoints), rack, True))
        return epoch, records

    def registered(self, broker_id: int) -> None:
        """The registration is written: the broker's session starts now."""
        self._sessions[broker_id] = _Session(time.monotonic())

    # -- fencing ---------------------------------------------------------------------------------

    def find_stale_broker(self, image: MetadataImage) -> BrokerRegistration | None:
        """BrokerHeartbeatManager.findOneStaleBroker: an unfenced broker whose session expired."""
        timeout = self.settings.broker_session_timeout_ms / 1000
        now = time.monotonic()
        for broker_id, reg in sorted(image.brokers.items()):
            if reg.fenced:
                continue
            session = self._sessions.setdefault(broker_id, _Session(now))
            if now - session.last_contact > timeout:
                return reg
        return None

    def fence_records(self, image: MetadataImage, reg: BrokerRegistration) -> list[MetadataRecord]:
        """Fence the broker: its leaderships and ISR memberships move away, then FenceBrokerRecord."""
        records = self.replication.removal_changes(image, reg.broker_id)
        records.append(FenceBrokerRecord(reg.broker_id, reg.broker_epoch))
        return records

    def unfence_records(self, image: MetadataImage, reg: BrokerRegistration) -> list[MetadataRecord]:
        """UnfenceBrokerRecord, then leaders for the leaderless partitions it can lead."""
        records: list[MetadataRecord] = [UnfenceBrokerRecord(reg.broker_id, reg.broker_epoch)]
        records += self.replication.unfence_changes(image, reg.broker_id)
        return records

    # -- heartbeats ------------------------------------------------------------------------------

    def heartbeat_contact(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, metadata_offset: int
    ) -> float:
        """Record a heartbeat's arrival (before waiting for the lock); the time of contact."""
        self.check_broker_epoch(image, broker_id, broker_epoch)
        now = time.monotonic()
        session = self._sessions.setdefault(broker_id, _Session(now))
        session.last_contact = now
        session.metadata_offset = metadata_offset
        return now

    def heartbeat(
        self,
        image: MetadataImage,
        broker_id: int,
        broker_epoch: int,
        metadata_offset: int,
        want_fence: bool,
        want_shut_down: bool,
        now: float,
    ) -> Heartbeat:
        """The broker's next state and the records of the change (none if it stays)."""
        reg = self.check_broker_epoch(image, broker_id, broker_epoch)
        session = self._sessions.setdefault(broker_id, _Session(now))
        current = _state_of(reg)
        following = self._next_state(
            image, reg, current, session, metadata_offset, want_fence, want_shut_down
        )
        beat = Heartbeat(reg, session, metadata_offset, current, following)
        if following is not current:
            if following is _State.UNFENCED:
                beat.records = self.unfence_records(image, reg)
            elif following is _State.CONTROLLED_SHUTDOWN:
                beat.records = [BrokerRegistrationChangeRecord(broker_id, broker_epoch, True)]
                beat.records += self.replication.removal_changes(image, broker_id)
            elif current is not _State.FENCED:  # FENCED or SHUTDOWN_NOW from a live state
                beat.records = self.fence_records(image, reg)
        return beat

    def heartbeat_written(self, beat: Heartbeat, last_offset: int) -> HeartbeatReply:
        """The heartbeat's records are written (up to ``last_offset``): its answer."""
        if beat.following is _State.CONTROLLED_SHUTDOWN and beat.current is not _State.CONTROLLED_SHUTDOWN:
            beat.session.controlled_shutdown_offset = last_offset
        beat.session.last_contact = time.monotonic()
        return HeartbeatReply(
            is_caught_up=beat.metadata_offset >= beat.reg.broker_epoch,
            is_fenced=beat.following in (_State.FENCED, _State.SHUTDOWN_NOW),
            in_controlled_shutdown=beat.following is _State.CONTROLLED_SHUTDOWN,
            should_shut_down=beat.following is _State.SHUTDOWN_NOW,
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
                return _State.CONTROLLED_SHUTDOWN if leads_any(image, reg.broker_id) else _State.SHUTDOWN_NOW
            return _State.UNFENCED
        # Controlled shutdown: done once it leads nothing and every active broker has seen that.
        if leads_any(image, reg.broker_id):
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


def _state_of(reg: BrokerRegistration) -> _State:
    if reg.fenced:
        return _State.FENCED
    return _State.CONTROLLED_SHUTDOWN if reg.in_controlled_shutdown else _State.UNFENCED
