"""Replica placement for new partitions (the controller's ReplicaPlacer, without racks).

Kafka's rack-unaware assignment (``assignReplicasToBrokersRackUnaware``): the first
replica of partition ``p`` is broker ``(start + p) mod n`` of the sorted live brokers, so
leaders (the first replica) go round-robin and every broker leads the same number of a
topic's partitions (+-1); the followers follow the first replica at a distance that
shifts by one after every ``n`` partitions, so that followers spread too. The first
replica is the preferred leader.
"""

from __future__ import annotations

from collections.abc import Sequence


class PlacementError(ValueError):
    """The replication factor cannot be met (Kafka: InvalidReplicationFactorException)."""


def place(
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    start: int = 0,
    shift: int | None = None,
) -> list[list[int]]:
    """Replica lists for ``num_partitions`` new partitions over ``brokers`` (live broker ids).

    ``start`` picks the first partition's leader (taken modulo the broker count);
    ``shift`` the first follower distance (default: ``start``), as Kafka draws both at random.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if replication_factor < 1:
        raise PlacementError("replication factor must be at least 1")
    if replication_factor > n:
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{n} broker(s) are registered and unfenced."
        )
    first_index = start % n
    distance = (start if shift is None else shift) % max(n - 1, 1)
    out: list[list[int]] = []
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            distance += 1
        first = (first_index + p) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (distance + j) % (n - 1)) % n])
        out.append(replicas)
    return out
