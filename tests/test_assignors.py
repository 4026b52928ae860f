"""Partition assignors and the consumer protocol codec (kafkakit.consumer.assignors).

Pure code: codec round trips and cross-checks with aiokafka's and
kafka-python's encoders, the examples from the Java assignors' javadoc and
unit tests, hypothesis properties (validity, balance, stickiness, the
cooperative two-phase rule), and a differential test that runs Apache
Kafka's own assignors (kafka-clients jar) on the same inputs.
"""

from __future__ import annotations

import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignorUserDataV1 as AioStickyUserData,
)
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment as AioAssignment
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata as AioMetadata
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription
from kafkakit.consumer.assignors import (
    ASSIGNORS,
    Assignment,
    ConsumerProtocolError,
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    assignor_from_name,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
)
from kafkakit.consumer.assignors.sticky_algorithm import java_hash_order, java_string_hash
from kafkakit.errors import KafkaConfigError
from kafkakit.structs import TopicPartition

from tests.brokers import ensure_kafka_jars, missing_kafka_tools

TP = TopicPartition
Partitions = dict[str, list[TopicPartition]]


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def partitions_of(result: dict[str, Assignment]) -> Partitions:
    return {member: list(a.partitions) for member, a in result.items()}


def as_sets(result: dict[str, Assignment] | Partitions) -> dict[str, set[TopicPartition]]:
    return {member: set(a.partitions if isinstance(a, Assignment) else a) for member, a in result.items()}


# =========================================================================== codec


names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
topic_partitions = st.lists(
    st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)), max_size=8, unique=True
)
subscriptions_st = st.builds(
    Subscription,
    topics=st.lists(names, max_size=6, unique=True),
    user_data=st.none() | st.binary(max_size=40),
    owned_partitions=topic_partitions,
    generation_id=st.integers(-1, 2**31 - 1),
    rack_id=st.none() | names,
)
assignments_st = st.builds(
    Assignment, partitions=topic_partitions, user_data=st.none() | st.binary(max_size=40)
)


def expected_subscription(sub: Subscription, version: int) -> Subscription:
    """What a reader recovers from ``sub`` written at ``version`` (sorted, version's fields only)."""
    return Subscription(
        topics=sorted(sub.topics),
        user_data=sub.user_data,
        owned_partitions=sorted(sub.owned_partitions) if version >= 1 else [],
        generation_id=sub.generation_id if version >= 2 else -1,
        rack_id=sub.rack_id if version >= 3 else None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(sub=subscriptions_st)
def test_subscription_round_trips_at_every_version(version: int, sub: Subscription) -> None:
    data = encode_subscription(sub, version)
    assert struct.unpack_from(">h", data)[0] == version
    assert decode_subscription(data) == expected_subscription(sub, version)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(assignment=assignments_st)
def test_assignment_round_trips_at_every_version(version: int, assignment: Assignment) -> None:
    data = encode_assignment(assignment, version)
    decoded = decode_assignment(data)
    assert decoded.user_data == assignment.user_data
    # Partitions come back grouped by topic (first-seen topic order), as Java writes them.
    assert Counter(decoded.partitions) == Counter(assignment.partitions)
    topics_in_order = list(dict.fromkeys(t for t, _ in assignment.partitions))
    assert decoded.partitions == [p for t in topics_in_order for p in assignment.partitions if p.topic == t]


def test_subscription_bytes_match_the_schema_layout() -> None:
    sub = Subscription(["b", "a"], b"\x01", [tp("a", 2), tp("a", 1)], generation_id=7, rack_id="r1")
    assert encode_subscription(sub, 3) == (
        b"\x00\x03"  # version
        + b"\x00\x00\x00\x02"
        + b"\x00\x01a"
        + b"\x00\x01b"  # topics, sorted
        + b"\x00\x00\x00\x01\x01"  # user data
        + b"\x00\x00\x00\x01"
        + b"\x00\x01a"
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x01\x00\x00\x00\x02"
        + b"\x00\x00\x00\x07"  # generation
        + b"\x00\x02r1"  # rack
    )
    assert encode_subscription(Subscription([]), 0) == b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"


def test_newer_versions_decode_with_the_highest_known_schema_and_trailing_fields_are_ignored() -> None:
    sub = Subscription(["t"], None, [tp("t", 0)], generation_id=3, rack_id="rack")
    v3 = encode_subscription(sub, 3)
    v9 = b"\x00\x09" + v3[2:] + b"\x00\x00\x00\x2a\x00"  # a future version appends fields
    assert decode_subscription(v9) == decode_subscription(v3) == expected_subscription(sub, 3)
    assignment = encode_assignment(Assignment([tp("t", 1)], b"u"), 3)
    assert decode_assignment(b"\x00\x07" + assignment[2:] + b"\xff\xff") == Assignment([tp("t", 1)], b"u")
    # An older member's v0 metadata followed by junk still decodes.
    assert decode_subscription(encode_subscription(sub, 0) + b"junk").topics == ["t"]


def test_decoders_accept_any_bytes_like_buffer() -> None:
    sub = Subscription(["t"], b"ud", [tp("t", 1)], 3, "r")
    data = encode_subscription(sub)
    for buffer in (bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert decode_subscription(buffer) == sub
    assignment = Assignment([tp("t", 1)], b"u")
    assert decode_assignment(bytearray(encode_assignment(assignment))) == assignment
    assert decode_sticky_user_data(memoryview(encode_sticky_user_data([tp("t", 1)], 2))).generation == 2


def test_empty_rack_reads_as_none_as_in_java() -> None:
    assert decode_subscription(encode_subscription(Subscription(["t"], rack_id=""), 3)).rack_id is None


def test_empty_assignment_bytes_mean_an_empty_assignment() -> None:
    assert decode_assignment(b"") == Assignment([], None)
    assert decode_assignment(encode_assignment(Assignment())) == Assignment([], None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff\xff\x00\x00\x00\x00",
        b"\x00\x00\x00\x00\x00\x05\x00",
        b"\x00\x03\x00\x00\x00\x01\x00\x05ab",
    ],
)
def test_malformed_subscriptions_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


@pytest.mark.parametrize(
    "data", [b"\x00", b"\xff\xfe\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01\x00\x03ab"]
)
def test_malformed_assignments_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


@pytest.mark.parametrize("version", [-1, 4])
def test_writing_an_unknown_version_is_refused(version: int) -> None:
    with pytest.raises(ConsumerProtocolError):
        encode_subscription(Subscription(["t"]), version)
    with pytest.raises(ConsumerProtocolError):
        encode_assignment(Assignment(), version)


# --- aiokafka / kafka-python interop


@given(topics=st.lists(names, max_size=5, unique=True), user_data=st.binary(max_size=20))
def test_aiokafka_metadata_decodes_and_ours_decodes_in_aiokafka(topics: list[str], user_data: bytes) -> None:
    theirs = AioMetadata(0, topics, user_data).encode()
    assert decode_subscription(theirs) == Subscription(topics, user_data)
    # aiokafka reads only the v0 fields and ignores the rest, so our v3 is readable there.
    ours = encode_subscription(Subscription(topics, user_data, [tp("x", 1)], 5, "r"), 3)
    decoded = AioMetadata.decode(ours)
    assert (decoded.subscription, decoded.user_data) == (sorted(topics), user_data)


@given(assignment=assignments_st.filter(lambda a: a.user_data is not None))
def test_aiokafka_assignment_interop(assignment: Assignment) -> None:
    grouped: dict[str, list[int]] = {}
    for topic, partition in assignment.partitions:
        grouped.setdefault(topic, []).append(partition)
    theirs = AioAssignment(0, list(grouped.items()), assignment.user_data).encode()
    decoded = decode_assignment(theirs)
    assert Counter(decoded.partitions) == Counter(assignment.partitions)
    assert decoded.user_data == assignment.user_data
    back = AioAssignment.decode(encode_assignment(assignment, 3))
    assert Counter(back.partitions()) == Counter(assignment.partitions)
    assert back.user_data == assignment.user_data


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(sub=subscriptions_st)
def test_kafka_python_subscription_interop(version: int, sub: Subscription) -> None:
    expected = expected_subscription(sub, version)
    theirs = KpSubscription(
        version=version,
        topics=expected.topics,
        user_data=sub.user_data,
        owned_partitions=[
            KpSubscription.TopicPartition(
                topic=topic, partitions=[p for t, p in expected.owned_partitions if t == topic]
            )
            for topic in dict.fromkeys(t for t, _ in expected.owned_partitions)
        ],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    ).encode()
    assert theirs == encode_subscription(sub, version)  # byte for byte
    assert decode_subscription(theirs) == expected
    back = KpSubscription.decode(encode_subscription(sub, version))
    assert back.topics == expected.topics and back.user_data == sub.user_data
    if version >= 1:
        assert [
            TP(t.topic, p) for t in back.owned_partitions for p in t.partitions
        ] == expected.owned_partitions
    if version >= 2:
        assert back.generation_id == sub.generation_id
    if version >= 3:
        assert back.rack_id == sub.rack_id


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(assignment=assignments_st)
def test_kafka_python_assignment_interop(version: int, assignment: Assignment) -> None:
    grouped: dict[str, list[int]] = {}
    for topic, partition in assignment.partitions:
        grouped.setdefault(topic, []).append(partition)
    theirs = KpAssignment(
        version=version,
        assigned_partitions=[
            KpAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in grouped.items()
        ],
        user_data=assignment.user_data,
    ).encode()
    assert theirs == encode_assignment(assignment, version)
    decoded = decode_assignment(theirs)
    assert Counter(decoded.partitions) == Counter(assignment.partitions)
    assert decoded.user_data == assignment.user_data
    back = KpAssignment.decode(encode_assignment(assignment, version))
    assert Counter(back.partitions()) == Counter(assignment.partitions)


# --- assignor user data


@given(
    partitions=st.lists(st.builds(TopicPartition, names, st.integers(0, 1000)), max_size=8, unique=True),
    generation=st.integers(-1, 2**31 - 1),
)
def test_sticky_user_data_matches_aiokafka_both_ways(
    partitions: list[TopicPartition], generation: int
) -> None:
    ours = encode_sticky_user_data(partitions, generation)
    decoded = decode_sticky_user_data(ours)
    assert Counter(decoded.partitions) == Counter(partitions) and decoded.generation == generation
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    theirs = AioStickyUserData(list(grouped.items()), generation).encode()
    decoded = decode_sticky_user_data(theirs)
    assert Counter(decoded.partitions) == Counter(partitions) and decoded.generation == generation
    back = AioStickyUserData.decode(ours)
    assert back.generation == generation
    assert Counter(TP(t, p) for t, ps in back.previous_assignment for p in ps) == Counter(partitions)


def test_sticky_user_data_v0_and_garbage_follow_java() -> None:
    v0 = encode_sticky_user_data([tp("t", 1), tp("u", 0)], None)
    assert decode_sticky_user_data(v0).generation is None  # V0: no generation
    assert set(decode_sticky_user_data(v0).partitions) == {tp("t", 1), tp("u", 0)}
    garbage = decode_sticky_user_data(b"\x00\x00\x00\x05\x00")
    assert (garbage.partitions, garbage.generation) == ([], -1)


def test_cooperative_user_data_is_the_generation() -> None:
    assert encode_cooperative_user_data(10) == b"\x00\x00\x00\x0a"
    assert decode_cooperative_user_data(b"\x00\x00\x00\x0a") == 10
    assert decode_cooperative_user_data(b"\x00") == -1


def test_assignors_remember_their_assignment_in_user_data() -> None:
    sticky = StickyAssignor()
    assert sticky.subscription_user_data({"t"}) is None
    sticky.on_assignment(Assignment([tp("t", 0), tp("t", 2)]), 4)
    data = sticky.member_data(Subscription(["t"], sticky.subscription_user_data({"t"})))
    assert (set(data.partitions), data.generation) == ({tp("t", 0), tp("t", 2)}, 4)

    coop = CooperativeStickyAssignor()
    assert decode_cooperative_user_data(coop.subscription_user_data({"t"}) or b"") == -1
    coop.on_assignment(Assignment([tp("t", 0)]), 10)
    # v0/v1 subscription: generation from user data, owned partitions from the subscription.
    data = coop.member_data(Subscription(["t"], coop.subscription_user_data({"t"}), [tp("t", 5)]))
    assert (data.partitions, data.generation) == ([tp("t", 5)], 10)
    # v2+: the subscription's own generation wins.
    data = coop.member_data(Subscription(["t"], coop.subscription_user_data({"t"}), [], generation_id=12))
    assert (data.partitions, data.generation) == ([], 12)
    assert coop.member_data(Subscription(["t"])).generation is None


# =========================================================================== registry


def test_java_hash_order_matches_java_hashmap_iteration() -> None:
    # Java's HashMap iterates "consumer1..3" backwards (their spread hashes fall in buckets 12, 11, 10);
    # the sticky assignor's tie-breaks follow that order, as Java's do.
    assert java_string_hash("consumer1") == -421004549
    assert java_hash_order(["consumer1", "consumer2", "consumer3"]) == ["consumer3", "consumer2", "consumer1"]
    # 'A' (65) and 'Q' (81) share bucket 1 of 16 and keep their insertion order there.
    assert java_hash_order(["B", "Q", "A"]) == ["Q", "A", "B"]
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # hashed over UTF-16 code units


def test_registry_uses_kafka_protocol_names() -> None:
    assert {name: cls.name for name, cls in ASSIGNORS.items()} == {
        "range": "range",
        "roundrobin": "roundrobin",
        "sticky": "sticky",
        "cooperative-sticky": "cooperative-sticky",
    }
    assert isinstance(assignor_from_name("cooperative-sticky"), CooperativeStickyAssignor)
    assert isinstance(assignor_from_name(RangeAssignor), RangeAssignor)
    instance = RoundRobinAssignor()
    assert assignor_from_name(instance) is instance
    assert CooperativeStickyAssignor().supported_protocols == ("eager", "cooperative")
    assert StickyAssignor.rebalance_protocols == RangeAssignor.rebalance_protocols == ("eager",)


@pytest.mark.parametrize("bad", ["rangee", "", 42])
def test_unknown_assignor_is_a_config_error(bad: object) -> None:
    with pytest.raises(KafkaConfigError) as info:
        assignor_from_name(bad)  # type: ignore[arg-type]
    assert info.value.setting == "partition_assignment_strategy"


# =========================================================================== known examples


def subs(topics_by_member: dict[str, list[str]], **instance_ids: str) -> dict[str, Subscription]:
    return {
        m: Subscription(list(topics), member_id=m, group_instance_id=instance_ids.get(m))
        for m, topics in topics_by_member.items()
    }


def test_range_javadoc_example() -> None:
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}))
    assert partitions_of(result) == {
        "C0": [tp("t0", 0), tp("t0", 1), tp("t1", 0), tp("t1", 1)],
        "C1": [tp("t0", 2), tp("t1", 2)],
    }


def test_range_three_consumers_two_topics_of_three() -> None:
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs({c: ["t0", "t1"] for c in ("C0", "C1", "C2")}))
    assert partitions_of(result) == {
        "C0": [tp("t0", 0), tp("t1", 0)],
        "C1": [tp("t0", 1), tp("t1", 1)],
        "C2": [tp("t0", 2), tp("t1", 2)],
    }


def test_range_orders_static_members_by_instance_id_first() -> None:
    # Member ids change on restart; instance ids do not, so the ranges stay put.
    members = subs({"C3": ["t0", "t1"], "C2": ["t0", "t1"], "A-dynamic": ["t0", "t1"]}, C3="I0", C2="I1")
    result = partitions_of(RangeAssignor().assign({"t0": 3, "t1": 3}, members))
    assert result == {
        "C3": [tp("t0", 0), tp("t1", 0)],
        "C2": [tp("t0", 1), tp("t1", 1)],
        "A-dynamic": [tp("t0", 2), tp("t1", 2)],
    }


def test_range_skips_unknown_and_empty_topics_and_unsubscribed_members() -> None:
    result = partitions_of(
        RangeAssignor().assign(
            {"t0": 2, "empty": 0, "other": 4}, subs({"C0": ["t0", "missing", "empty"], "C1": []})
        )
    )
    assert result == {"C0": [tp("t0", 0), tp("t0", 1)], "C1": []}


def test_roundrobin_javadoc_examples() -> None:
    rr = RoundRobinAssignor()
    result = partitions_of(rr.assign({"t0": 3, "t1": 3}, subs({"C0": ["t0", "t1"], "C1": ["t0", "t1"]})))
    assert result == {
        "C0": [tp("t0", 0), tp("t0", 2), tp("t1", 1)],
        "C1": [tp("t0", 1), tp("t1", 0), tp("t1", 2)],
    }
    unequal = subs({"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]})
    result = partitions_of(rr.assign({"t0": 1, "t1": 2, "t2": 3}, unequal))
    assert result == {
        "C0": [tp("t0", 0)],
        "C1": [tp("t1", 0)],
        "C2": [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }
    static = subs({"C5": ["t0", "t1"], "C3": ["t0", "t1"], "C4": ["t0", "t1"]}, C5="I0", C3="I1", C4="I2")
    result = partitions_of(rr.assign({"t0": 3, "t1": 3}, static))
    assert result == {
        "C5": [tp("t0", 0), tp("t1", 0)],
        "C3": [tp("t0", 1), tp("t1", 1)],
        "C4": [tp("t0", 2), tp("t1", 2)],
    }


def sticky_sub(topics: list[str], owned: list[TopicPartition], generation: int) -> Subscription:
    """A subscription as a Java member of that generation sends it (user data for "sticky", v2+ fields)."""
    return Subscription(list(topics), encode_sticky_user_data(owned, generation), list(owned), generation)


def test_sticky_javadoc_example_1() -> None:
    topics = ["t0", "t1", "t2", "t3"]
    counts = dict.fromkeys(topics, 2)
    first = partitions_of(StickyAssignor().assign(counts, subs({c: topics for c in ("C0", "C1", "C2")})))
    assert first == {
        "C0": [tp("t0", 0), tp("t1", 1), tp("t3", 0)],
        "C1": [tp("t0", 1), tp("t2", 0), tp("t3", 1)],
        "C2": [tp("t1", 0), tp("t2", 1)],
    }
    # C1 leaves: round robin would reshuffle, sticky keeps every previous assignment.
    second = as_sets(
        StickyAssignor().assign(counts, {c: sticky_sub(topics, first[c], 1) for c in ("C0", "C2")})
    )
    assert second["C0"] >= set(first["C0"]) and second["C2"] >= set(first["C2"])
    assert len(second["C0"]) == len(second["C2"]) == 4


def test_sticky_javadoc_example_2() -> None:
    counts = {"t0": 1, "t1": 2, "t2": 3}
    topics = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    first = partitions_of(StickyAssignor().assign(counts, subs(topics)))
    assert first == {
        "C0": [tp("t0", 0)],
        "C1": [tp("t1", 0), tp("t1", 1)],
        "C2": [tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }
    second = as_sets(
        StickyAssignor().assign(counts, {c: sticky_sub(topics[c], first[c], 1) for c in ("C1", "C2")})
    )
    assert second == {
        "C1": {tp("t1", 0), tp("t1", 1), tp("t0", 0)},
        "C2": {tp("t2", 0), tp("t2", 1), tp("t2", 2)},
    }


# --- ported from Apache Kafka's AbstractStickyAssignorTest / CooperativeStickyAssignorTest

STICKY_KINDS = [StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("kind", STICKY_KINDS)
def test_consumer_owning_min_quota_expected_max_quota(kind: type[PartitionAssignor]) -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sticky_sub(topics, [tp("topic1", 0), tp("topic2", 1)], 1),
        "consumer2": sticky_sub(topics, [tp("topic1", 1), tp("topic2", 2)], 1),
    }
    result = partitions_of(kind().assign({"topic1": 2, "topic2": 3}, members))
    assert result == {
        "consumer1": [tp("topic1", 0), tp("topic2", 1), tp("topic2", 0)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
    }


def test_max_quota_consumers_more_than_expected() -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sticky_sub(topics, [tp("topic1", 0), tp("topic2", 0)], 1),
        "consumer2": sticky_sub(topics, [tp("topic1", 1), tp("topic2", 1)], 1),
        "consumer3": sticky_sub(topics, [], 1),
    }
    eager = partitions_of(StickyAssignor().assign({"topic1": 2, "topic2": 2}, members))
    assert eager == {
        "consumer1": [tp("topic1", 0)],
        "consumer2": [tp("topic1", 1), tp("topic2", 1)],
        "consumer3": [tp("topic2", 0)],
    }
    # Cooperative: topic2-0 is still owned by consumer1, so nobody gets it this round.
    coop = partitions_of(CooperativeStickyAssignor().assign({"topic1": 2, "topic2": 2}, members))
    assert coop == {**eager, "consumer3": []}


@pytest.mark.parametrize("kind", STICKY_KINDS)
def test_all_consumers_under_min_quota(kind: type[PartitionAssignor]) -> None:
    topics = ["topic1", "topic2"]
    members = {
        "consumer1": sticky_sub(topics, [tp("topic1", 0)], 1),
        "consumer2": sticky_sub(topics, [tp("topic1", 1)], 1),
        "consumer3": sticky_sub(topics, [], 1),
    }
    result = partitions_of(kind().assign({"topic1": 2, "topic2": 3}, members))
    assert result == {
        "consumer1": [tp("topic1", 0), tp("topic2", 1)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
        "consumer3": [tp("topic2", 0)],
    }


@pytest.mark.parametrize("partitions", [3, 4])
def test_partition_claimed_twice_in_one_generation_is_invalidated(partitions: int) -> None:
    members = {
        "consumer1": sticky_sub(["topic"], [tp("topic", 0), tp("topic", 1)], 1),
        "consumer2": sticky_sub(["topic"], [tp("topic", 0), tp("topic", 2)], 1),
        "consumer3": sticky_sub(["topic"], [], 1),
    }
    expected_c1 = [tp("topic", 1)] + ([tp("topic", 3)] if partitions == 4 else [])
    eager = partitions_of(StickyAssignor().assign({"topic": partitions}, members))
    assert eager == {"consumer1": expected_c1, "consumer2": [tp("topic", 2)], "consumer3": [tp("topic", 0)]}
    # Cooperative: topic-0 counts as owned until both claimants revoked it.
    coop = partitions_of(CooperativeStickyAssignor().assign({"topic": partitions}, members))
    assert coop == {"consumer1": expected_c1, "consumer2": [tp("topic", 2)], "consumer3": []}


@pytest.mark.parametrize("kind", STICKY_KINDS)
@pytest.mark.parametrize("stale_generation", [9, -1])
def test_owned_partitions_of_a_stale_generation_are_invalidated(
    kind: type[PartitionAssignor], stale_generation: int
) -> None:
    owned = [tp("topic", 0), tp("topic", 2), tp("topic2", 1)]
    members = {
        "consumer1": sticky_sub(["topic", "topic2"], owned, 10),
        "consumer2": sticky_sub(["topic", "topic2"], owned, stale_generation),
    }
    result = as_sets(kind().assign({"topic": 3, "topic2": 3}, members))
    assert result == {
        "consumer1": set(owned),
        "consumer2": {tp("topic", 1), tp("topic2", 0), tp("topic2", 2)},
    }


@pytest.mark.parametrize("kind", STICKY_KINDS)
def test_partitions_go_to_the_highest_generation(kind: type[PartitionAssignor]) -> None:
    topics = ["topic", "topic2", "topic3"]
    members = {
        "consumer1": sticky_sub(topics, [tp("topic", 0), tp("topic2", 0), tp("topic3", 0)], 10),
        "consumer2": sticky_sub(topics, [tp("topic", 1), tp("topic2", 1), tp("topic3", 1)], 9),
        "consumer3": sticky_sub(topics, [tp("topic2", 1), tp("topic3", 0), tp("topic3", 2)], 8),
    }
    result = as_sets(kind().assign(dict.fromkeys(topics, 3), members))
    assert result == {
        "consumer1": {tp("topic", 0), tp("topic2", 0), tp("topic3", 0)},
        "consumer2": {tp("topic", 1), tp("topic2", 1), tp("topic3", 1)},
        "consumer3": {tp("topic", 2), tp("topic2", 2), tp("topic3", 2)},
    }


@pytest.mark.parametrize("kind", STICKY_KINDS)
def test_no_reassignment_on_current_members(kind: type[PartitionAssignor]) -> None:
    topics = ["topic", "topic2", "topic3", "topic1"]
    members = {
        "consumer1": sticky_sub(topics, [], -1),
        "consumer2": sticky_sub(topics, [tp("topic", 0), tp("topic2", 0), tp("topic1", 0)], 9),
        "consumer3": sticky_sub(topics, [tp("topic3", 2), tp("topic2", 2), tp("topic1", 1)], 8),
        "consumer4": sticky_sub(topics, [tp("topic3", 1), tp("topic", 1), tp("topic", 2)], 7),
    }
    result = as_sets(kind().assign(dict.fromkeys(topics, 3), members))
    assert result["consumer1"] == {tp("topic1", 2), tp("topic2", 1), tp("topic3", 0)}


@pytest.mark.parametrize("kind", STICKY_KINDS)
@pytest.mark.parametrize("equal", [True, False])
def test_conflicting_previous_generations(kind: type[PartitionAssignor], equal: bool) -> None:
    topics = ["topic", "topic2", "topic3"]
    c1_topics = topics if equal else ["topic"]
    c2_topics = topics if equal else ["topic", "topic2"]
    c1 = (
        [tp("topic", 0), tp("topic", 1), tp("topic", 2), tp("topic2", 2), tp("topic2", 3), tp("topic3", 0)]
        if equal
        else [tp("topic", p) for p in range(4)]
    )
    c2 = [tp("topic", 0), tp("topic", 1), tp("topic2", 0), tp("topic2", 1), tp("topic2", 2), tp("topic2", 3)]
    c3 = [tp("topic", 2), tp("topic", 3), tp("topic3", 0), tp("topic3", 1), tp("topic3", 2), tp("topic3", 3)]
    members = {
        "consumer1": sticky_sub(c1_topics, c1, 1),
        "consumer2": sticky_sub(c2_topics, c2, 2),
        "consumer3": sticky_sub(topics, c3, 2),
    }
    counts = dict.fromkeys(topics, 4)
    result = (
        rounds_until_stable(kind(), counts, members)
        if kind is CooperativeStickyAssignor
        else as_sets(kind().assign(counts, members))
    )
    assert [len(result[c]) for c in ("consumer1", "consumer2", "consumer3")] == [4, 4, 4]
    if kind is StickyAssignor:
        assert result["consumer2"] <= set(c2) and result["consumer3"] <= set(c3)
    check_valid(counts, members, result)


def test_three_generations_with_unequal_subscriptions() -> None:
    # Java's testSubscriptionNotEqualAndAssignSamePartitionWith3Generation.
    for g1, g2, g3 in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]:
        members = {
            "consumer1": sticky_sub(["topic"], [tp("topic", 0), tp("topic", 2)], g1),
            "consumer2": sticky_sub(["topic"], [tp("topic", 1), tp("topic", 2), tp("topic", 3)], g2),
            "consumer3": sticky_sub(["topic"], [tp("topic", 2), tp("topic", 4), tp("topic", 5)], g3),
            "consumer4": sticky_sub(["topic1"], [tp("topic1", 0)], 2),
        }
        for kind in STICKY_KINDS:
            result = partitions_of(kind().assign({"topic": 6, "topic1": 1}, members))
            flat = [p for ps in result.values() for p in ps]
            assert len(flat) == len(set(flat))
            if kind is StickyAssignor:
                assert all(1 <= len(ps) <= 2 for ps in result.values())


def test_cooperative_add_consumer_withholds_the_moving_partition() -> None:
    coop = CooperativeStickyAssignor()
    members = {"consumer1": Subscription(["topic"], member_id="consumer1")}
    first = partitions_of(coop.assign({"topic": 3}, members))
    assert first == {"consumer1": [tp("topic", 0), tp("topic", 1), tp("topic", 2)]}
    members = {
        "consumer1": Subscription(["topic"], None, first["consumer1"], 1),
        "consumer2": Subscription(["topic"], None, [], 1),
    }
    second = partitions_of(coop.assign({"topic": 3}, members))
    # topic-2 must move: revoked from consumer1 now, given to consumer2 only next round.
    assert second == {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": []}
    members = {m: Subscription(["topic"], None, second[m], 2) for m in second}
    third = partitions_of(coop.assign({"topic": 3}, members))
    assert third == {"consumer1": [tp("topic", 0), tp("topic", 1)], "consumer2": [tp("topic", 2)]}


def test_cooperative_with_old_subscription_versions() -> None:
    # Java's testAssignorWithOldVersionSubscriptions: v1 members carry the generation in user data.
    members = {
        "consumer1": Subscription(["topic1"], encode_cooperative_user_data(1), [tp("topic1", 0)]),
        "consumer2": Subscription(["topic1"], encode_cooperative_user_data(1), [tp("topic1", 1)]),
        "consumer3": Subscription(["topic1"], encode_cooperative_user_data(-1), [], 1),
    }
    result = partitions_of(CooperativeStickyAssignor().assign({"topic1": 3}, members))
    assert result == {
        "consumer1": [tp("topic1", 0)],
        "consumer2": [tp("topic1", 1)],
        "consumer3": [tp("topic1", 2)],
    }


def test_sticky_no_members_and_no_topics() -> None:
    for kind in ASSIGNORS.values():
        assert kind().assign({"t": 3}, {}) == {}
        assert partitions_of(kind().assign({}, subs({"a": ["t"]}))) == {"a": []}


# =========================================================================== properties


def check_valid(
    counts: dict[str, int],
    members: dict[str, Subscription],
    result: dict[str, set[TopicPartition]],
    *,
    complete: bool = True,
) -> None:
    """Every member present; only subscribed, existing partitions; none twice; all assigned if ``complete``."""
    assert set(result) == set(members)
    seen: set[TopicPartition] = set()
    for member, partitions in result.items():
        for p in partitions:
            assert p.topic in members[member].topics, (member, p)
            assert 0 <= p.partition < counts.get(p.topic, 0), p
            assert p not in seen, p
            seen.add(p)
    if complete:
        subscribed = {t for m in members.values() for t in m.topics}
        assert seen == {tp(t, p) for t in subscribed for p in range(counts.get(t, 0))}


def check_balance_like_java(result: dict[str, set[TopicPartition]]) -> None:
    """Java's verifyValidityAndBalance: two members 2+ apart share no topic in their assignments."""
    members = sorted(result)
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            if abs(len(result[a]) - len(result[b])) > 1:
                assert not ({p.topic for p in result[a]} & {p.topic for p in result[b]}), (a, b, result)


def check_balanced_within_one(
    members: dict[str, Subscription], result: dict[str, set[TopicPartition]]
) -> None:
    """Members with equal subscriptions get counts within one of each other."""
    groups: dict[frozenset[str], list[int]] = {}
    for member, sub in members.items():
        groups.setdefault(frozenset(sub.topics), []).append(len(result[member]))
    for sizes in groups.values():
        assert max(sizes) - min(sizes) <= 1, groups


def next_subscriptions(
    assignor: PartitionAssignor,
    members: dict[str, Subscription],
    result: dict[str, set[TopicPartition]],
    generation: int,
) -> dict[str, Subscription]:
    """What each member sends when it rejoins after receiving ``result`` in ``generation``."""
    out = {}
    for member, sub in members.items():
        owned = sorted(result[member])
        user_data = (
            encode_sticky_user_data(owned, generation)
            if isinstance(assignor, StickyAssignor)
            else encode_cooperative_user_data(generation)
        )
        out[member] = Subscription(
            list(sub.topics), user_data, owned, generation, None, member, sub.group_instance_id
        )
    return out


def rounds_until_stable(
    assignor: PartitionAssignor, counts: dict[str, int], members: dict[str, Subscription], max_rounds: int = 4
) -> dict[str, set[TopicPartition]]:
    """Run cooperative rebalances until nothing is revoked (Java's cooperative verifyValidityAndBalance)."""
    generation = max(m.generation_id for m in members.values()) + 1
    for _ in range(max_rounds + 1):
        result = as_sets(assignor.assign(counts, members))
        check_cooperative_round(counts, members, result)
        revoked = any(set(m.owned_partitions) - result[name] for name, m in members.items())
        if not revoked:
            return result
        members = next_subscriptions(assignor, members, result, generation)
        generation += 1
    raise AssertionError(f"cooperative assignment did not converge in {max_rounds} follow-up rebalances")


def check_cooperative_round(
    counts: dict[str, int], members: dict[str, Subscription], result: dict[str, set[TopicPartition]]
) -> None:
    """No partition is given to a member in the round another member must revoke it (Java's
    verifyCooperativeValidity). With consistent ownership: nobody gets a partition someone else owns."""
    check_valid(counts, members, result, complete=False)
    added = {p for name, m in members.items() for p in result[name] - set(m.owned_partitions)}
    revoked = {p for name, m in members.items() for p in set(m.owned_partitions) - result[name]}
    assert not added & revoked, sorted(added & revoked)
    owner = {p: name for name, m in members.items() for p in m.owned_partitions}
    if len(owner) == sum(len(m.owned_partitions) for m in members.values()):  # no double claims
        for member, partitions in result.items():
            for p in partitions:
                assert owner.get(p, member) == member, (p, member, owner.get(p))


TOPICS = ["t0", "t1", "t2", "t3", "t4"]


@st.composite
def groups(
    draw: st.DrawFn, *, equal: bool | None = None, max_members: int = 7
) -> tuple[dict[str, int], dict[str, Subscription]]:
    counts = {
        t: draw(st.integers(0, 9)) for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    }
    member_ids = draw(
        st.lists(st.sampled_from("ABCDEFGHIJKL"), min_size=1, max_size=max_members, unique=True)
    )
    all_topics = [*counts, "missing"]
    same = draw(st.booleans()) if equal is None else equal
    common = draw(st.lists(st.sampled_from(all_topics), min_size=1, unique=True))
    members = {}
    for m in member_ids:
        topics = common if same else draw(st.lists(st.sampled_from(all_topics), min_size=0, unique=True))
        instance = draw(st.none() | st.sampled_from(["i1", "i2", "i3", "i4", "i5", "i6", "i7"]))
        members[m] = Subscription(list(topics), member_id=m, group_instance_id=instance)
    # instance ids are unique within a group
    used: set[str] = set()
    for sub in members.values():
        if sub.group_instance_id in used:
            sub.group_instance_id = None
        elif sub.group_instance_id is not None:
            used.add(sub.group_instance_id)
    return counts, members


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(group=groups())
@pytest.mark.parametrize(
    "kind", [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]
)
def test_fresh_assignment_is_valid(
    kind: type[PartitionAssignor], group: tuple[dict[str, int], dict[str, Subscription]]
) -> None:
    counts, members = group
    result = as_sets(kind().assign(counts, members))
    check_valid(counts, members, result)  # nobody owns anything yet, so cooperative assigns everything too
    if kind in (StickyAssignor, CooperativeStickyAssignor):
        check_balance_like_java(result)  # round-robin is not balanced for unequal subscriptions (javadoc)
    if kind is not RangeAssignor and len({frozenset(m.topics) for m in members.values()}) == 1:
        check_balanced_within_one(members, result)


def minimal_moves(owned_counts: list[int], total: int, members: int) -> int:
    """Fewest partitions previous owners must give up to reach a balanced assignment."""
    low, extra = divmod(total, members)
    ordered = sorted(owned_counts, reverse=True)
    caps = [low + 1] * extra + [low] * (members - extra)
    return sum(max(0, owned - cap) for owned, cap in zip(ordered, caps, strict=False))


@st.composite
def membership_changes(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Subscription], str]:
    counts, members = draw(groups(equal=True))
    change = draw(st.sampled_from(["join", "leave"]) if len(members) > 1 else st.just("join"))
    return counts, members, change


def apply_change(
    members: dict[str, Subscription], change: str, subscribed: list[str]
) -> dict[str, Subscription]:
    if change == "leave":
        leaving = sorted(members)[len(members) // 2]
        return {m: s for m, s in members.items() if m != leaving}
    newcomer = next(c for c in "MNOPQRSTUVWXYZ" if c not in members)
    return {**members, newcomer: Subscription(list(subscribed), member_id=newcomer)}


@PROPS
@given(case=membership_changes())
@pytest.mark.parametrize("kind", [StickyAssignor, CooperativeStickyAssignor])
def test_stickiness_after_a_member_joins_or_leaves(
    kind: type[PartitionAssignor], case: tuple[dict[str, int], dict[str, Subscription], str]
) -> None:
    counts, members, change = case
    assignor = kind()
    first = as_sets(assignor.assign(counts, members))
    rejoining = apply_change(
        next_subscriptions(assignor, members, first, 1), change, next(iter(members.values())).topics
    )
    second = as_sets(assignor.assign(counts, rejoining))
    if kind is CooperativeStickyAssignor:
        check_cooperative_round(counts, rejoining, second)
        final = rounds_until_stable(assignor, counts, rejoining)
    else:
        final = second
    check_valid(counts, rejoining, final)
    check_balanced_within_one(rejoining, final)
    # Only what balance requires moves away from members that stay.
    total = sum(counts.get(t, 0) for t in set(next(iter(members.values())).topics))
    stayed = [m for m in rejoining if m in first]
    moved = sum(len(first[m] - final[m]) for m in stayed)
    assert moved == minimal_moves(
        [len(first[m]) for m in stayed] + [0] * (len(rejoining) - len(stayed)), total, len(rejoining)
    )


@PROPS
@given(group=groups(equal=True), changes=st.lists(st.sampled_from(["join", "leave"]), min_size=1, max_size=3))
def test_cooperative_converges_in_one_follow_up_for_equal_subscriptions(
    group: tuple[dict[str, int], dict[str, Subscription]], changes: list[str]
) -> None:
    counts, members = group
    assignor = CooperativeStickyAssignor()
    result = as_sets(assignor.assign(counts, members))
    generation = 1
    topics = next(iter(members.values())).topics
    for change in changes:
        if change == "leave" and len(members) == 1:
            continue
        members = apply_change(next_subscriptions(assignor, members, result, generation), change, topics)
        generation += 1
        first_round = as_sets(assignor.assign(counts, members))
        check_cooperative_round(counts, members, first_round)
        follow_up_members = next_subscriptions(assignor, members, first_round, generation)
        generation += 1
        result = as_sets(assignor.assign(counts, follow_up_members))
        # The follow-up revokes nothing and completes a balanced assignment.
        for m, sub in follow_up_members.items():
            assert set(sub.owned_partitions) <= result[m]
        check_valid(counts, follow_up_members, result)
        check_balanced_within_one(follow_up_members, result)
        members = follow_up_members


@PROPS
@given(group=groups(equal=False), data=st.data())
@pytest.mark.parametrize("kind", [StickyAssignor, CooperativeStickyAssignor])
def test_sticky_with_changing_subscriptions_stays_valid(
    kind: type[PartitionAssignor], group: tuple[dict[str, int], dict[str, Subscription]], data: st.DataObject
) -> None:
    # Java's testReassignmentWithRandomSubscriptionsAndChanges.
    counts, members = group
    assignor = kind()
    result = as_sets(assignor.assign(counts, members))
    check_valid(counts, members, result)
    rejoining = next_subscriptions(assignor, members, result, 1)
    for sub in rejoining.values():
        sub.topics = data.draw(st.lists(st.sampled_from([*counts, "missing"]), min_size=1, unique=True))
    if kind is CooperativeStickyAssignor:
        final = rounds_until_stable(assignor, counts, rejoining)
    else:
        final = as_sets(assignor.assign(counts, rejoining))
    check_valid(counts, rejoining, final)
    check_balance_like_java(final)
    if len({frozenset(s.topics) for s in rejoining.values()}) == 1:
        check_balanced_within_one(rejoining, final)


# =========================================================================== Java differential test

JAVA_HARNESS = r"""
import java.io.*;
import java.nio.ByteBuffer;
import java.nio.file.*;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.AbstractPartitionAssignor;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicPartition;

public class AssignorCheck {
    static byte[] hex(String s) {
        if (s.equals("-")) return null;
        byte[] out = new byte[s.length() / 2 - 0];
        for (int i = 0; i < out.length; i++) out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }
    static String hex(ByteBuffer b) {
        StringBuilder sb = new StringBuilder();
        ByteBuffer d = b.duplicate();
        while (d.hasRemaining()) sb.append(String.format("%02x", d.get()));
        return sb.toString();
    }
    static List<TopicPartition> tps(String s) {
        List<TopicPartition> out = new ArrayList<>();
        if (s.equals("-")) return out;
        for (String item : s.split(",")) {
            int i = item.lastIndexOf(':');
            out.add(new TopicPartition(item.substring(0, i), Integer.parseInt(item.substring(i + 1))));
        }
        return out;
    }
    static String show(List<TopicPartition> l) {
        List<String> s = new ArrayList<>();
        for (TopicPartition tp : l) s.add(tp.topic() + ":" + tp.partition());
        Collections.sort(s);
        return s.isEmpty() ? "-" : String.join(",", s);
    }
    public static void main(String[] args) throws Exception {
        List<String> lines = Files.readAllLines(Paths.get(args[0]));
        PrintWriter out = new PrintWriter(new FileWriter(args[1]));
        AbstractPartitionAssignor assignor = null;
        Map<String, Integer> counts = null;
        Map<String, Subscription> subs = null;
        for (String line : lines) {
            String[] f = line.split(" ");
            switch (f[0]) {
                case "case":
                    out.println(line);
                    assignor = f[1].equals("range") ? new RangeAssignor() : f[1].equals("roundrobin") ? new RoundRobinAssignor()
                        : f[1].equals("sticky") ? new StickyAssignor() : new CooperativeStickyAssignor();
                    counts = new HashMap<>();
                    subs = new HashMap<>();
                    break;
                case "topic":
                    counts.put(f[1], Integer.parseInt(f[2]));
                    break;
                case "member": {
                    // member id instance generation topics owned userdata
                    byte[] ud = hex(f[6]);
                    Subscription s = new Subscription(Arrays.asList(f[4].split(",")), ud == null ? null : ByteBuffer.wrap(ud),
                        tps(f[5]), Integer.parseInt(f[3]), Optional.empty());
                    s.setGroupInstanceId(f[2].equals("-") ? Optional.empty() : Optional.of(f[2]));
                    subs.put(f[1], s);
                    break;
                }
                case "end": {
                    Map<String, List<TopicPartition>> result = assignor.assign(counts, subs);
                    for (String m : new TreeSet<>(result.keySet())) out.println(m + " " + show(result.get(m)));
                    break;
                }
                case "sub": {
                    // sub version hex: decode ours, re-encode with Java at the same version
                    Subscription s = ConsumerProtocol.deserializeSubscription(ByteBuffer.wrap(hex(f[2])));
                    out.println("sub " + hex(ConsumerProtocol.serializeSubscription(s, Short.parseShort(f[1]))));
                    break;
                }
                case "asg": {
                    ConsumerPartitionAssignor.Assignment a = ConsumerProtocol.deserializeAssignment(ByteBuffer.wrap(hex(f[2])));
                    out.println("asg " + hex(ConsumerProtocol.serializeAssignment(a, Short.parseShort(f[1]))));
                    break;
                }
                default:
                    throw new IllegalArgumentException(line);
            }
        }
        out.close();
    }
}
"""


def _partition_list(partitions: list[TopicPartition] | set[TopicPartition]) -> str:
    return ",".join(sorted(f"{t}:{p}" for t, p in partitions)) or "-"


def _java_case(name: str, kind: str, counts: dict[str, int], members: dict[str, Subscription]) -> str:
    subscribed = {t for m in members.values() for t in m.topics}
    lines = [f"case {kind} {name}"]
    # Java's leader passes only subscribed topics that have partitions.
    lines += [f"topic {t} {n}" for t, n in sorted(counts.items()) if t in subscribed and n > 0]
    for member, sub in sorted(members.items()):
        lines.append(
            " ".join(
                [
                    "member",
                    member,
                    sub.group_instance_id or "-",
                    str(sub.generation_id),
                    ",".join(sub.topics),
                    ",".join(f"{t}:{p}" for t, p in sub.owned_partitions) or "-",
                    sub.user_data.hex() if sub.user_data else "-",
                ]
            )
        )
    lines.append("end")
    return "\n".join(lines)


def _java_groups(seed: int, count: int) -> list[tuple[str, dict[str, int], dict[str, Subscription]]]:
    """Deterministic random groups, in two rounds per assignor (fresh, then with previous ownership)."""
    import random

    rng = random.Random(seed)
    cases = []
    for index in range(count):
        topics = rng.sample(TOPICS, rng.randint(1, 4))
        counts = {t: rng.randint(0, 8) for t in topics}
        # Single-letter member ids keep Java's HashMap iteration in sorted order, so ties break alike.
        member_ids = rng.sample("ABCDEFGHIJKL", rng.randint(1, 8))
        equal = rng.random() < 0.5
        common = rng.sample([*topics, "missing"], rng.randint(1, len(topics)))
        instance_pool = [f"i{n}" for n in range(10)]
        rng.shuffle(instance_pool)
        members = {
            m: Subscription(
                list(common if equal else rng.sample([*topics, "missing"], rng.randint(1, len(topics)))),
                member_id=m,
                group_instance_id=instance_pool.pop() if rng.random() < 0.3 else None,
            )
            for m in member_ids
        }
        cases.append((f"g{index}", counts, members))
    return cases


@pytest.mark.interop
def test_java_assignors_agree_with_ours(tmp_path: Path) -> None:
    reason = missing_kafka_tools()
    if reason:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    source = tmp_path / "AssignorCheck.java"
    source.write_text(JAVA_HARNESS)

    import random

    rng = random.Random(7)
    script: list[str] = []
    expected: list[str] = []
    for name, counts, members in _java_groups(seed=3, count=60):
        for kind in ASSIGNORS:
            assignor = assignor_from_name(kind)
            first = partitions_of(assignor.assign(counts, members))
            script.append(_java_case(f"{name}-fresh", kind, counts, members))
            expected += [f"case {kind} {name}-fresh"] + [
                f"{m} {_partition_list(first[m])}" for m in sorted(first)
            ]
            if kind in ("sticky", "cooperative-sticky"):
                # Second round: one member leaves, one joins, the rest report what they own.
                rejoin = next_subscriptions(assignor, members, as_sets(first), 3)
                rejoin.pop(sorted(rejoin)[0])
                newcomer = next(c for c in "MNOPQRSTUVWXYZ" if c not in rejoin)
                rejoin[newcomer] = Subscription(
                    list(rng.choice(list(members.values())).topics),
                    member_id=newcomer,
                    generation_id=-1 if kind == "sticky" else 3,
                )
                if kind == "cooperative-sticky":
                    rejoin[newcomer].user_data = encode_cooperative_user_data(3)
                second = partitions_of(assignor.assign(counts, rejoin))
                script.append(_java_case(f"{name}-again", kind, counts, rejoin))
                expected += [f"case {kind} {name}-again"] + [
                    f"{m} {_partition_list(second[m])}" for m in sorted(second)
                ]

    # Codec: Java re-encodes our bytes identically at every version.
    for version in range(4):
        sub = Subscription(["b", "a"], b"ud", [tp("a", 3), tp("a", 1), tp("b", 0)], 9, "rack")
        script.append(f"sub {version} {encode_subscription(sub, version).hex()}")
        expected.append(f"sub {encode_subscription(sub, version).hex()}")
        asg = Assignment([tp("x", 2), tp("y", 0), tp("x", 1)], b"u")
        script.append(f"asg {version} {encode_assignment(asg, version).hex()}")
        expected.append(f"asg {encode_assignment(asg, version).hex()}")

    (tmp_path / "in.txt").write_text("\n".join(script) + "\n")
    proc = subprocess.run(
        ["java", "-cp", f"{lib}/*", str(source), str(tmp_path / "in.txt"), str(tmp_path / "out.txt")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    actual = (tmp_path / "out.txt").read_text().splitlines()
    mismatches = [(e, a) for e, a in zip(expected, actual, strict=False) if e != a]
    assert len(actual) == len(expected)
    assert not mismatches, mismatches[:10]
