"""Server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

An assignor maps each member (with the topic ids it subscribes to) to its target partitions,
given every subscribed topic's partition count and the previous target assignment.  Both
are pure functions.  They follow the contracts of Kafka's ``UniformAssignor`` and
``RangeAssignor`` (group-coordinator ``assignor`` package), not their exact placements:

- ``uniform``: every partition of a subscribed topic goes to one subscribed member; counts
  differ by at most one between members with the same subscription; partitions stay with
  their previous member where balance allows (sticky), so a membership change moves only
  what it must.
- ``range``: per topic, the subscribed members sorted by member id each take a contiguous
  range (the first ``partitions % members`` one more), so co-partitioned topics line up.
  Unlike Kafka's range assignor, it is not sticky.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

Partitions = dict[uuid.UUID, frozenset[int]]
#: (members -> subscribed topic ids, topic id -> partition count, previous target) -> new target
Assignor = Callable[[Mapping[str, frozenset[uuid.UUID]], Mapping[uuid.UUID, int], Mapping[str, Partitions]], dict[str, Partitions]]

UNIFORM = "uniform"
RANGE = "range"


def uniform(
    members: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Partitions],
) -> dict[str, Partitions]:
    """Balanced and sticky (see the module docstring)."""
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    taken: set[tuple[uuid.UUID, int]] = set()
    for member_id in sorted(members):
        subscribed = members[member_id]
        for topic_id, partitions in previous.get(member_id, {}).items():
            if topic_id not in subscribed or topic_id not in topics:
                continue
            for p in partitions:
                key = (topic_id, p)
                if p < topics[topic_id] and key not in taken:
                    owned[member_id].add(key)
                    taken.add(key)
    subscribers: dict[uuid.UUID, list[str]] = {
        t: sorted(m for m, subs in members.items() if t in subs) for t in topics
    }
    # Give every unowned partition to its least loaded subscriber.
    for topic_id in sorted(topics, key=str):
        candidates = subscribers[topic_id]
        if not candidates:
            continue
        for p in range(topics[topic_id]):
            if (topic_id, p) not in taken:
                best = min(candidates, key=lambda m: (len(owned[m]), m))
                owned[best].add((topic_id, p))
                taken.add((topic_id, p))
    # Move partitions from loaded members to subscribers with at least two fewer.
    moved = True
    while moved:
        moved = False
        for source in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for key in sorted(owned[source], key=lambda k: (str(k[0]), -k[1])):
                dest = min(subscribers[key[0]], key=lambda m: (len(owned[m]), m))
                if len(owned[source]) - len(owned[dest]) > 1:
                    owned[source].discard(key)
                    owned[dest].add(key)
                    moved = True
                    break
            if moved:
                break
    return {m: _grouped(keys) for m, keys in owned.items()}


def range_assignor(
    members: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, int],
    previous: Mapping[str, Partitions],
) -> dict[str, Partitions]:
    """Contiguous ranges per topic over the subscribers sorted by member id."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic_id, count in topics.items():
        subscribers = sorted(m for m, subs in members.items() if topic_id in subs)
        if not subscribers:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = quota + (1 if index < extra else 0)
            if size:
                out[member_id][topic_id] = set(range(start, start + size))
            start += size
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_assignor}


def _grouped(keys: set[tuple[uuid.UUID, int]]) -> Partitions:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, p in keys:
        out.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}
