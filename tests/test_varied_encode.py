"""The varied-length encoder (kafkakit.records.varied_encode) against the reference loop,
a third-party reader and real brokers.

Values and keys of many lengths (JSON, Avro...), nulls among them (tombstones), keys of
one length or not: the numpy encoder must write exactly the loop's bytes, or decline.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafkakit.records import BatchBuilder, decode_batches, encode_batch, encode_queued_batches, encode_values
from kafkakit.records.encoder import _encode_records, _encode_records_slowly
from kafkakit.records.varied_encode import VARIED_MIN_RECORDS, encode_varied_values

from tests.brokers import RunningBroker
from tests.test_producer import consume, create_topic, producer_for
from tests.test_records import _Queued

BASE_TS = 1_700_000_000_000

Record = tuple[Any, Any, int, Any]


def _loop(records: list[Record]) -> tuple[bytes, int, int]:
    return _encode_records_slowly(records)


def _varied(records: list[Record]) -> tuple[bytes, int, int] | None:
    keys = [r[0] for r in records]
    return encode_varied_values(
        [r[1] for r in records], [r[2] for r in records], keys=None if keys.count(None) == len(keys) else keys
    )


_lengths = st.one_of(
    st.integers(min_value=0, max_value=70),  # around the 1/2-byte varint edge at 64
    st.sampled_from([8180, 8191, 8192, 8200, 20000]),  # around the 2/3-byte edge at 8192
)


@st.composite
def _records(draw: st.DrawFn) -> list[Record]:
    count = draw(st.sampled_from([1, 2, 63, 64, 65, 300, 8193]))
    key_shape = draw(st.sampled_from(["null", "one-length", "lengths", "some-null"]))
    key_length = draw(st.sampled_from([0, 1, 11, 63, 64, 65, 300]))
    null_values = draw(st.booleans())
    rising = draw(st.booleans())
    deltas = draw(
        st.lists(
            st.one_of(st.integers(min_value=0, max_value=63), st.integers(min_value=0, max_value=(1 << 20) - 1)),
            min_size=1,
            max_size=8,
        )
    )
    if rising:
        deltas = sorted(deltas)
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**16)))
    long_values = draw(st.booleans())

    def value(i: int) -> bytes | None:
        if null_values and rng.random() < 0.1:
            return None
        length = rng.choice([0, 1, 62, 63, 64, 65, 100, 8190, 8192]) if long_values and i % 50 == 0 else rng.randrange(70)
        return bytes(rng.randrange(256) for _ in range(min(length, 16))) * (length // 16) + b"v" * (length % 16)

    def key(i: int) -> bytes | None:
        if key_shape == "null" or (key_shape == "some-null" and rng.random() < 0.2):
            return None
        length = key_length if key_shape == "one-length" else rng.randrange(key_length + 1)
        return (b"%d:" % i * (length + 1))[:length]

    stamps = [BASE_TS + deltas[min(i, len(deltas) - 1) if rising else i % len(deltas)] for i in range(count)]
    stamps[0] = BASE_TS
    return [(key(i), value(i), stamps[i], ()) for i in range(count)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(records=_records())
def test_varied_encoder_writes_the_loops_bytes(records: list[Record]) -> None:
    """Any mix of key and value lengths (varint widths of 1-3 bytes, offsets past 64 and
    8192), null keys and values, empty ones, keys of one length or not, and timestamp
    deltas of 1-3 bytes rising or in any order: the loop's bytes exactly, or None only for
    timestamps whose varint widths go up and down too often."""
    varied = _varied(records)
    if varied is None:
        stamps = [r[2] for r in records]
        assert stamps != sorted(stamps), "declined records with rising timestamps"
        return
    assert varied == _loop(records)


def test_rows_that_end_in_zero_bytes_keep_them() -> None:
    """Row bytes are made by numpy dropping trailing zeros: empty values (and, keyed, empty
    keys, down to a first row of zeros: delta 0, offset 0, attributes 0) must keep theirs."""
    cases = [
        [(None, b"" if i % 3 == 0 else b"x" * i, BASE_TS, ()) for i in range(300)],
        [(b"" if i % 2 == 0 else b"k" * (i % 5), b"" if i % 4 == 0 else b"v", BASE_TS, ()) for i in range(300)],
        [(b"", b"v" * (i % 90), BASE_TS, ()) for i in range(300)],  # empty keys of one length
        [(b"k" * (i % 3), None, BASE_TS + i, ()) for i in range(300)],  # tombstones
    ]
    for records in cases:
        assert _varied(records) == _loop(records)


def test_varied_encoder_declines_what_the_loop_must_decide() -> None:
    """Text, wide memoryviews, negative or four-byte timestamp deltas and 32 KiB fields go
    to the loop (which encodes or refuses them the same way as before)."""
    n = VARIED_MIN_RECORDS
    wide = memoryview(bytes(8)).cast("I")  # len() 2, 8 bytes
    cases = [
        [(None, "text" if i == 3 else b"v" * i, BASE_TS, ()) for i in range(n)],
        [(None, wide if i == 3 else b"v" * (i % 7), BASE_TS, ()) for i in range(n)],
        [(None, b"v" * (i % 7), BASE_TS - (1 if i == 5 else 0), ()) for i in range(n)],
        [(None, b"v" * (i % 7), BASE_TS + ((1 << 20) if i == 5 else 0), ()) for i in range(n)],
        [(None, b"v" * (40000 if i == 5 else i % 7), BASE_TS, ()) for i in range(n)],
        [(b"k" * (40000 if i == 5 else i % 7), b"v", BASE_TS, ()) for i in range(n)],
        [(b"k" if i == 5 else None, b"v", BASE_TS, ()) for i in range(n)] + [(None, 7, BASE_TS, ())],
        [("key" if i == 5 else b"abc", b"v", BASE_TS, ()) for i in range(n)],  # a text key of the keys' length
        [(memoryview(bytes(12)).cast("I") if i == 5 else b"abc", b"v", BASE_TS, ()) for i in range(n)],
    ]
    for records in cases:
        assert _varied(records) is None
    with pytest.raises(TypeError):
        _encode_records(cases[0])
    wide_records = cases[1]
    assert _encode_records(wide_records) == _loop(wide_records)  # its 8 bytes, as the loop writes them
    for records in cases[2:6]:
        assert _encode_records(records) == _loop(records)
    as_bytearrays = [(None, bytearray(b"v" * (i % 9)), BASE_TS, ()) for i in range(n)]
    assert _varied(as_bytearrays) == _loop(as_bytearrays)


def _queued(records: list[Record]) -> _Queued:
    """The producer's shape of batch, its stamps in nanoseconds (not whole milliseconds)."""
    queued = _Queued.of(records, stamps_per_ms=1_000_000)
    queued.stamps = [stamp + index % 999_999 for index, stamp in enumerate(queued.stamps)]
    return queued


def _built(records: list[Record], **producer: Any) -> bytes:
    """The batch BatchBuilder makes record by record (the loop's encoding)."""
    builder = BatchBuilder(max_size=1 << 30, **producer)
    for key, value, stamp, headers in records:
        assert builder.append(stamp, key, value, headers) is not None
    return builder.build()


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("keys", ["null", "one-length", "lengths", "some-null"])
def test_producer_batches_of_varied_records_are_the_builders_bytes(codec: str, keys: str) -> None:
    """encode_queued_batches (the producer's batches, in parts, nanosecond stamps) gives the
    batch BatchBuilder builds record by record, compressed and with producer fields."""
    rng = random.Random(keys)
    records: list[Record] = []
    for i in range(3000):
        document = {"id": i, "user": "u" * rng.randrange(30), "tags": ["t"] * rng.randrange(5)}
        key = {
            "null": None,
            "one-length": b"user-%06d" % i,
            "lengths": b"user-%d" % rng.randrange(10**6),
            "some-null": None if i % 4 == 0 else b"k%d" % i,
        }[keys]
        value = None if keys == "some-null" and i % 9 == 0 else json.dumps(document).encode()
        records.append((key, value, BASE_TS + i // 100, ()))
    producer = {"producer_id": 4711, "producer_epoch": 3, "base_sequence": 1000, "compression": codec}
    parts = [_queued(records[:1000]), _queued(records[1000:])]
    encoded = encode_queued_batches(parts, compression=codec, producer_id=4711, producer_epoch=3, base_sequence=1000, stamps_per_ms=1_000_000)
    assert encoded == _built(records, **producer)
    decoded = decode_batches(encoded, "t", 0)
    assert [(r.key, r.value, r.timestamp) for r in decoded] == [(k, v, ts) for k, v, ts, _ in records]


def test_aiokafka_reads_varied_batches() -> None:
    """A third-party reader (aiokafka's record batch code) checks the CRC and reads every record."""
    rng = random.Random(3)
    records = [
        (None if i % 5 == 0 else b"k%d" % rng.randrange(10**rng.randrange(1, 7)), b"x" * rng.randrange(300), BASE_TS + i, ())
        for i in range(2000)
    ]
    batch = AioBatch(encode_batch(records))
    assert batch.validate_crc()
    assert [(r.key, r.value, r.timestamp) for r in batch] == [(k, v, ts) for k, v, ts, _ in records]


def test_bulk_values_of_varied_lengths() -> None:
    """encode_values (send_batch's path): varied values, with and without keys, as encode_batch writes them."""
    rng = random.Random(5)
    values = [b"v" * rng.randrange(200) for _ in range(1000)]
    keys = [b"k" * rng.randrange(20) for _ in range(1000)]
    for with_keys in (None, keys):
        expected = _built([(None if with_keys is None else with_keys[i], v, BASE_TS, ()) for i, v in enumerate(values)])
        assert encode_values(values, with_keys, BASE_TS) == expected


async def test_varied_records_round_trip_through_brokers(broker: RunningBroker, topic: str) -> None:
    """JSON values of many lengths, keys of several shapes and tombstones, sent per record
    through the producer (batches of thousands: the varied encoder) to a real broker, which
    validates every record; confluent-kafka's consumer reads them back intact."""
    await create_topic(broker.bootstrap_servers, topic, 2)
    rng = random.Random(11)
    sent = []
    async with producer_for(broker, linger_ms=50) as producer:
        futures = []
        for i in range(6000):
            key = None if i % 7 == 0 else (b"order-%06d" % i if i % 2 else b"c%d" % rng.randrange(10**rng.randrange(1, 6)))
            value = None if i % 13 == 0 else json.dumps({"i": i, "pad": "p" * rng.randrange(400)}).encode()
            partition = i % 2
            futures.append(await producer.send(topic, value, key=key, partition=partition))
            sent.append((partition, key, value))
        metadata = [await future for future in futures]
    records = {(r.partition, r.offset): r for r in await consume(broker.bootstrap_servers, topic, len(sent), [0, 1])}
    for (partition, key, value), meta in zip(sent, metadata, strict=True):
        record = records[(meta.partition, meta.offset)]
        assert (meta.partition, record.key, record.value) == (partition, key, value)
