"""What the request handlers ask of the replica manager in cluster mode.

:class:`~kafkakit.broker.state.ReplicaManagerHook` (in state.py) names what BrokerState
itself needs; Produce and Fetch need three more calls, named here by :class:`LeaderHook`.
On a single node ``state.replicas`` is None and :func:`cluster_hook` returns None, which
the handlers take to mean "behave exactly as a single-node broker".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState
    from kio.schema.errors import ErrorCode


class LeaderHook(Protocol):
    """The replica manager as the handlers see it (:class:`~.manager.ReplicaManager` implements it)."""

    def is_leader(self, topic: str, partition: int) -> bool: ...

    async def wait_committed(
        self, topic: str, partition: int, end_offset: int, timeout: float
    ) -> ErrorCode | None: ...

    def check_produce(self, topic: str, partition: int, acks: int) -> ErrorCode | None: ...

    def on_leader_append(self, topic: str, partition: int) -> None: ...

    def on_follower_fetch(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int
    ) -> ErrorCode | None: ...


def cluster_hook(state: BrokerState) -> LeaderHook | None:
    """``state.replicas`` with the handler-side calls; None on a single node.

    A cast until ReplicaManagerHook in state.py lists these calls too (the replica manager
    is the only implementation).
    """
    return cast("LeaderHook | None", state.replicas)
