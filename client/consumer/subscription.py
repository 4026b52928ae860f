"""What the consumer reads: a manual assignment, a topic list or a topic pattern.

The subscription is the consumer's intent; the group coordinator turns a
topic list or pattern into an assignment. The rebalance listener lives here
too: it is part of how the application subscribes.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kafkakit.errors import IllegalStateError
from kafkakit.structs import TopicPartition

_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class ConsumerRebalanceListener:
    """Callbacks around group rebalances; override the ones you need (plain or ``async def``).

    - ``on_partitions_revoked(revoked)``: partitions this member gives up
      (eager: all of them, before rejoining; cooperative: only those that
      move, after the new assignment is known). Commit their progress here.
    - ``on_partitions_assigned(assigned)``: partitions newly given to this
      member (cooperative: only the added ones; may be empty).
    - ``on_partitions_lost(lost)``: partitions this member already lost
      (session expired, fenced): committing them would fail, another member
      may own them. Defaults to calling ``on_partitions_revoked`` like Java.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Called before giving up ``revoked``."""
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """Called after receiving ``assigned``."""
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Called when ``lost`` were owned by a generation that is gone."""
        return self.on_partitions_revoked(lost)


async def call_listener(
    callback: Callable[[set[TopicPartition]], Any] | None, partitions: set[TopicPartition]
) -> None:
    """Run a listener callback, awaiting it when it is a coroutine function or returns an awaitable."""
    if callback is None:
        return
    result = callback(set(partitions))
    if inspect.isawaitable(result):
        await result


class SubscriptionType(enum.Enum):
    NONE = "none"
    TOPICS = "topics"
    PATTERN = "pattern"
    USER_ASSIGNED = "user_assigned"


class SubscriptionState:
    """The subscription of one consumer: topics or a pattern (group-managed) or a manual assignment."""

    def __init__(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: ConsumerRebalanceListener | None = None
        #: Bumped on every change so the coordinator can notice one made during a rebalance.
        self.version = 0

    @property
    def group_managed(self) -> bool:
        return self.type in (SubscriptionType.TOPICS, SubscriptionType.PATTERN)

    def subscribe_topics(self, topics: Iterable[str], listener: ConsumerRebalanceListener | None) -> None:
        checked = frozenset(_check_topic(t) for t in topics)
        if not checked:
            raise ValueError("subscribe() needs at least one topic or a pattern")
        self._check_not_user_assigned()
        self.type = SubscriptionType.TOPICS
        self.topics = checked
        self.pattern = None
        self.listener = listener
        self.version += 1

    def subscribe_pattern(
        self, pattern: str | re.Pattern[str], listener: ConsumerRebalanceListener | None
    ) -> None:
        self._check_not_user_assigned()
        try:
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        except re.error as exc:
            raise ValueError(f"bad topic pattern {pattern!r}: {exc}") from None
        self.type = SubscriptionType.PATTERN
        self.pattern = compiled
        self.topics = frozenset()  # filled from metadata by match_topics()
        self.listener = listener
        self.version += 1

    def assign_from_user(self) -> None:
        if self.group_managed:
            raise IllegalStateError("assign() cannot be mixed with subscribe(); call unsubscribe() first")
        self.type = SubscriptionType.USER_ASSIGNED

    def unsubscribe(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics = frozenset()
        self.pattern = None
        self.listener = None
        self.version += 1

    def match_topics(self, cluster_topics: Iterable[str]) -> bool:
        """For a pattern subscription: set the matching topics; True when the set changed."""
        if self.pattern is None:
            return False
        matched = frozenset(t for t in cluster_topics if self.pattern.fullmatch(t))
        if matched == self.topics:
            return False
        self.topics = matched
        return True

    def _check_not_user_assigned(self) -> None:
        if self.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError("subscribe() cannot be mixed with assign(); call unsubscribe() first")


def _check_topic(topic: Any) -> str:
    if not isinstance(topic, str) or not _TOPIC_CHARS.match(topic) or topic in (".", ".."):
        raise ValueError(f"invalid topic name {topic!r}")
    return topic


ListenerCallback = Callable[[set[TopicPartition]], Awaitable[None] | None]
