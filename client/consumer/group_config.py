"""What a consumer group member is configured with, and who it is in its group.

Shared by the group modules (:mod:`.coordinator`, :mod:`.offset_commits`,
:mod:`.classic_membership`) and re-exported by :mod:`.group`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafkakit.config import INT32_MAX, check_int
from kafkakit.errors import KafkaConfigError

from .assignors import CooperativeStickyAssignor, PartitionAssignor, RangeAssignor, assignor_from_name

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


def group_config_from_settings(
    group_id: str | None,
    group_instance_id: Any,
    strategy: Any,
    session_timeout_ms: Any,
    heartbeat_interval_ms: Any,
    rebalance_timeout_ms: Any,
    max_poll_interval_ms: Any,
    enable_auto_commit: bool,
    auto_commit_interval_ms: int,
    leave_group_on_close: Any,
    request_timeout_ms: int,
    retry_backoff_ms: Any,
    default_api_timeout_ms: int,
    group_protocol: Any = "classic",
    group_remote_assignor: Any = None,
) -> GroupConfig | None:
    """Validate a consumer's group settings: its :class:`GroupConfig` (None without a group_id).

    Each problem is a :class:`KafkaConfigError` naming the setting.
    """
    if group_protocol not in GROUP_PROTOCOLS:
        raise KafkaConfigError("group_protocol", f"must be one of {GROUP_PROTOCOLS}, got {group_protocol!r}")
    if group_protocol == "consumer":
        # As the Java client: the broker assigns and times sessions out, so these mean nothing.
        for setting, value in (
            ("partition_assignment_strategy", strategy),
            ("session_timeout_ms", session_timeout_ms),
            ("heartbeat_interval_ms", heartbeat_interval_ms),
        ):
            if value is not None:
                raise KafkaConfigError(
                    setting,
                    'is a classic group protocol setting and cannot be set with group_protocol="consumer" '
                    "(the broker assigns partitions and sets the heartbeat interval and session timeout; "
                    "use group_remote_assignor and the group configs group.consumer.*)",
                )
        if group_remote_assignor is not None and group_remote_assignor not in REMOTE_ASSIGNORS:
            raise KafkaConfigError(
                "group_remote_assignor",
                f"must be None (the broker's default) or one of {REMOTE_ASSIGNORS}, got {group_remote_assignor!r}",
            )
    elif group_remote_assignor is not None:
        raise KafkaConfigError(
            "group_remote_assignor", 'needs group_protocol="consumer" (classic groups assign on the client)'
        )
    if session_timeout_ms is None:
        session_timeout_ms = 45000
    if heartbeat_interval_ms is None:
        heartbeat_interval_ms = 3000
    if group_instance_id is not None and (not isinstance(group_instance_id, str) or not group_instance_id):
        raise KafkaConfigError(
            "group_instance_id", f"must be a non-empty string or None, got {group_instance_id!r}"
        )
    if group_id is None:
        if group_instance_id is not None:
            raise KafkaConfigError("group_instance_id", "static membership needs a group_id")
        return None
    session = check_int("session_timeout_ms", session_timeout_ms, 1, INT32_MAX)
    heartbeat = check_int("heartbeat_interval_ms", heartbeat_interval_ms, 1, INT32_MAX)
    if heartbeat >= session:
        raise KafkaConfigError(
            "heartbeat_interval_ms", f"must be lower than session_timeout_ms ({heartbeat} >= {session})"
        )
    max_poll = check_int("max_poll_interval_ms", max_poll_interval_ms, 1, INT32_MAX)
    rebalance = (
        max_poll
        if rebalance_timeout_ms is None
        else check_int("rebalance_timeout_ms", rebalance_timeout_ms, 1, INT32_MAX)
    )
    if leave_group_on_close is None:
        leave_group_on_close = group_instance_id is None
    elif not isinstance(leave_group_on_close, bool):
        raise KafkaConfigError(
            "leave_group_on_close", f"must be a bool or None, got {leave_group_on_close!r}"
        )
    if strategy is None:
        strategy = (CooperativeStickyAssignor(), RangeAssignor())
    return GroupConfig(
        group_id=group_id,
        group_instance_id=group_instance_id,
        assignors=check_assignors(strategy),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        heartbeat_interval_ms=heartbeat,
        max_poll_interval_ms=max_poll,
        enable_auto_commit=enable_auto_commit,
        auto_commit_interval_ms=auto_commit_interval_ms,
        leave_group_on_close=leave_group_on_close,
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        default_api_timeout_ms=default_api_timeout_ms,
        group_protocol=group_protocol,
        group_remote_assignor=group_remote_assignor,
    )
