"""What the request handlers ask of the replica manager in cluster mode.

:class:`~kafkakit.broker.state.ReplicaManagerHook` (in state.py) names every call BrokerState
and the handlers make; :class:`~.manager.ReplicaManager` implements it. On a single node
``state.replicas`` is None, which the handlers take to mean "behave exactly as a single-node
broker".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkakit.broker.state import ReplicaManagerHook

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

#: The replica manager as the handlers see it.
LeaderHook = ReplicaManagerHook


def cluster_hook(state: BrokerState) -> LeaderHook | None:
    """``state.replicas``: the replica manager in cluster mode, None on a single node."""
    return state.replicas
