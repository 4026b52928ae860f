"""Share group configs (Kafka's GROUP config resource, KIP-932's ``share.*`` settings) and share sessions.

Set with IncrementalAlterConfigs on resource type GROUP (32), as with Apache Kafka:

- ``share.auto.offset.reset``: ``latest`` (default) or ``earliest``, where a share-partition
  with no state starts;
- ``share.record.lock.duration.ms``, ``share.delivery.count.limit``,
  ``share.partition.max.record.locks``, ``share.session.timeout.ms``,
  ``share.heartbeat.interval.ms``: override the broker's ``group.share.*`` defaults;
- ``share.isolation.level``: ``read_uncommitted`` only (``read_committed`` is refused).

Kafka keeps group configs in the cluster metadata; broker_min keeps them in
``<data_dir>/.kafkakit-share-group-configs.json`` (written to a temporary file and renamed).
Bounds are looser than Kafka's (whose lock duration, by default, must be 15-60 s) so that tests
can use short locks.

Share sessions (KIP-932, like KIP-227 fetch sessions) are kept here too: one per (group, member),
opened by ShareFetch epoch 0, advanced by each request, closed by epoch -1.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kafkakit.broker.log.checkpoint import write_durably

if TYPE_CHECKING:
    from kafkakit.broker.config import BrokerConfig

CONFIGS_FILE = ".kafkakit-share-group-configs.json"
GROUP_RESOURCE = 32
# name -> (low, high) for integers; None for the string settings checked by hand.
_INT_BOUNDS = {
    "share.record.lock.duration.ms": (100, 3_600_000),
    "share.delivery.count.limit": (2, 10),
    "share.partition.max.record.locks": (1, 1_000_000),
    "share.session.timeout.ms": (100, 2**31 - 1),
    "share.heartbeat.interval.ms": (10, 2**31 - 1),
}
_STRINGS = {"share.auto.offset.reset": ("latest", "earliest"), "share.isolation.level": ("read_uncommitted",)}
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
MAX_SESSIONS = 2000


class ShareGroupConfigs:
    """Per-group ``share.*`` overrides, persisted as one JSON file."""

    def __init__(self, data_dir: Path, broker: BrokerConfig) -> None:
        self._path = data_dir / CONFIGS_FILE
        self._broker = broker
        self.groups: dict[str, dict[str, str]] = {}
        if self._path.exists():
            loaded = json.loads(self._path.read_text("utf-8"))
            self.groups = {str(g): {str(k): str(v) for k, v in c.items()} for g, c in loaded.items()}

    def validate(self, name: str, value: str | None) -> str | None:
        """Why ``name=value`` is not a valid share group config, or None."""
        if name in _INT_BOUNDS:
            low, high = _INT_BOUNDS[name]
            try:
                number = int(value or "")
            except ValueError:
                return f"{name} must be an integer"
            return None if low <= number <= high else f"{name} must be between {low} and {high}"
        if name in _STRINGS:
            return None if value in _STRINGS[name] else f"{name} must be one of {', '.join(_STRINGS[name])}"
        return f"unknown or unsupported group config {name!r}"

    def replace(self, group_id: str, configs: dict[str, str]) -> None:
        """Store ``group_id``'s whole override set."""
        if configs:
            self.groups[group_id] = dict(configs)
        else:
            self.groups.pop(group_id, None)
        write_durably(self._path, json.dumps(self.groups, indent=1, sort_keys=True).encode())

    def _int(self, group_id: str, name: str, default: int) -> int:
        return int(self.groups.get(group_id, {}).get(name, default))

    def lock_duration_ms(self, group_id: str) -> int:
        return self._int(group_id, "share.record.lock.duration.ms", self._broker.group_share_record_lock_duration_ms)

    def delivery_count_limit(self, group_id: str) -> int:
        return self._int(group_id, "share.delivery.count.limit", self._broker.group_share_delivery_count_limit)

    def max_record_locks(self, group_id: str) -> int:
        return self._int(
            group_id, "share.partition.max.record.locks", self._broker.group_share_partition_max_record_locks
        )

    def session_timeout_ms(self, group_id: str) -> int:
        return self._int(group_id, "share.session.timeout.ms", self._broker.group_share_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._int(group_id, "share.heartbeat.interval.ms", self._broker.group_share_heartbeat_interval_ms)

    def auto_offset_reset(self, group_id: str) -> str:
        return self.groups.get(group_id, {}).get("share.auto.offset.reset", "latest")


@dataclass(slots=True)
class ShareSession:
    """A member's share session: the partitions it fetches and the next expected epoch."""

    group_id: str
    member_id: str
    epoch: int = 1
    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)  # ordered set


class ShareSessions:
    """Every open share session, by (group, member)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._max = max_sessions

    def open(self, group_id: str, member_id: str) -> ShareSession | None:
        """A new session (replacing the member's old one); None when the cache is full."""
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= self._max:
            return None
        session = self._sessions[key] = ShareSession(group_id, member_id)
        return session

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _), s in self._sessions.items() if g == group_id]
