"""What a consumer group member is configured with, and who it is in its group.

Shared by the group modules (:mod:`.coordinator`, :mod:`.offset_commits`,
:mod:`.classic_membership`) and re-exported by :mod:`.group`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafkakit.errors import KafkaConfigError

from .assignors import PartitionAssignor, assignor_from_name

#: The generation of no member: commits of a consumer outside group management carry it.
NO_GENERATION = -1

#: The group protocols a consumer speaks (``group_protocol``).
GROUP_PROTOCOLS = ("classic", "consumer")
#: The broker-side assignors of Apache Kafka's KIP-848 coordinator (``group_remote_assignor``).
REMOTE_ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Who this consumer is in its group right now (what a transactional producer
    passes to ``send_offsets_to_transaction``)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The group settings of a consumer, already validated."""

    group_id: str
    group_instance_id: str | None
    assignors: tuple[PartitionAssignor, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    leave_group_on_close: bool
    request_timeout_ms: int
    retry_backoff_ms: int
    #: How long commit(), committed() and the coordinator lookup keep retrying, each attempt
    #: bounded by request_timeout_ms (Java's default.api.timeout.ms).
    default_api_timeout_ms: int = 60000
    #: "classic" (JoinGroup/SyncGroup, :mod:`.classic_membership`) or "consumer"
    #: (KIP-848's ConsumerGroupHeartbeat, :mod:`.consumer_membership`).
    group_protocol: str = "classic"
    #: The broker-side assignor a "consumer" group member asks for (None: the broker's default).
    group_remote_assignor: str | None = None

    @property
    def api_timeout(self) -> float:
        """``default_api_timeout_ms`` in seconds, never below ``request_timeout_ms``."""
        return max(self.default_api_timeout_ms, self.request_timeout_ms) / 1000


def check_assignors(strategy: Any) -> tuple[PartitionAssignor, ...]:
    """Validate ``partition_assignment_strategy``: assignor instances, classes or names, in preference order."""
    items = [strategy] if isinstance(strategy, (str, type, PartitionAssignor)) else strategy
    if not isinstance(items, Iterable):
        raise KafkaConfigError("partition_assignment_strategy", f"expected assignors, got {strategy!r}")
    assignors = tuple(assignor_from_name(item) for item in items)
    if not assignors:
        raise KafkaConfigError("partition_assignment_strategy", "must name at least one assignor")
    names = [a.name for a in assignors]
    if len(set(names)) != len(names):
        raise KafkaConfigError("partition_assignment_strategy", f"assignor names repeat: {names}")
    return assignors
