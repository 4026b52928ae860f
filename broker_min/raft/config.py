"""Quorum settings, under Kafka's ``controller.quorum.*`` names and with Kafka's defaults."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Kafka's defaults (QuorumConfig / KIP-595).
DEFAULT_ELECTION_TIMEOUT_MS = 1000
DEFAULT_FETCH_TIMEOUT_MS = 2000
DEFAULT_ELECTION_BACKOFF_MAX_MS = 1000
DEFAULT_REQUEST_TIMEOUT_MS = 2000
#: How long a leader holds a follower's Fetch when it has nothing new (Kafka: fetch max wait 500 ms).
DEFAULT_FETCH_MAX_WAIT_MS = 500


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of ``controller.quorum.voters``: ``id@host:port``."""

    node_id: int
    host: str
    port: int


def parse_voters(text: str) -> dict[int, Voter]:
    """Parse ``controller.quorum.voters`` (``1@127.0.0.1:9190,2@...``) into voters by id."""
    voters: dict[int, Voter] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        ident, _, address = item.partition("@")
        host, _, port = address.rpartition(":")
        if not ident or not host or not port:
            raise ValueError(f"controller.quorum.voters entry {item!r} is not id@host:port")
        voter = Voter(int(ident), host.strip("[]"), int(port))
        if voter.node_id in voters:
            raise ValueError(f"controller.quorum.voters names node {voter.node_id} twice")
        voters[voter.node_id] = voter
    if not voters:
        raise ValueError("controller.quorum.voters is empty")
    return voters


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """What one quorum node needs: its id, the voters, its directory and the timeouts (ms)."""

    node_id: int
    voters: Mapping[int, Voter]
    cluster_id: str = "kafkakit-raft"
    election_timeout_ms: int = DEFAULT_ELECTION_TIMEOUT_MS
    fetch_timeout_ms: int = DEFAULT_FETCH_TIMEOUT_MS
    election_backoff_max_ms: int = DEFAULT_ELECTION_BACKOFF_MAX_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    rng: random.Random = field(default_factory=random.Random, compare=False)

    @classmethod
    def from_properties(
        cls, node_id: int, props: Mapping[str, str], cluster_id: str = "kafkakit-raft"
    ) -> RaftConfig:
        """Build from Kafka property names (``controller.quorum.voters``, ``...election.timeout.ms``, ...)."""

        def ms(name: str, default: int) -> int:
            return int(props.get(f"controller.quorum.{name}", default))

        return cls(
            node_id=node_id,
            voters=parse_voters(props["controller.quorum.voters"]),
            cluster_id=cluster_id,
            election_timeout_ms=ms("election.timeout.ms", DEFAULT_ELECTION_TIMEOUT_MS),
            fetch_timeout_ms=ms("fetch.timeout.ms", DEFAULT_FETCH_TIMEOUT_MS),
            election_backoff_max_ms=ms("election.backoff.max.ms", DEFAULT_ELECTION_BACKOFF_MAX_MS),
            request_timeout_ms=ms("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS),
        )

    @property
    def majority(self) -> int:
        """Votes (or replicas) that make a majority of the voters."""
        return len(self.voters) // 2 + 1

    def random_election_timeout(self) -> float:
        """Seconds: uniformly in [T, 2T) for T = election timeout, as Kafka randomises it."""
        return (self.election_timeout_ms + self.rng.random() * self.election_timeout_ms) / 1000

    def random_backoff(self) -> float:
        """Seconds to wait after a lost election: uniformly in [0, election.backoff.max.ms]."""
        return self.rng.random() * self.election_backoff_max_ms / 1000
