"""The quorum's state machine (Kafka's KafkaRaftClient + QuorumState and its Leader/Follower/Candidate states).

One :class:`RaftNode` per voter. It owns the ``quorum-state`` file and the log,
answers the four quorum RPCs as kio objects (:meth:`RaftNode.handle`), and runs
one driver task that does what the current role needs: wait for an election
timeout, campaign, lead (BeginQuorumEpoch, check quorum) or follow (Fetch). The
network is behind :class:`Transport`, so the broker can later route these APIs
from its controller listener instead of :mod:`.transport`'s own server.

All state transitions are synchronous (including the fsync of ``quorum-state``),
so no request handler can observe a half-made transition on the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import messages as m
from . import snapshot as snap
from .config import RaftConfig
from .log import LogEntry, RaftLog, SnapshotId, decode_entries, snapshot_ids
from .quorum_state import ElectionState, QuorumStateStore

log = logging.getLogger(__name__)


class Role(enum.Enum):
    """The roles of Kafka's QuorumState (Voted is Unattached with a vote)."""

    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


class NotLeaderError(Exception):
    """An append on a node that is not (or stopped being) the leader; the append may or may not commit."""


class NotYetSupportedError(Exception):
    """A case the quorum does not handle yet: a listener without ``on_snapshot`` on a log that
    starts from a snapshot, or a leader asking to truncate below the high watermark."""


class Transport(Protocol):
    """Sends one quorum request to a peer and returns its response (raises OSError/TimeoutError)."""

    async def send(self, peer_id: int, request: Any, timeout: float) -> Any: ...


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """The leader this node knows for its epoch (None while there is none)."""

    leader_id: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class CommittedRecord:
    """One committed entry handed to listeners."""

    offset: int
    epoch: int
    value: bytes


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot handed to listeners: the state's records as of ``end_offset`` (exclusive)."""

    end_offset: int
    epoch: int
    records: list[bytes]


Listener = Callable[[list[CommittedRecord]], None]
SnapshotListener = Callable[[Snapshot], None]


class RaftNode:
    """A voter of the metadata quorum."""

    def __init__(self, config: RaftConfig, directory: Path, transport: Transport) -> None:
        if config.node_id not in config.voters:
            raise ValueError(f"node {config.node_id} is not one of the voters (observers are not built yet)")
        self.config = config
        self.transport = transport
        self._store = QuorumStateStore(directory, config.voters)
        self.log = RaftLog(directory)
        stored = self._store.read()
        self.epoch = stored.epoch
        self.voted_id = stored.voted_id
        self.leader_id = stored.leader_id
        self.role = Role.UNATTACHED
        self._snapshot = self._recover_snapshot()
        # Entries below the snapshot's end are committed; after a restart the rest is
        # replayed to listeners once the leader tells the high watermark again.
        self.high_watermark = self.log.start_offset
        self._delivered = self.log.start_offset
        self._listeners: list[tuple[Listener, SnapshotListener | None]] = []
        self._signal = asyncio.Event()
        self._generation = 0
        loop_time = self._now()
        self._election_deadline = loop_time + config.random_election_timeout()
        self._fetch_deadline = loop_time + config.fetch_timeout_ms / 1000
        # Leader state (Kafka's LeaderState).
        self._epoch_start = 0
        self._replica_end: dict[int, int] = {}
        self._replica_seen: dict[int, float] = {}
        self._hw_sent: dict[int, int] = {}
        self._begun: set[int] = set()
        self._driver: asyncio.Task[None] | None = None
        self._stopped = False
        if self.leader_id == config.node_id:
            # A leader that restarts must not lead again without an election (Kafka: Resigned).
            self.role = Role.RESIGNED
        elif self.leader_id >= 0:
            self.role = Role.FOLLOWER

    # ----------------------------------------------------------------- public API

    def start(self) -> None:
        """Start the driver task (call from the event loop)."""
        if self._driver is None:
            now = self._now()
            self._election_deadline = now + self.config.random_election_timeout()
            self._fetch_deadline = now + self.config.fetch_timeout_ms / 1000
            self._driver = asyncio.get_running_loop().create_task(
                self._run(), name=f"raft-{self.config.node_id}"
            )

    async def stop(self, graceful: bool = True) -> None:
        """Stop; a leader stopping gracefully first resigns with EndQuorumEpoch (best effort)."""
        if graceful and self.role is Role.LEADER:
            await self.resign()
        self._stopped = True
        if self._driver is not None:
            self._driver.cancel()
            await asyncio.gather(self._driver, return_exceptions=True)
        self._wake()
        self.log.close()

    async def resign(self) -> None:
        """Give up leadership of the current epoch and tell the other voters (EndQuorumEpoch)."""
        if self.role is not Role.LEADER:
            return
        epoch = self.epoch
        others = [v for v in self.config.voters if v != self.config.node_id]
        successors = sorted(others, key=lambda v: -self._replica_end.get(v, -1))
        self._transition(Role.RESIGNED, epoch, self.config.node_id, self.voted_id)
        request = m.end_quorum_epoch_request(self.config.cluster_id, self.config.node_id, epoch, successors)
        await asyncio.gather(
            *(self._send(v, request) for v in others),
            return_exceptions=True,
        )

    def leader_and_epoch(self) -> LeaderAndEpoch:
        """The known leader (None if none) and the current epoch."""
        return LeaderAndEpoch(self.leader_id if self.leader_id >= 0 else None, self.epoch)

    async def wait_for_leader(self, timeout: float | None = None) -> LeaderAndEpoch:
        """Wait until a leader is known for the current epoch."""
        async with asyncio.timeout(timeout):
            while self.leader_id < 0 or self.role in (Role.RESIGNED, Role.UNATTACHED, Role.CANDIDATE):
                await self._wait_signal()
        return self.leader_and_epoch()

    async def append(self, values: Sequence[bytes]) -> int:
        """Append ``values`` as the leader and return the last one's offset once it is committed.

        Raises :class:`NotLeaderError` if this node is not the leader, or loses
        leadership before the entries commit (they may still commit later).
        """
        if self.role is not Role.LEADER:
            raise NotLeaderError(f"node {self.config.node_id} is not the leader: {self.leader_and_epoch()}")
        if not values:
            raise ValueError("append needs at least one record")
        generation = self._generation
        _, last = self.log.append_values(self.epoch, list(values))
        self._replica_end[self.config.node_id] = self.log.end_offset
        self._update_high_watermark()
        self._wake()
        while self.high_watermark <= last:
            if self._generation != generation or self._stopped:
                raise NotLeaderError(
                    f"node {self.config.node_id} lost leadership before offset {last} committed"
                )
            await self._wait_signal()
        return last

    def register(self, listener: Listener, on_snapshot: SnapshotListener | None = None) -> None:
        """Call ``listener`` with committed records in order: those committed so far at once, then as they commit.

        With a snapshot, ``on_snapshot`` first gets it (and again whenever a newer one
        replaces the state, e.g. installed from the leader), then ``listener`` the
        records after it. Without ``on_snapshot``, a log that starts from a snapshot
        raises :class:`NotYetSupportedError`.
        """
        if self._snapshot is not None:
            if on_snapshot is None:
                raise NotYetSupportedError("the log starts from a snapshot: register with on_snapshot")
            on_snapshot(self._read_snapshot(self._snapshot))
        self._listeners.append((listener, on_snapshot))
        done = self._committed_records(self.log.start_offset, self._delivered)
        if done:
            listener(done)

    async def snapshot(self, end_offset: int, records: Sequence[bytes]) -> SnapshotId:
        """Store ``records`` as the state as of ``end_offset`` (committed) and drop the log below it (KIP-630)."""
        if not self.log.start_offset < end_offset <= self.high_watermark:
            raise ValueError(
                f"snapshot end {end_offset} must be above the log start {self.log.start_offset} "
                f"and at most the high watermark {self.high_watermark}"
            )
        ident = SnapshotId(end_offset, self.log.entry(end_offset - 1).epoch)
        snap.write_snapshot_file(self.log.directory, ident, snap.encode_snapshot(ident, records))
        self._use_snapshot(ident)
        return ident

    def _recover_snapshot(self) -> SnapshotId | None:
        ids = snapshot_ids(self.log.directory)
        if not ids:
            return None
        latest = ids[-1]
        if latest.end_offset > self.log.start_offset:
            # A crash between writing the snapshot and restarting the log at its end.
            self.log.restart_at(latest.end_offset, latest.epoch)
        return latest

    def _use_snapshot(self, ident: SnapshotId) -> None:
        self.log.restart_at(ident.end_offset, ident.epoch)
        snap.delete_older_snapshots(self.log.directory, ident)
        self._snapshot = ident

    def _read_snapshot(self, ident: SnapshotId) -> Snapshot:
        data = (self.log.directory / ident.file_name).read_bytes()
        return Snapshot(ident.end_offset, ident.epoch, snap.decode_snapshot(data))

    async def committed(self) -> AsyncIterator[CommittedRecord]:
        """Committed records in order, from the start of the log, forever (an async iterator)."""
        queue: asyncio.Queue[CommittedRecord] = asyncio.Queue()

        def put(records: list[CommittedRecord]) -> None:
            for r in records:
                queue.put_nowait(r)

        self.register(put)
        try:
            while True:
                yield await queue.get()
        finally:
            self._listeners = [entry for entry in self._listeners if entry[0] is not put]

    # ----------------------------------------------------------------- RPC handlers

    async def handle(self, api_key: int, request: Any) -> Any:
        """Answer one quorum request (a kio object) with a kio response."""
        if api_key == m.VOTE:
            return self._handle_vote(request)
        if api_key == m.BEGIN_QUORUM_EPOCH:
            return self._handle_begin_epoch(request)
        if api_key == m.END_QUORUM_EPOCH:
            return self._handle_end_epoch(request)
        if api_key == m.FETCH_SNAPSHOT:
            return self._handle_fetch_snapshot(request)
        if api_key == m.FETCH:
            return await self._handle_fetch(request)
        raise ValueError(f"not a quorum API: {api_key}")

    def _handle_vote(self, request: Any) -> Any:
        if request.cluster_id not in (None, self.config.cluster_id):
            return m.top_error_response(m.VOTE, m.INCONSISTENT_CLUSTER_ID)
        p = m.epoch_request_partition(request)
        if p is None:
            return m.top_error_response(m.VOTE, m.UNKNOWN_TOPIC_OR_PARTITION)
        candidate, epoch = int(p.replica_id), int(p.replica_epoch)
        if epoch > self.epoch:
            # Raft resets the election timer only on a granted vote or a live leader, so a
            # stale candidate bumping epochs cannot keep an up-to-date voter from campaigning.
            keep = self._election_deadline if self.role in (Role.UNATTACHED, Role.CANDIDATE) else None
            self._transition(Role.UNATTACHED, epoch, -1, -1)
            if keep is not None:
                self._election_deadline = keep
        granted = False
        if epoch == self.epoch and candidate in self.config.voters and self.leader_id < 0:
            if self.voted_id == candidate:
                granted = True
            elif self.voted_id < 0 and self.role is Role.UNATTACHED:
                # Raft's election restriction: only a log at least as up to date as ours.
                theirs = (int(p.last_offset_epoch), int(p.last_offset))
                if theirs >= (self.log.last_epoch, self.log.end_offset):
                    self._transition(Role.UNATTACHED, epoch, -1, candidate)  # persisted before the answer
                    granted = True
            if granted:
                self._election_deadline = self._now() + self.config.random_election_timeout()
        return m.epoch_response(m.VOTE, m.NONE, self.leader_id, self.epoch, granted)

    def _accept_epoch_request(self, api_key: int, request: Any) -> tuple[Any, Any]:
        """(None, the request's partition) once its leader is observed, or (the error response, None).

        BeginQuorumEpoch and EndQuorumEpoch are checked alike: the cluster id, the one
        metadata partition, and a leader epoch no older than ours.
        """
        if request.cluster_id not in (None, self.config.cluster_id):
            return m.top_error_response(api_key, m.INCONSISTENT_CLUSTER_ID), None
        p = m.epoch_request_partition(request)
        if p is None:
            return m.top_error_response(api_key, m.UNKNOWN_TOPIC_OR_PARTITION), None
        if int(p.leader_epoch) < self.epoch:
            return m.epoch_response(api_key, m.FENCED_LEADER_EPOCH, self.leader_id, self.epoch), None
        self._observe_leader(int(p.leader_epoch), int(p.leader_id))
        return None, p

    def _handle_begin_epoch(self, request: Any) -> Any:
        error, _ = self._accept_epoch_request(m.BEGIN_QUORUM_EPOCH, request)
        if error is not None:
            return error
        return m.epoch_response(m.BEGIN_QUORUM_EPOCH, m.NONE, self.leader_id, self.epoch)

    def _handle_end_epoch(self, request: Any) -> Any:
        error, p = self._accept_epoch_request(m.END_QUORUM_EPOCH, request)
        if error is not None:
            return error
        leader = int(p.leader_id)
        if self.role is Role.FOLLOWER and self.leader_id == leader:
            # Kafka: the preferred successors campaign first, the others back off by their rank.
            successors = [int(s) for s in p.preferred_successors]
            rank = (
                successors.index(self.config.node_id)
                if self.config.node_id in successors
                else len(successors)
            )
            backoff = (rank * self.config.election_backoff_max_ms / max(len(self.config.voters), 1)) / 1000
            self._fetch_deadline = min(
                self._fetch_deadline, self._now() + backoff + self.config.random_backoff() / 10
            )
            self._wake()
        return m.epoch_response(m.END_QUORUM_EPOCH, m.NONE, self.leader_id, self.epoch)

    async def _handle_fetch(self, request: Any) -> Any:
        params = m.parse_fetch_request(request)
        if request.cluster_id not in (None, self.config.cluster_id):
            return self._fetch_error(m.INCONSISTENT_CLUSTER_ID)
        if params is None:
            return self._fetch_error(m.UNKNOWN_TOPIC_OR_PARTITION)
        if params.leader_epoch < self.epoch:
            return self._fetch_error(m.FENCED_LEADER_EPOCH)
        if params.leader_epoch > self.epoch:
            return self._fetch_error(m.UNKNOWN_LEADER_EPOCH)
        if self.role is not Role.LEADER:
            return self._fetch_error(m.NOT_LEADER_OR_FOLLOWER)
        generation = self._generation
        replica = params.replica_id
        if replica in self.config.voters:
            self._replica_seen[replica] = self._now()  # alive, even while it truncates (check quorum)
        if params.fetch_offset < self.log.start_offset and self._snapshot is not None:
            # The entries it needs are only in the snapshot now: send it there (FetchSnapshot).
            ident = (self._snapshot.end_offset, self._snapshot.epoch)
            return m.fetch_response(
                m.FetchAnswer(m.NONE, self.config.node_id, self.epoch, self.high_watermark, b"", None, ident)
            )
        diverging = self.log.diverging(params.fetch_offset, params.last_fetched_epoch)
        if diverging is not None:
            return m.fetch_response(
                m.FetchAnswer(m.NONE, self.config.node_id, self.epoch, self.high_watermark, b"", diverging)
            )
        if replica in self.config.voters and replica != self.config.node_id:
            self._replica_end[replica] = params.fetch_offset
            self._begun.add(replica)
            if self._update_high_watermark():
                self._wake()
        # Long poll: hold the fetch while there is nothing new for this replica.
        deadline = self._now() + params.max_wait_ms / 1000
        while (
            params.fetch_offset >= self.log.end_offset
            and self.high_watermark <= self._hw_sent.get(replica, -1)
            and self._generation == generation
            and not self._stopped
        ):
            remaining = deadline - self._now()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    await self._wait_signal()
            except TimeoutError:
                break
        if self._generation != generation or self.role is not Role.LEADER:
            return self._fetch_error(m.NOT_LEADER_OR_FOLLOWER)
        self._hw_sent[replica] = self.high_watermark
        records = (
            self.log.read(params.fetch_offset, 1 << 20) if params.fetch_offset < self.log.end_offset else b""
        )
        return m.fetch_response(
            m.FetchAnswer(m.NONE, self.config.node_id, self.epoch, self.high_watermark, records, None)
        )

    def _handle_fetch_snapshot(self, request: Any) -> Any:
        ask = m.parse_fetch_snapshot_request(request)

        def answer(error: int, size: int = 0, data: bytes = b"") -> Any:
            end, epoch = (ask.end_offset, ask.epoch) if ask is not None else (-1, -1)
            chunk = m.SnapshotChunk(
                error, self.leader_id, self.epoch, end, epoch, size, ask.position if ask else 0, data
            )
            return m.fetch_snapshot_response(chunk)

        if request.cluster_id not in (None, self.config.cluster_id):
            return answer(m.INCONSISTENT_CLUSTER_ID)
        if ask is None:
            return answer(m.UNKNOWN_TOPIC_OR_PARTITION)
        if ask.leader_epoch != self.epoch:
            return answer(m.FENCED_LEADER_EPOCH if ask.leader_epoch < self.epoch else m.UNKNOWN_LEADER_EPOCH)
        if self.role is not Role.LEADER:
            return answer(m.NOT_LEADER_OR_FOLLOWER)
        ident = SnapshotId(ask.end_offset, ask.epoch)
        path = self.log.directory / ident.file_name
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                if not 0 <= ask.position <= size:
                    return answer(m.POSITION_OUT_OF_RANGE, size)
                f.seek(ask.position)
                data = f.read(max(min(ask.max_bytes, 1 << 20), 1))
        except FileNotFoundError:
            return answer(m.SNAPSHOT_NOT_FOUND)
        return answer(m.NONE, size, data)

    async def _install_snapshot(self, leader: int, ident: SnapshotId, generation: int) -> bool:
        """Download snapshot ``ident`` from the leader (FetchSnapshot) and restart the log at its end."""
        data = bytearray()
        while self._generation == generation:
            ask = m.SnapshotChunkRequest(
                self.config.node_id, self.epoch, ident.end_offset, ident.epoch, len(data), 1 << 20
            )
            request = m.fetch_snapshot_request(self.config.cluster_id, ask)
            chunk = m.parse_fetch_snapshot_response(await self._send(leader, request))
            if chunk.error != m.NONE:
                self._observe_epoch(chunk.leader_epoch, chunk.leader_id)
                return False
            data += chunk.data
            if len(data) >= chunk.size:
                break
            if not chunk.data:
                return False
        if self._generation != generation:
            return False
        snap.write_snapshot_file(self.log.directory, ident, bytes(data))
        self._use_snapshot(ident)
        self.high_watermark = max(self.high_watermark, ident.end_offset)
        self._delivered = ident.end_offset
        state = self._read_snapshot(ident)
        for _, on_snapshot in list(self._listeners):
            if on_snapshot is None:
                log.error(
                    "raft node %d: a listener without on_snapshot missed snapshot %s",
                    self.config.node_id,
                    ident,
                )
                continue
            try:
                on_snapshot(state)
            except Exception:
                log.exception("raft snapshot listener failed")
        return True

    def _fetch_error(self, error: int) -> Any:
        leader = self.leader_id if self.role is not Role.RESIGNED else -1
        return m.fetch_response(m.FetchAnswer(error, leader, self.epoch, -1, b"", None))

    # ----------------------------------------------------------------- transitions

    def _transition(self, role: Role, epoch: int, leader_id: int, voted_id: int) -> None:
        """Move to ``role`` in ``epoch``, persisting the election state first when it changes."""
        if (epoch, leader_id, voted_id) != (self.epoch, self.leader_id, self.voted_id):
            self._store.write(ElectionState(epoch, leader_id, voted_id))
        log.debug(
            "node %d: %s epoch %d -> %s epoch %d leader %d voted %d",
            self.config.node_id,
            self.role.value,
            self.epoch,
            role.value,
            epoch,
            leader_id,
            voted_id,
        )
        self.role, self.epoch, self.leader_id, self.voted_id = role, epoch, leader_id, voted_id
        self._generation += 1
        now = self._now()
        self._election_deadline = now + self.config.random_election_timeout()
        self._fetch_deadline = now + self.config.fetch_timeout_ms / 1000
        self._wake()

    def _observe_leader(self, epoch: int, leader: int) -> None:
        """A peer says ``leader`` leads ``epoch`` (>= ours): follow it unless that is already so."""
        if leader == self.config.node_id:
            return
        if epoch > self.epoch or (
            epoch == self.epoch and self.role is not Role.LEADER and self.leader_id != leader
        ):
            voted = self.voted_id if epoch == self.epoch else -1
            self._transition(Role.FOLLOWER, epoch, leader, voted)

    def _observe_epoch(self, epoch: int, leader: int) -> bool:
        """React to a response naming a higher epoch (or a leader of ours); True when the role changed."""
        if epoch > self.epoch or (epoch == self.epoch and leader >= 0 and self.leader_id < 0):
            if leader >= 0 and leader != self.config.node_id:
                self._observe_leader(epoch, leader)
            elif epoch > self.epoch:
                self._transition(Role.UNATTACHED, epoch, -1, -1)
            return True
        return False

    def _become_candidate(self) -> None:
        self._transition(Role.CANDIDATE, self.epoch + 1, -1, self.config.node_id)

    def _become_leader(self) -> None:
        self._transition(Role.LEADER, self.epoch, self.config.node_id, self.config.node_id)
        self._epoch_start = self.log.end_offset
        self._replica_end = {v: -1 for v in self.config.voters}
        self._replica_seen = {v: self._now() for v in self.config.voters}
        self._hw_sent = {}
        self._begun = set()
        # Kafka's leader appends a LeaderChange control record first: the entry of its own
        # epoch whose commit also commits every earlier entry (Raft's commit rule).
        self.log.append_values(self.epoch, [b""], control=True)
        self._replica_end[self.config.node_id] = self.log.end_offset
        self._update_high_watermark()

    # ----------------------------------------------------------------- commit and delivery

    def _update_high_watermark(self) -> bool:
        """Leader: HW = the end offset a majority of voters reached, once it covers an entry of this epoch."""
        ends = sorted((self._replica_end.get(v, -1) for v in self.config.voters), reverse=True)
        candidate = ends[self.config.majority - 1]
        if candidate > self._epoch_start and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._deliver()
            return True
        return False

    def _deliver(self) -> None:
        if self._delivered >= self.high_watermark:
            return
        records = self._committed_records(self._delivered, self.high_watermark)
        self._delivered = self.high_watermark
        if records:
            for listener, _ in list(self._listeners):
                try:
                    listener(records)
                except Exception:
                    log.exception("raft listener failed")

    def _committed_records(self, start: int, end: int) -> list[CommittedRecord]:
        return [
            CommittedRecord(e.offset, e.epoch, e.value) for e in self.log.entries(start, end) if not e.control
        ]

    # ----------------------------------------------------------------- driver

    def _now(self) -> float:
        return asyncio.get_running_loop().time() if _loop_running() else 0.0

    def _wake(self) -> None:
        self._signal.set()
        self._signal = asyncio.Event()

    async def _wait_signal(self, timeout: float | None = None) -> bool:
        """Wait for any change (data, HW, role); False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._signal.wait()
        except TimeoutError:
            return False
        return True

    async def _send(self, peer: int, request: Any) -> Any:
        return await self.transport.send(peer, request, self.config.request_timeout_ms / 1000)

    async def _run(self) -> None:
        while not self._stopped:
            try:
                if self.role is Role.LEADER:
                    await self._lead()
                elif self.role is Role.FOLLOWER:
                    await self._follow()
                elif self.role is Role.CANDIDATE:
                    await self._campaign()
                else:
                    await self._await_election()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("raft node %d driver error", self.config.node_id)
                await asyncio.sleep(0.05)

    async def _await_election(self) -> None:
        generation = self._generation
        while self._generation == generation:
            remaining = self._election_deadline - self._now()
            if remaining <= 0:
                self._become_candidate()
                return
            await self._wait_signal(remaining)

    async def _campaign(self) -> None:
        generation = self._generation
        if self.config.majority == 1:
            self._become_leader()
            return
        request = m.vote_request(
            self.config.cluster_id, self.epoch, self.config.node_id, self.log.last_epoch, self.log.end_offset
        )
        others = [v for v in self.config.voters if v != self.config.node_id]
        votes = {self.config.node_id}
        rejected: set[int] = set()
        deadline = self._election_deadline

        async def ask(peer: int) -> None:
            try:
                answer = m.parse_epoch_response(await self._send(peer, request))
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                return
            if self._generation != generation:
                return
            if self._observe_epoch(answer.leader_epoch, answer.leader_id):
                return
            if answer.error == m.NONE and answer.vote_granted:
                votes.add(peer)
                if len(votes) >= self.config.majority:
                    self._become_leader()
            else:
                rejected.add(peer)
                self._wake()

        tasks = [asyncio.create_task(ask(v)) for v in others]
        try:
            while self._generation == generation:
                if len(rejected) > len(others) - self.config.majority + 1:
                    # Lost for sure: back off (election.backoff.max.ms), then try again in a new epoch.
                    await self._wait_signal(self.config.random_backoff())
                    if self._generation == generation:
                        self._become_candidate()
                    return
                remaining = deadline - self._now()
                if remaining <= 0:
                    self._become_candidate()
                    return
                await self._wait_signal(remaining)
        finally:
            for t in tasks:
                t.cancel()

    async def _lead(self) -> None:
        generation = self._generation
        request = m.begin_quorum_epoch_request(self.config.cluster_id, self.config.node_id, self.epoch)
        others = [v for v in self.config.voters if v != self.config.node_id]
        pending: dict[int, asyncio.Task[None]] = {}

        async def begin(peer: int) -> None:
            try:
                answer = m.parse_epoch_response(await self._send(peer, request))
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                return
            if self._generation != generation:
                return
            if not self._observe_epoch(answer.leader_epoch, answer.leader_id) and answer.error == m.NONE:
                self._begun.add(peer)

        # Kafka's check quorum: a leader that has not heard from a majority within
        # 1.5 x fetch.timeout.ms resigns, so a partitioned leader stops claiming the epoch.
        check_quorum = 1.5 * self.config.fetch_timeout_ms / 1000
        retry = self.config.election_timeout_ms / 2000
        try:
            while self._generation == generation:
                now = self._now()
                for peer in others:
                    if peer not in self._begun and (peer not in pending or pending[peer].done()):
                        pending[peer] = asyncio.create_task(begin(peer))
                heard = 1 + sum(1 for v in others if now - self._replica_seen.get(v, 0.0) < check_quorum)
                if heard < self.config.majority:
                    log.info(
                        "raft node %d: no quorum for %.1fs, resigning", self.config.node_id, check_quorum
                    )
                    self._transition(Role.RESIGNED, self.epoch, self.config.node_id, self.voted_id)
                    return
                await self._wait_signal(retry)
        finally:
            for t in pending.values():
                t.cancel()

    async def _follow(self) -> None:
        generation = self._generation
        leader = self.leader_id
        while self._generation == generation:
            if self._now() >= self._fetch_deadline:
                self._become_candidate()
                return
            params = m.FetchParams(
                self.config.node_id,
                self.epoch,
                self.log.end_offset,
                self.log.last_epoch,
                self.config.fetch_max_wait_ms,
            )
            request = m.fetch_request(self.config.cluster_id, params)
            timeout = min(
                self.config.request_timeout_ms / 1000 + params.max_wait_ms / 1000,
                max(self._fetch_deadline - self._now(), 0.01),
            )
            try:
                response = await self.transport.send(leader, request, timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.debug("raft node %d: fetch from %d failed: %r", self.config.node_id, leader, exc)
                await self._wait_signal(min(0.05, self.config.election_timeout_ms / 10000))
                continue
            if self._generation != generation:
                return
            answer = m.parse_fetch_response(response)
            if answer.error != m.NONE:
                log.debug("raft node %d: fetch from %d: error %d", self.config.node_id, leader, answer.error)
                if not self._observe_epoch(answer.leader_epoch, answer.leader_id):
                    await self._wait_signal(min(0.05, self.config.election_timeout_ms / 10000))
                continue
            self._fetch_deadline = self._now() + self.config.fetch_timeout_ms / 1000
            if answer.snapshot is not None:
                try:
                    await self._install_snapshot(leader, SnapshotId(*answer.snapshot), generation)
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    log.debug("raft node %d: snapshot from %d failed: %r", self.config.node_id, leader, exc)
                continue
            self._apply_fetch(answer)

    def _apply_fetch(self, answer: m.FetchAnswer) -> None:
        if answer.diverging is not None:
            epoch, end = answer.diverging
            own_epoch, own_end = self.log.end_offset_for_epoch(epoch)
            target = min(end, own_end) if epoch >= 0 else 0
            if target < self.high_watermark:
                # Committed entries never diverge in Raft; refuse rather than lose them.
                raise NotYetSupportedError(
                    f"leader asks to truncate to {target} below the high watermark {self.high_watermark}"
                )
            log.info("raft node %d: truncating %d -> %d", self.config.node_id, self.log.end_offset, target)
            self.log.truncate_to(target)
            return
        entries, _ = decode_entries(answer.records)
        fresh: list[LogEntry] = [e for e in entries if e.offset >= self.log.end_offset]
        if fresh and fresh[0].offset == self.log.end_offset:
            self.log.append(fresh)
        hw = min(answer.high_watermark, self.log.end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._deliver()
            self._wake()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
