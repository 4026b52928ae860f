"""The sticky assignment algorithm shared by "sticky" and "cooperative-sticky".

A port of Apache Kafka's ``AbstractStickyAssignor`` (without rack awareness,
which needs replica racks this API does not carry). Two builders, as in Java:

* the *constrained* builder when every member subscribes to the same topics:
  members keep up to their quota of owned partitions, the rest is dealt
  round-robin to members under quota;
* the *general* builder otherwise: keep every valid owned partition, assign
  the rest to the least loaded eligible member, then move partitions from
  members with 2+ more than an eligible peer until balanced, preferring
  moves that undo earlier moves (stickiness).

Where Java iterates a ``HashMap`` of members (which decides ties, e.g. who
keeps a surplus partition), this port iterates in the same order, computed
from Java's ``String.hashCode`` (:func:`java_hash_order`), so a kafkakit
leader and a Java leader produce the same assignment from the same input
(tests/test_assignors.py checks this against kafka-clients).

Deliberate differences, all in inputs Java mishandles: a member subscribed to
nothing does not hide unequal subscriptions; a claim conflict compares both
claimants' own generations (Java reads the other one's from the protocol
field, the same value for v2+ subscriptions); the highest generation is
computed per call (Java keeps it on the instance); owned partitions beyond a
topic's partition count are ignored; and a partition is only sent back to an
older owner that still subscribes to its topic.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ...errors import IllegalStateError
from ...structs import TopicPartition
from .protocol import DEFAULT_GENERATION, Subscription

__all__ = [
    "MemberData",
    "StickyResult",
    "sticky_assign",
    "partitions_transferring_ownership",
    "java_hash_order",
]


@dataclass(slots=True)
class MemberData:
    """What a member claims to own, and in which generation (``None``: unknown)."""

    partitions: list[TopicPartition]
    generation: int | None = None


@dataclass(slots=True)
class StickyResult:
    """The assignment, plus (constrained case only) the partitions that change owner.

    ``transferring`` is ``None`` when the general builder ran: the cooperative
    assignor then derives it from the members' owned partitions, as Java does.
    """

    assignment: dict[str, list[TopicPartition]]
    transferring: dict[TopicPartition, str] | None = field(default=None)


MemberDataFn = Callable[[Subscription], MemberData]


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    member_data: MemberDataFn,
) -> StickyResult:
    """Run the sticky algorithm; ``partitions_per_topic`` holds only subscribed topics with partitions."""
    if not subscriptions:
        return StickyResult({}, {})
    owned = _collect_owned_partitions(partitions_per_topic, subscriptions, member_data)
    if owned.all_subscriptions_equal:
        builder = _ConstrainedAssignmentBuilder(
            partitions_per_topic, owned.consumer_to_owned, owned.multiple_owners
        )
        return StickyResult(builder.build(), builder.transferring)
    general = _GeneralAssignmentBuilder(
        partitions_per_topic, owned.consumer_to_owned, subscriptions, member_data, owned.max_generation
    )
    return StickyResult(general.build(), None)


def partitions_transferring_ownership(
    subscriptions: Mapping[str, Subscription], assignment: Mapping[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions newly given to one member while another member must revoke them (Java's
    ``CooperativeStickyAssignor.computePartitionsTransferringOwnership``)."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for consumer, assigned in assignment.items():
        owned = set(subscriptions[consumer].owned_partitions)
        assigned_set = set(assigned)
        for tp in assigned:
            if tp not in owned:
                added[tp] = consumer
        revoked.update(owned - assigned_set)
    return {tp: consumer for tp, consumer in added.items() if tp in revoked}


# --------------------------------------------------------------------------- Java iteration order


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _java_int(h)


def _java_bucket(hash_code: int, capacity: int) -> int:
    h = hash_code & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def _java_capacity(size: int) -> int:
    """Table size of a default ``HashMap``/``HashSet`` after ``size`` insertions (load factor 0.75)."""
    capacity = 16
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def java_hash_order(keys: Iterable[str]) -> list[str]:
    """``keys`` in the order a Java ``HashMap<String, ...>`` filled in this order iterates them:
    by hash bucket, then insertion order within a bucket."""
    ordered = list(keys)
    capacity = _java_capacity(len(ordered))
    position = {key: index for index, key in enumerate(ordered)}
    return sorted(ordered, key=lambda key: (_java_bucket(java_string_hash(key), capacity), position[key]))


def _java_topic_partition_hash(tp: TopicPartition) -> int:
    return _java_int(31 * (31 + tp.partition) + java_string_hash(tp.topic))


# --------------------------------------------------------------------------- owned partitions


@dataclass(slots=True)
class _OwnedPartitions:
    all_subscriptions_equal: bool
    consumer_to_owned: dict[str, list[TopicPartition]]
    multiple_owners: set[TopicPartition]
    max_generation: int


def _collect_owned_partitions(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    member_data: MemberDataFn,
) -> _OwnedPartitions:
    """Java's ``allSubscriptionsEqual``: each member's still-valid owned partitions, with claims
    by two members resolved (higher generation wins; a tie invalidates the partition)."""
    first_topics: set[str] | None = None
    all_equal = True
    max_generation = DEFAULT_GENERATION
    consumer_to_owned: dict[str, list[TopicPartition]] = {}
    multiple_owners: set[TopicPartition] = set()
    previous_owner: dict[TopicPartition, str] = {}
    generation_of: dict[str, int] = {}

    for consumer in java_hash_order(subscriptions):
        subscription = subscriptions[consumer]
        topics = set(subscription.topics)
        if first_topics is None:
            first_topics = topics
        elif topics != first_topics:
            all_equal = False

        data = member_data(subscription)
        generation = data.generation if data.generation is not None else DEFAULT_GENERATION
        generation_of[consumer] = generation
        max_generation = max(max_generation, generation)

        owned: list[TopicPartition] = []
        consumer_to_owned[consumer] = owned
        for tp in dict.fromkeys(data.partitions):  # a member listing a partition twice owns it once
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            other = previous_owner.get(tp)
            if other is None:
                owned.append(tp)
                previous_owner[tp] = consumer
                continue
            other_generation = generation_of[other]
            if generation == other_generation:
                # Two members of one generation claim it: trust neither.
                multiple_owners.add(tp)
                _remove_if_present(consumer_to_owned[other], tp)
                previous_owner[tp] = consumer
            elif generation > other_generation:
                owned.append(tp)
                _remove_if_present(consumer_to_owned[other], tp)
                previous_owner[tp] = consumer
            # else: the other member's claim is newer and stands
    return _OwnedPartitions(all_equal, consumer_to_owned, multiple_owners, max_generation)


def _remove_if_present(partitions: list[TopicPartition], tp: TopicPartition) -> None:
    try:
        partitions.remove(tp)
    except ValueError:
        pass


def _all_partitions(partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in topics for p in range(partitions_per_topic[topic])]


# --------------------------------------------------------------------------- constrained builder


class _ConstrainedAssignmentBuilder:
    """All members subscribe to the same topics: fill everyone to ``min_quota`` and
    exactly ``total % members`` of them to ``max_quota`` (Java's ConstrainedAssignmentBuilder)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        consumer_to_owned: dict[str, list[TopicPartition]],
        multiple_owners: set[TopicPartition],
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.current_assignment = consumer_to_owned
        self.multiple_owners = multiple_owners
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.unfilled_under_min: list[str] = []
        self.unfilled_exactly_min: deque[str] = deque()
        total = sum(partitions_per_topic.values())
        members = len(consumer_to_owned)
        self.min_quota, remainder = divmod(total, members)
        self.max_quota = self.min_quota + (1 if remainder else 0)
        self.expected_over_min = remainder
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {c: [] for c in consumer_to_owned}
        self.assigned: set[TopicPartition] = set()

    def build(self) -> dict[str, list[TopicPartition]]:
        self._assign_owned_partitions()
        unassigned = [
            tp
            for tp in _all_partitions(self.partitions_per_topic, sorted(self.partitions_per_topic))
            if tp not in self.assigned
        ]
        self.unfilled_under_min.sort()
        self.unfilled_exactly_min = deque(sorted(self.unfilled_exactly_min))
        self._assign_round_robin(unassigned)
        self._verify_unfilled_members()
        return self.assignment

    def _keep(self, consumer: str, partitions: list[TopicPartition]) -> None:
        self.assignment[consumer].extend(partitions)
        self.assigned.update(partitions)

    def _assign_owned_partitions(self) -> None:
        for consumer in java_hash_order(self.current_assignment):
            owned = sorted(
                (tp for tp in self.current_assignment[consumer] if tp not in self.multiple_owners),
                key=lambda tp: (tp.partition, tp.topic),
            )
            if len(owned) < self.min_quota:
                self._keep(consumer, owned)
                self.unfilled_under_min.append(consumer)
            elif len(owned) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.unfilled_exactly_min.clear()
                self._keep(consumer, owned[: self.max_quota])
                for tp in owned[self.max_quota :]:
                    self.maybe_revoked[tp] = consumer
            else:
                self._keep(consumer, owned[: self.min_quota])
                for tp in owned[self.min_quota :]:
                    self.maybe_revoked[tp] = consumer
                if self.current_over_min < self.expected_over_min:
                    self.unfilled_exactly_min.append(consumer)

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        under = self.unfilled_under_min
        position = 0  # emulates Java's iterator over the under-quota list (with remove())
        for tp in unassigned:
            if position < len(under):
                consumer = under[position]
                position += 1
            elif not under and not self.unfilled_exactly_min:
                raise IllegalStateError("sticky assignor: no more unfilled consumers to be assigned")
            elif not under:
                consumer = self.unfilled_exactly_min.popleft()
            else:
                position = 1
                consumer = under[0]

            count = self._assign_new_partition(tp, consumer)
            if count == self.min_quota:
                position -= 1
                del under[position]
                self.unfilled_exactly_min.append(consumer)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new_partition(self, tp: TopicPartition, consumer: str) -> int:
        assigned = self.assignment[consumer]
        assigned.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != consumer) or tp in self.multiple_owners:
            self.transferring[tp] = consumer
        return len(assigned)

    def _verify_unfilled_members(self) -> None:
        if not self.unfilled_under_min:
            return
        if self.current_over_min != self.expected_over_min:
            raise IllegalStateError(
                "sticky assignor: expected members over min quota not reached but no partitions left"
            )
        for consumer in self.unfilled_under_min:
            if len(self.assignment[consumer]) != self.min_quota:
                raise IllegalStateError(f"sticky assignor: consumer {consumer!r} does not reach min quota")


# --------------------------------------------------------------------------- general builder


class _SortedConsumers:
    """Java's ``TreeSet`` of consumers ordered by (assigned partition count, member id).

    The count is captured on insertion; callers remove a consumer before
    changing its assignment and add it back afterwards, as Java does.
    """

    def __init__(self, sizes: Callable[[str], int]) -> None:
        self._size_of = sizes
        self._items: list[tuple[int, str]] = []
        self._keys: dict[str, tuple[int, str]] = {}

    def add(self, consumer: str) -> None:
        if consumer in self._keys:
            return
        key = (self._size_of(consumer), consumer)
        bisect.insort(self._items, key)
        self._keys[consumer] = key

    def remove(self, consumer: str) -> None:
        key = self._keys.pop(consumer, None)
        if key is not None:
            del self._items[bisect.bisect_left(self._items, key)]

    def first(self) -> str:
        return self._items[0][1]

    def last(self) -> str:
        return self._items[-1][1]

    def ordered(self) -> list[str]:
        return [consumer for _, consumer in self._items]


class _PartitionMovements:
    """Tracks partition moves during balancing so a move can undo an earlier one
    (Java's ``PartitionMovements``), which keeps the result sticky."""

    def __init__(self) -> None:
        # Each set of moved partitions is a dict (insertion ordered) plus the largest size it
        # reached, which fixes the Java HashSet's table size and so its iteration order.
        self.by_topic: dict[str, dict[tuple[str, str], dict[TopicPartition, None]]] = {}
        self.peak_size: dict[tuple[str, tuple[str, str]], int] = {}
        self.movements: dict[TopicPartition, tuple[str, str]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.movements.pop(tp)
        for_topic = self.by_topic[tp.topic]
        moved = for_topic[pair]
        del moved[tp]
        if not moved:
            del for_topic[pair]
            del self.peak_size[(tp.topic, pair)]
        if not for_topic:
            del self.by_topic[tp.topic]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.movements[tp] = pair
        moved = self.by_topic.setdefault(tp.topic, {}).setdefault(pair, {})
        moved[tp] = None
        key = (tp.topic, pair)
        self.peak_size[key] = max(self.peak_size.get(key, 0), len(moved))

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.movements:
            source, _destination = self._remove_record(tp)
            if source != new:  # not simply moving back where it came from
                self._add_record(tp, (source, new))
        else:
            self._add_record(tp, (old, new))

    def actual_partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        for_topic = self.by_topic.get(tp.topic)
        if for_topic is None:
            return tp
        if tp in self.movements:
            old = self.movements[tp][0]
        reverse = for_topic.get((new, old))
        if not reverse:
            return tp
        # Java takes the reverse set's first element in HashSet iteration order.
        capacity = _java_capacity(self.peak_size[(tp.topic, (new, old))])
        position = {p: index for index, p in enumerate(reverse)}
        return min(
            reverse, key=lambda p: (_java_bucket(_java_topic_partition_hash(p), capacity), position[p])
        )


class _GeneralAssignmentBuilder:
    """Members subscribe to different topics (Java's GeneralAssignmentBuilder)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        current_assignment: dict[str, list[TopicPartition]],
        subscriptions: Mapping[str, Subscription],
        member_data: MemberDataFn,
        max_generation: int,
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.subscriptions = subscriptions
        self.member_data = member_data
        self.max_generation = max_generation
        self.total_partitions = sum(partitions_per_topic.values())
        self.topic_consumers: dict[str, list[str]] = {topic: [] for topic in partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        for consumer in java_hash_order(subscriptions):
            topics = [t for t in dict.fromkeys(subscriptions[consumer].topics) if t in partitions_per_topic]
            self.consumer_topics[consumer] = topics
            for topic in topics:
                self.topic_consumers[topic].append(consumer)
            current_assignment.setdefault(consumer, [])
        self.consumer_topic_sets = {c: set(topics) for c, topics in self.consumer_topics.items()}
        self.current_assignment = current_assignment
        self.partition_consumer: dict[TopicPartition, str] = {
            tp: consumer for consumer, partitions in current_assignment.items() for tp in partitions
        }
        sorted_topics = sorted(self.topic_consumers, key=lambda t: (len(self.topic_consumers[t]), t))
        self.sorted_all_partitions = _all_partitions(partitions_per_topic, sorted_topics)
        self.sorted_consumers = _SortedConsumers(lambda c: len(self.current_assignment[c]))
        self.revocation_required = False
        self.movements = _PartitionMovements()

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned_partitions()
        unassigned = [tp for tp in self.sorted_all_partitions if tp not in assigned]
        for consumer in self.current_assignment:
            self.sorted_consumers.add(consumer)
        self._balance(previous, unassigned)
        return self.current_assignment

    # -- previous generations: where to send a partition back to first

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Owners from older generations (Java's ``prepopulateCurrentAssignments``)."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for consumer in java_hash_order(self.subscriptions):
            data = self.member_data(self.subscriptions[consumer])
            if data.generation is not None and data.generation < self.max_generation:
                generation = data.generation
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in data.partitions:
                known = previous.get(tp)
                if known is None or generation > known[1]:
                    previous[tp] = (consumer, generation)
        return previous

    def _assign_owned_partitions(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for consumer, partitions in self.current_assignment.items():
            topics = self.consumer_topic_sets[consumer]
            kept = []
            for tp in partitions:
                if tp.topic in topics:
                    kept.append(tp)
                    assigned.add(tp)
                else:
                    # The member dropped this topic: it must give the partition up.
                    self.partition_consumer.pop(tp, None)
                    self.revocation_required = True
            partitions[:] = kept
        return assigned

    # -- balance checks

    def _max_assignment_size(self, consumer: str) -> int:
        topics = self.consumer_topics[consumer]
        if len(topics) == len(self.partitions_per_topic):
            return self.total_partitions
        return sum(self.partitions_per_topic[t] for t in topics)

    def _is_balanced(self) -> bool:
        assignment = self.current_assignment
        smallest = len(assignment[self.sorted_consumers.first()])
        largest = len(assignment[self.sorted_consumers.last()])
        if smallest >= largest - 1:
            return True
        owner = {tp: consumer for consumer, partitions in assignment.items() for tp in partitions}
        for consumer in self.sorted_consumers.ordered():
            mine = assignment[consumer]
            count = len(mine)
            if count + 1 >= largest:
                continue  # nobody has 2+ more than this member (shortcut; Java checks the same condition)
            if count == self._max_assignment_size(consumer):
                continue
            mine_set = set(mine)
            for topic in self.consumer_topics[consumer]:
                for p in range(self.partitions_per_topic[topic]):
                    tp = TopicPartition(topic, p)
                    if tp in mine_set:
                        continue
                    other = owner.get(tp)
                    if other is not None and count + 1 < len(assignment[other]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: Mapping[str, list[TopicPartition]]) -> int:
        """Sum of |size(a) - size(b)| over all member pairs (0 = perfectly balanced)."""
        sizes = sorted(len(partitions) for partitions in assignment.values())
        n = len(sizes)
        return sum(size * (2 * i - n + 1) for i, size in enumerate(sizes))

    def _topic_can_move(self, topic: str) -> bool:
        return len(self.topic_consumers[topic]) >= 2

    def _consumer_can_move(self, consumer: str) -> bool:
        partitions = self.current_assignment[consumer]
        if len(partitions) < self._max_assignment_size(consumer):
            return True
        return any(self._topic_can_move(tp.topic) for tp in partitions)

    # -- assignment and balancing

    def _assign_to_least_loaded(self, tp: TopicPartition) -> bool:
        for consumer in self.sorted_consumers.ordered():
            if tp.topic in self.consumer_topic_sets[consumer]:
                self.sorted_consumers.remove(consumer)
                self.current_assignment[consumer].append(tp)
                self.partition_consumer[tp] = consumer
                self.sorted_consumers.add(consumer)
                return True
        return False

    def _balance(
        self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]
    ) -> None:
        initializing = not self.current_assignment[self.sorted_consumers.last()]
        for tp in unassigned:
            if self.topic_consumers[tp.topic]:
                self._assign_to_least_loaded(tp)

        # Only partitions with 2+ potential consumers, and members that could change, take part.
        fixed_topics = {t for t in self.topic_consumers if not self._topic_can_move(t)}
        self.sorted_all_partitions = [tp for tp in self.sorted_all_partitions if tp.topic not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp.topic not in fixed_topics]
        fixed_assignments: dict[str, list[TopicPartition]] = {}
        for consumer in self.consumer_topics:
            if not self._consumer_can_move(consumer):
                self.sorted_consumers.remove(consumer)
                fixed_assignments[consumer] = self.current_assignment.pop(consumer)

        pre_balance = {c: list(partitions) for c, partitions in self.current_assignment.items()}
        pre_balance_owners = dict(self.partition_consumer)
        if self.current_assignment:
            if not self.revocation_required:
                # First try to balance by moving only the newly assigned partitions.
                self._perform_reassignments(unassigned, previous)
            moved = self._perform_reassignments(self.sorted_all_partitions, previous)
            if (
                not initializing
                and moved
                and self._balance_score(self.current_assignment) >= self._balance_score(pre_balance)
            ):
                # Moving made nothing better: keep the sticky pre-balance assignment.
                self.current_assignment.clear()
                self.current_assignment.update(pre_balance)
                self.partition_consumer = pre_balance_owners

        for consumer, partitions in fixed_assignments.items():
            self.current_assignment[consumer] = partitions
            self.sorted_consumers.add(consumer)

    def _perform_reassignments(
        self, reassignable: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]
    ) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in reassignable:
                if self._is_balanced():
                    break
                consumer = self.partition_consumer.get(tp)
                if consumer is None or consumer not in self.current_assignment:
                    continue
                size = len(self.current_assignment[consumer])
                earlier = previous.get(tp)
                if earlier is not None:
                    earlier_owner = earlier[0]
                    if (
                        earlier_owner in self.current_assignment
                        and tp.topic in self.consumer_topic_sets[earlier_owner]
                        and size > len(self.current_assignment[earlier_owner]) + 1
                    ):
                        self._reassign(tp, earlier_owner)
                        performed = modified = True
                        continue
                for other in self.topic_consumers[tp.topic]:
                    other_partitions = self.current_assignment.get(other)
                    if other_partitions is not None and size > len(other_partitions) + 1:
                        self._reassign_to_least_loaded(tp)
                        performed = modified = True
                        break
        return performed

    def _reassign_to_least_loaded(self, tp: TopicPartition) -> None:
        for candidate in self.sorted_consumers.ordered():
            if tp.topic in self.consumer_topic_sets[candidate]:
                self._reassign(tp, candidate)
                return
        raise IllegalStateError(f"sticky assignor: no consumer for {tp}")

    def _reassign(self, tp: TopicPartition, new_consumer: str) -> None:
        consumer = self.partition_consumer[tp]
        to_move = self.movements.actual_partition_to_move(tp, consumer, new_consumer)
        self._move(to_move, new_consumer)

    def _move(self, tp: TopicPartition, new_consumer: str) -> None:
        old_consumer = self.partition_consumer[tp]
        self.sorted_consumers.remove(old_consumer)
        self.sorted_consumers.remove(new_consumer)
        self.movements.move(tp, old_consumer, new_consumer)
        self.current_assignment[old_consumer].remove(tp)
        self.current_assignment[new_consumer].append(tp)
        self.partition_consumer[tp] = new_consumer
        self.sorted_consumers.add(new_consumer)
        self.sorted_consumers.add(old_consumer)
