"""Assignors by their Kafka protocol name, for the ``partition_assignment_strategy`` setting."""

from __future__ import annotations

from ...errors import KafkaConfigError
from .base import PartitionAssignor
from .range import RangeAssignor
from .roundrobin import RoundRobinAssignor
from .sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = ["ASSIGNORS", "assignor_from_name"]

#: The built-in assignors under the names Java, librdkafka and the Python clients use.
ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def assignor_from_name(spec: str | PartitionAssignor | type[PartitionAssignor]) -> PartitionAssignor:
    """An assignor instance for a protocol name, an assignor class, or an instance (returned as is).

    Raises :class:`~kafkakit.errors.KafkaConfigError` (setting
    ``partition_assignment_strategy``) for an unknown name or a wrong type.
    """
    if isinstance(spec, PartitionAssignor):
        return spec
    if isinstance(spec, type) and issubclass(spec, PartitionAssignor):
        return spec()
    if isinstance(spec, str):
        cls = ASSIGNORS.get(spec.strip().lower())
        if cls is None:
            raise KafkaConfigError(
                "partition_assignment_strategy",
                f"unknown assignor {spec!r}; known: {', '.join(ASSIGNORS)} (or pass a PartitionAssignor)",
            )
        return cls()
    raise KafkaConfigError(
        "partition_assignment_strategy",
        f"expected an assignor name or PartitionAssignor, got {type(spec).__name__}",
    )
