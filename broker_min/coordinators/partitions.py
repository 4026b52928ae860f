"""Which partitions of an internal topic a coordinator serves: Kafka's CoordinatorRuntime contexts.

A coordinator (groups over ``__consumer_offsets``, transactions over
``__transaction_state``) serves the keys of the partitions this node leads.
Becoming leader loads a partition (Kafka's ``onElection`` ->
``scheduleLoadOperation``): while its log is replayed, requests for its keys get
COORDINATOR_LOAD_IN_PROGRESS; once loaded they are served; a key of a partition
not loaded here gets NOT_COORDINATOR, and so does everything after resigning
(``onResignation`` -> ``scheduleUnloadOperation``).  Loads and unloads carry the
partition's leader epoch: a load at an epoch not newer than the current one is
ignored, as is an unload at an epoch not newer than the loaded one (None always
unloads: the topic went away).  On a single node every partition is loaded at
epoch 0 when the broker starts.

:func:`replay_cooperatively` replays a partition in slices, yielding to the
event loop between them, so a large log does not stall every connection while
it loads.  :func:`coordinator_write_error` is Kafka's
``CoordinatorOperationExceptionHelper`` mapping of a failed or unreplicated
write of a coordinator to what its clients are answered.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

T = TypeVar("T")

#: Seconds of replay between two yields to the event loop while a partition loads.
LOAD_SLICE_SECONDS = 0.01
#: Entries replayed between two looks at the clock.
_CLOCK_EVERY = 32
#: Seconds a coordinator's write may take to reach the ISR (Kafka's offsets.commit.timeout.ms).
WRITE_TIMEOUT_SECONDS = 5.0


class LoadState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(slots=True)
class _Owned:
    state: LoadState
    epoch: int
    token: int


class CoordinatorPartitions:
    """The partitions of ``topic`` this coordinator has loaded or is loading, with their epochs."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._owned: dict[int, _Owned] = {}
        self._tokens = itertools.count(1)

    def error(self, partition: int) -> ErrorCode | None:
        """None when ``partition`` is served here, else the error its keys are answered with."""
        owned = self._owned.get(partition)
        if owned is None:
            return ErrorCode.not_coordinator
        if owned.state is LoadState.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return None

    @property
    def active(self) -> frozenset[int]:
        """Partitions loaded and served."""
        return frozenset(p for p, o in self._owned.items() if o.state is LoadState.ACTIVE)

    @property
    def loading(self) -> frozenset[int]:
        """Partitions being loaded."""
        return frozenset(p for p, o in self._owned.items() if o.state is LoadState.LOADING)

    def epoch(self, partition: int) -> int:
        """The leader epoch ``partition`` was loaded at (the coordinator epoch of its markers); -1 if none."""
        owned = self._owned.get(partition)
        return -1 if owned is None else owned.epoch

    def begin_load(self, partition: int, epoch: int) -> int | None:
        """Start loading; a token for :meth:`finish_load`, or None when already loaded/loading at ``epoch`` or later."""
        owned = self._owned.get(partition)
        if owned is not None and owned.epoch >= epoch:
            return None
        token = next(self._tokens)
        self._owned[partition] = _Owned(LoadState.LOADING, epoch, token)
        return token

    def is_current(self, partition: int, token: int) -> bool:
        """Whether the load holding ``token`` is still wanted (no unload or newer load since)."""
        owned = self._owned.get(partition)
        return owned is not None and owned.token == token

    def finish_load(self, partition: int, token: int) -> bool:
        """The load holding ``token`` completed: serve the partition (False if it was superseded)."""
        if not self.is_current(partition, token):
            return False
        self._owned[partition].state = LoadState.ACTIVE
        return True

    def abandon(self, partition: int, token: int) -> None:
        """The load holding ``token`` failed: the partition is not served (Kafka's FAILED state)."""
        if self.is_current(partition, token):
            del self._owned[partition]

    def unload(self, partition: int, epoch: int | None = None) -> bool:
        """Stop serving ``partition`` unless it was loaded at ``epoch`` or later; whether it was dropped."""
        owned = self._owned.get(partition)
        if owned is None or (epoch is not None and owned.epoch >= epoch):
            return False
        del self._owned[partition]
        return True


async def replay_cooperatively(
    entries: Iterable[T], apply: Callable[[T], None], still_wanted: Callable[[], bool]
) -> bool:
    """Apply every entry, yielding to the loop every :data:`LOAD_SLICE_SECONDS`; False if abandoned."""
    deadline = time.monotonic() + LOAD_SLICE_SECONDS
    for count, entry in enumerate(entries, 1):
        apply(entry)
        if count % _CLOCK_EVERY == 0 and time.monotonic() >= deadline:
            await asyncio.sleep(0)
            if not still_wanted():
                return False
            deadline = time.monotonic() + LOAD_SLICE_SECONDS
    return still_wanted()


def coordinator_write_error(code: ErrorCode) -> ErrorCode:
    """What a coordinator answers when its write failed with ``code`` (Kafka's mapping)."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return code
