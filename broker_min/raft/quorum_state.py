"""The ``quorum-state`` file: epoch, leader and vote, as Kafka's FileQuorumStateStore writes it.

Kafka serialises ``QuorumStateData`` (version 0) as JSON with a ``data_version`` key,
e.g. ``{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,
"currentVoters":[{"voterId":1},...],"data_version":0}``. The file is replaced
atomically (temp file, fsync, rename, fsync of the directory) so a crash leaves either
the old or the new state, and a vote is written before it is answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kafkakit.broker.log.checkpoint import write_durably

FILE_NAME = "quorum-state"


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What must survive a restart (Kafka's ElectionState): the epoch, its leader and this node's vote."""

    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1


class QuorumStateStore:
    """Reads and atomically rewrites ``<dir>/quorum-state``."""

    def __init__(self, directory: Path, voters: Iterable[int]) -> None:
        self.path = directory / FILE_NAME
        self._voters = sorted(voters)
        directory.mkdir(parents=True, exist_ok=True)

    def read(self) -> ElectionState:
        """The stored state, or epoch 0 with no leader and no vote when there is no file yet."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return ElectionState()
        return ElectionState(
            epoch=max(int(data.get("leaderEpoch", 0)), 0),
            leader_id=int(data.get("leaderId", -1)),
            voted_id=int(data.get("votedId", -1)),
        )

    def write(self, state: ElectionState) -> None:
        """Replace the file with ``state``, durably, before returning."""
        body = {
            "clusterId": "",
            "leaderId": state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self._voters],
            "data_version": 0,
        }
        write_durably(self.path, json.dumps(body))
