"""Share-group records and their acknowledgements (KIP-932).

A share consumer hands out records it has *acquired*: the broker locks each one
for this member until it is acknowledged (ACCEPT, RELEASE, REJECT), its lock is
renewed (RENEW), or the lock times out. :class:`ShareConsumerRecord` is a
:class:`~kafkakit.structs.ConsumerRecord` that also carries ``delivery_count``.
:class:`Acknowledgements` collects the acknowledgement of each offset of one
partition and turns them into the ``AcknowledgementBatches`` that ShareFetch and
ShareAcknowledge carry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkakit.errors import KafkaError
from kafkakit.structs import ConsumerRecord, TopicPartition

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "AcknowledgementResult",
    "Acknowledgements",
    "ShareConsumerRecord",
]


class AcknowledgeType(enum.IntEnum):
    """How a record of a share group was processed (the wire values of ``AcknowledgeTypes``)."""

    #: The record was processed: it is never delivered again.
    ACCEPT = 1
    #: Not processed: deliver it again (to any member), counting one more delivery.
    RELEASE = 2
    #: Cannot be processed: archive it without delivering it again.
    REJECT = 3
    #: Still being processed: renew the acquisition lock (needs ``share.renew.acknowledge.enable``).
    RENEW = 4


#: An acquired offset that holds no record (a transaction marker, a compacted record).
GAP = 0


class ShareConsumerRecord(ConsumerRecord[Any, Any]):
    """A record delivered by a share group: a :class:`ConsumerRecord` plus ``delivery_count``.

    ``delivery_count`` is 1 on the first delivery and grows each time the record is
    released (or its lock times out) and delivered again. It is an extra tuple item
    after the ConsumerRecord fields, so code that takes ConsumerRecords takes these.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, delivery_count: int = 1, **kwargs: Any) -> ShareConsumerRecord:
        base = ConsumerRecord(*args, **kwargs)
        return tuple.__new__(cls, (*base, delivery_count))

    @classmethod
    def of(cls, record: ConsumerRecord[Any, Any], delivery_count: int) -> ShareConsumerRecord:
        """``record`` with its delivery count."""
        return tuple.__new__(cls, (*record[:10], delivery_count))

    @property
    def delivery_count(self) -> int:
        """How many times this record has been delivered to the group, this time included."""
        count: int = tuple.__getitem__(self, 10)
        return count

    def _replace(self, **changes: Any) -> ShareConsumerRecord:  # type: ignore[override]
        count = changes.pop("delivery_count", self.delivery_count)
        base: ConsumerRecord[Any, Any] = ConsumerRecord._make(self[:10])._replace(**changes)
        return ShareConsumerRecord.of(base, count)

    def _asdict(self) -> dict[str, Any]:
        fields = dict(zip(ConsumerRecord._fields, self[:10], strict=True))
        fields["delivery_count"] = self.delivery_count
        return fields

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:  # type: ignore[override]
        return tuple(self[:10]), {"delivery_count": self.delivery_count}

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._asdict().items())
        return f"ShareConsumerRecord({inner})"


@dataclass(frozen=True, slots=True)
class AcknowledgementResult:
    """What the broker answered to the acknowledgements of one partition.

    ``offsets`` are the acknowledged offsets; ``error`` is None when the broker took
    them, else the typed error (e.g. InvalidRecordState when a lock had expired).
    """

    partition: TopicPartition
    offsets: tuple[int, ...]
    error: KafkaError | None


#: Called with the results of each acknowledgement commit, per partition (Java's
#: AcknowledgementCommitCallback.onComplete). Runs on the event loop; exceptions are logged.
AcknowledgementCommitCallback = Callable[[Mapping[TopicPartition, AcknowledgementResult]], Any]


class Acknowledgements:
    """The acknowledgement of each offset of one partition, not yet sent."""

    __slots__ = ("types",)

    def __init__(self) -> None:
        self.types: dict[int, int] = {}

    def __bool__(self) -> bool:
        return bool(self.types)

    def __len__(self) -> int:
        return len(self.types)

    def add(self, offset: int, ack_type: int) -> None:
        self.types[offset] = ack_type

    def merge(self, other: Acknowledgements) -> None:
        self.types.update(other.types)

    @property
    def has_renew(self) -> bool:
        return AcknowledgeType.RENEW in self.types.values()

    def offsets(self) -> tuple[int, ...]:
        return tuple(sorted(self.types))

    def batches(self) -> list[dict[str, Any]]:
        """Runs of consecutive offsets as AcknowledgementBatches: one type for a run that shares
        it, else one type per offset (what Kafka's clients send)."""
        out: list[dict[str, Any]] = []
        run: list[tuple[int, int]] = []
        for offset in sorted(self.types):
            if run and offset != run[-1][0] + 1:
                out.append(_batch(run))
                run = []
            run.append((offset, self.types[offset]))
        if run:
            out.append(_batch(run))
        return out


def _batch(run: list[tuple[int, int]]) -> dict[str, Any]:
    types = [t for _, t in run]
    same = all(t == types[0] for t in types)
    return {
        "first_offset": run[0][0],
        "last_offset": run[-1][0],
        "acknowledge_types": [types[0]] if same else types,
    }


def gaps(acquired: Iterable[tuple[int, int]], delivered: set[int]) -> list[int]:
    """Offsets of the acquired ranges ``(first, last)`` that hold no delivered record."""
    return [o for first, last in acquired for o in range(first, last + 1) if o not in delivered]
