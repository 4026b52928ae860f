"""Unit and property tests of the record batch v2 codec (kafkakit.records)."""

from __future__ import annotations

import contextlib
import gzip
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cramjam
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kafkakit.errors import CorruptRecordError, KafkaConfigError, UnsupportedCompressionTypeError
from kafkakit.records import (
    HEADER_SIZE,
    XERIAL_MAGIC,
    BatchBuilder,
    Compression,
    build_control_batch,
    compress,
    decode_batch,
    decode_batches,
    decode_raw_records,
    decompress,
    encode_batch,
    encode_values,
    iter_batch_headers,
    read_batch_header,
    read_control_type,
    set_base_offset,
    set_log_append_time,
    verify_crc,
    write_crc,
)
from kafkakit.records.varint import encode_zigzag, read_zigzag

BASE_TS = 1_700_000_000_000

headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
record_st = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
    st.integers(min_value=-(2**40), max_value=2**40).map(lambda d: BASE_TS + d),
    headers_st,
)
records_st = st.lists(record_st, min_size=1, max_size=40)
codec_st = st.sampled_from(list(Compression))


def as_tuples(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def expected(records: list[Any], base_offset: int = 0) -> list[tuple[Any, ...]]:
    return [(base_offset + i, ts, k, v, list(h)) for i, (k, v, ts, h) in enumerate(records)]


# --- varints and compression -------------------------------------------------------------


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_round_trip(value: int) -> None:
    data = encode_zigzag(value)
    assert read_zigzag(data, 0) == (value, len(data))


def test_zigzag_known_bytes() -> None:
    assert encode_zigzag(0) == b"\x00"
    assert encode_zigzag(-1) == b"\x01"
    assert encode_zigzag(1) == b"\x02"
    assert encode_zigzag(63) == b"\x7e"
    assert encode_zigzag(64) == b"\x80\x01"


def test_the_small_varint_table_is_the_encoder_s_output() -> None:
    from kafkakit.records.varint import SMALL, SMALL_LIMIT

    assert len(SMALL) == SMALL_LIMIT
    assert all(SMALL[n] == encode_zigzag(n) for n in range(SMALL_LIMIT))


@pytest.mark.parametrize(
    ("name", "codec"),
    [(None, Compression.NONE), ("none", Compression.NONE), ("gzip", Compression.GZIP), ("Snappy", Compression.SNAPPY),
     ("lz4", Compression.LZ4), ("zstd", Compression.ZSTD), (Compression.LZ4, Compression.LZ4)],
)
def test_compression_from_name(name: Any, codec: Compression) -> None:
    assert Compression.from_name(name) is codec


@pytest.mark.parametrize("bad", ["brotli", "", 3])
def test_compression_from_name_rejects_unknown(bad: Any) -> None:
    with pytest.raises(KafkaConfigError) as info:
        Compression.from_name(bad)
    assert info.value.setting == "compression_type"


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("size", [0, 1, 1000, 100_000])
def test_compress_round_trip(codec: Compression, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_uses_xerial_framing_and_reads_raw_too() -> None:
    data = b"hello snappy " * 10_000  # > 32 KiB: several xerial blocks
    framed = compress(Compression.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    assert decompress(Compression.SNAPPY, framed) == data
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw) == data


def test_lz4_frame_has_independent_blocks_and_no_content_size() -> None:
    frame = compress(Compression.LZ4, b"abc" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg = frame[4]
    assert flg & 0x20, "Java's Lz4BlockInputStream rejects dependent blocks"
    assert not flg & 0x08, "no content size"


def test_gzip_multi_member_and_corrupt_input() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    for codec in (Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY):
        with pytest.raises(CorruptRecordError):
            decompress(codec, XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x10\x00garbage")


def test_encoders_accept_codec_names_and_reject_unknown_ids() -> None:
    builder = BatchBuilder(compression="lz4")
    builder.append(BASE_TS, None, b"v" * 50, ())
    assert read_batch_header(builder.build()).compression is Compression.LZ4
    assert read_batch_header(encode_values([b"v"], timestamp_ms=BASE_TS, compression="zstd")).compression is Compression.ZSTD
    assert read_batch_header(encode_batch([(None, b"v", BASE_TS, ())], compression=None)).compression is Compression.NONE
    with pytest.raises(KafkaConfigError):
        BatchBuilder(compression=7)
    with pytest.raises(KafkaConfigError):
        encode_values([b"v"], compression="brotli")


# --- round trips ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, codec=codec_st)
def test_encode_batch_round_trip(records: list[Any], codec: Compression) -> None:
    batch = encode_batch(records, compression=codec)
    header = read_batch_header(batch)
    assert header.size == len(batch)
    assert header.compression is codec
    assert header.record_count == len(records) and header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][2]
    assert header.max_timestamp == max(r[2] for r in records)
    assert verify_crc(batch, 0, header)
    assert as_tuples(decode_batches(batch, "t", 3)) == expected(records)
    raw = decode_raw_records(batch, 0, header)
    assert [(od, ts_delta) for od, ts_delta, *_ in raw] == [(i, r[2] - records[0][2]) for i, r in enumerate(records)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, codec=codec_st)
def test_builder_round_trip_and_matches_encode_batch(records: list[Any], codec: Compression) -> None:
    builder = BatchBuilder(compression=codec, max_size=1 << 30)
    for i, (key, value, ts, headers) in enumerate(records):
        assert builder.append(ts, key, value, headers) == i
    assert builder.record_count == len(records)
    assert builder.max_timestamp == max(r[2] for r in records)
    batch = builder.build()
    assert batch == encode_batch(records, compression=codec)
    if codec is Compression.NONE:
        assert builder.estimated_size == len(batch)
    decoded = decode_batches(batch, "topic", 7)
    assert as_tuples(decoded) == expected(records)
    assert all(r.topic == "topic" and r.partition == 7 and r.timestamp_type == 0 for r in decoded)
    assert [r.serialized_key_size for r in decoded] == [-1 if k is None else len(k) for k, *_ in records]
    assert [r.serialized_value_size for r in decoded] == [-1 if v is None else len(v) for _, v, *_ in records]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.binary(max_size=200), min_size=1, max_size=80),
    with_keys=st.booleans(),
    codec=codec_st,
)
def test_encode_values_equals_encode_batch(values: list[bytes], with_keys: bool, codec: Compression) -> None:
    keys = [v[:3] if i % 3 else None for i, v in enumerate(values)] if with_keys else None
    batch = encode_values(values, keys, timestamp_ms=BASE_TS, compression=codec)
    records = [(keys[i] if keys else None, v, BASE_TS, ()) for i, v in enumerate(values)]
    assert batch == encode_batch(records, compression=codec)


@pytest.mark.parametrize("count", [1, 63, 64, 65, 8191, 8192, 8193, 40_000])
def test_encode_values_uniform_lengths_across_varint_widths(count: int) -> None:
    values = [i.to_bytes(4, "big") * 25 for i in range(count)]
    batch = encode_values(values, timestamp_ms=BASE_TS)
    assert batch == encode_batch([(None, v, BASE_TS, ()) for v in values])
    decoded = decode_batches(batch, "t", 0)
    assert [r.value for r in decoded] == values
    assert [r.offset for r in decoded] == list(range(count))


def test_large_values_and_multibyte_varints() -> None:
    records = [(b"k" * 20_000, b"v" * 70_000, BASE_TS, [("h" * 200, b"x" * 40_000)]), (None, b"", BASE_TS - 5, [])]
    batch = encode_batch(records, compression=Compression.NONE)
    assert as_tuples(decode_batches(batch, "t", 0)) == expected(records)


def test_inputs_other_than_bytes() -> None:
    batch = encode_batch([(bytearray(b"k"), memoryview(b"v"), BASE_TS, [("h", bytearray(b"1"))])])
    assert as_tuples(decode_batches(batch, "t", 0)) == [(0, BASE_TS, b"k", b"v", [("h", b"1")])]
    with pytest.raises(TypeError):
        encode_batch([(None, "text", BASE_TS, ())])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        BatchBuilder().append(BASE_TS, "key", b"v", ())  # type: ignore[arg-type]
    assert decode_batches(bytearray(batch), "t", 0)[0].value == b"v"
    assert decode_batches(memoryview(batch), "t", 0)[0].value == b"v"


def test_empty_batches_are_rejected() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_values([])
    with pytest.raises(ValueError):
        BatchBuilder().build()


# --- builder ---------------------------------------------------------------------------------


def test_builder_respects_max_size_but_accepts_a_large_first_record() -> None:
    builder = BatchBuilder(max_size=1000)
    assert builder.estimated_size == HEADER_SIZE
    assert builder.append(BASE_TS, None, b"x" * 5000, ()) == 0  # first record always fits
    assert builder.append(BASE_TS, None, b"y", ()) is None
    assert builder.record_count == 1

    builder = BatchBuilder(max_size=1000)
    accepted = 0
    while builder.append(BASE_TS + accepted, b"key", b"v" * 100, [("h", b"1")]) is not None:
        accepted += 1
    assert accepted > 1
    batch = builder.build()
    assert len(batch) == builder.estimated_size <= 1000
    assert len(decode_batches(batch, "t", 0)) == accepted


def test_builder_producer_state_and_transactional_flag() -> None:
    builder = BatchBuilder(compression=Compression.LZ4, producer_id=5, producer_epoch=1, base_sequence=0)
    builder.append(BASE_TS, None, b"a" * 100, ())
    builder.append(BASE_TS + 10, None, b"b" * 100, ())
    builder.set_producer_state(42, 3, 17, transactional=True)
    batch = builder.build()
    header = read_batch_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.is_transactional and not header.is_control
    assert header.compression is Compression.LZ4
    assert header.max_timestamp == BASE_TS + 10
    assert header.partition_leader_epoch == -1


def test_builder_default_timestamp_is_now() -> None:
    builder = BatchBuilder()
    builder.append(None, None, b"v", ())
    assert abs(builder.base_timestamp - read_batch_header(builder.build()).base_timestamp) == 0
    assert builder.base_timestamp > BASE_TS


# --- header, CRC and in-place rewrites ------------------------------------------------------------


def test_header_properties() -> None:
    batch = encode_batch([(None, b"v", BASE_TS, ())] * 5, base_offset=100, producer_id=9, producer_epoch=2,
                         base_sequence=4, transactional=True, compression=Compression.GZIP)
    header = read_batch_header(batch)
    assert header.base_offset == 100
    assert header.last_offset == 104 and header.next_offset == 105
    assert header.magic == 2
    assert header.is_transactional and header.compression is Compression.GZIP and header.timestamp_type == 0
    assert [r.offset for r in decode_batches(batch, "t", 0)] == [100, 101, 102, 103, 104]


def test_read_batch_header_errors() -> None:
    batch = bytearray(encode_values([b"x"], timestamp_ms=BASE_TS))
    with pytest.raises(CorruptRecordError):
        read_batch_header(batch[:60])
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        read_batch_header(batch)
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batch_headers(bytes(batch)))


@pytest.mark.parametrize("codec", list(Compression))
def test_crc_corruption_is_detected(codec: Compression) -> None:
    batch = bytearray(encode_values([b"value-%d" % i for i in range(50)], timestamp_ms=BASE_TS, compression=codec))
    batch[-3] ^= 0x40
    header = read_batch_header(batch)
    assert not verify_crc(batch, 0, header)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(batch, "t", 0)


def test_corrupt_records_with_valid_crc_raise_typed_errors() -> None:
    good = encode_values([b"abc"] * 3, timestamp_ms=BASE_TS)
    truncated = bytearray(good[:-2])
    struct.pack_into(">i", truncated, 8, len(truncated) - 12)
    write_crc(truncated, 0)
    with pytest.raises(CorruptRecordError):
        decode_batches(truncated, "t", 0)
    extra = bytearray(good + b"\x00\x00")
    struct.pack_into(">i", extra, 8, len(extra) - 12)
    write_crc(extra, 0)
    with pytest.raises(CorruptRecordError):
        decode_batches(extra, "t", 0)
    negative = bytearray(good)
    negative[HEADER_SIZE + 5] = 0x03  # value length -2
    write_crc(negative, 0)
    with pytest.raises(CorruptRecordError):
        decode_batches(negative, "t", 0)


def test_partial_trailing_batch_is_ignored() -> None:
    first = encode_values([b"a"] * 3, timestamp_ms=BASE_TS)
    second = bytearray(encode_values([b"b"] * 2, timestamp_ms=BASE_TS))
    set_base_offset(second, 0, 3)
    third = encode_values([b"c"] * 4, timestamp_ms=BASE_TS)
    for cut in (1, 30, HEADER_SIZE, len(third) - 1):
        buf = first + bytes(second) + third[:cut]
        assert [pos for pos, _ in iter_batch_headers(buf)] == [0, len(first)]
        assert [r.value for r in decode_batches(buf, "t", 0)] == [b"a"] * 3 + [b"b"] * 2
    assert decode_batches(b"", "t", 0) == []


def test_set_base_offset_keeps_crc_valid() -> None:
    batch = bytearray(encode_values([b"x", b"y"], timestamp_ms=BASE_TS, compression=Compression.ZSTD))
    crc_before = read_batch_header(batch).crc
    set_base_offset(batch, 0, 1234, partition_leader_epoch=7)
    header = read_batch_header(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.crc) == (1234, 7, crc_before)
    assert verify_crc(batch, 0, header)
    assert [r.offset for r in decode_batches(batch, "t", 0)] == [1234, 1235]
    set_base_offset(memoryview(batch), 0, 99)
    assert read_batch_header(batch).base_offset == 99 and read_batch_header(batch).partition_leader_epoch == 7


def test_set_log_append_time() -> None:
    records = [(None, b"v%d" % i, BASE_TS + i, ()) for i in range(5)]
    buf = bytearray(b"\x00" * 10 + encode_batch(records, compression=Compression.SNAPPY))
    set_log_append_time(buf, 10, BASE_TS + 999)
    header = read_batch_header(buf, 10)
    assert header.timestamp_type == 1 and header.max_timestamp == BASE_TS + 999
    assert header.base_timestamp == BASE_TS and header.compression is Compression.SNAPPY
    assert verify_crc(buf, 10, header)
    decoded = decode_batch(buf, 10, header, "t", 0)
    assert [(r.timestamp, r.timestamp_type) for r in decoded] == [(BASE_TS + 999, 1)] * 5


def test_min_offset_drops_records_before_the_fetch_offset() -> None:
    first = bytearray(encode_values([b"a%d" % i for i in range(5)], timestamp_ms=BASE_TS))
    set_base_offset(first, 0, 10)
    second = bytearray(encode_values([b"b%d" % i for i in range(5)], timestamp_ms=BASE_TS, compression=Compression.LZ4))
    set_base_offset(second, 0, 15)
    buf = bytes(first + second)
    assert [r.offset for r in decode_batches(buf, "t", 0, min_offset=13)] == list(range(13, 20))
    assert [r.offset for r in decode_batches(buf, "t", 0, min_offset=17)] == [17, 18, 19]
    assert decode_batches(buf, "t", 0, min_offset=20) == []


# --- control batches -----------------------------------------------------------------------------


@pytest.mark.parametrize(("commit", "control_type"), [(True, 1), (False, 0)])
def test_control_batch(commit: bool, control_type: int) -> None:
    marker = build_control_batch(77, 4, commit, coordinator_epoch=12, timestamp_ms=BASE_TS)
    header = read_batch_header(marker)
    assert header.attributes == 0x30 and header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 4, -1)
    assert header.record_count == 1 and verify_crc(marker, 0, header)
    assert read_control_type(marker, 0, header) == control_type
    ((_, _, key, value, headers),) = decode_raw_records(marker, 0, header)
    assert key == struct.pack(">hh", 0, control_type)
    assert value == struct.pack(">hi", 0, 12)
    assert headers == []
    assert decode_batch(marker, 0, header, "t", 0) == []
    data = bytearray(encode_values([b"x"], timestamp_ms=BASE_TS, producer_id=77, producer_epoch=4,
                                   base_sequence=0, transactional=True))
    buf = bytearray(marker)
    set_base_offset(buf, 0, 1)
    assert [r.value for r in decode_batches(bytes(data + buf), "t", 0)] == [b"x"]


def test_read_control_type_rejects_data_batches() -> None:
    batch = encode_values([b"x"], timestamp_ms=BASE_TS)
    with pytest.raises(CorruptRecordError):
        read_control_type(batch, 0, read_batch_header(batch))


@settings(max_examples=300, deadline=None)
@given(
    records=records_st,
    codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.SNAPPY]),
    where=st.integers(min_value=0),
    byte=st.integers(min_value=0, max_value=255),
)
def test_mangled_records_with_a_valid_crc_decode_or_raise_corrupt(
    records: list[Any], codec: Compression, where: int, byte: int
) -> None:
    """A broker must turn any malformed-but-checksummed batch into a typed error, nothing else.

    Any byte after the CRC may change: attributes, counts, deltas, lengths, payload.
    """
    batch = bytearray(encode_batch(records, compression=codec))
    first = 21  # attributes: the first byte the CRC covers
    batch[first + where % (len(batch) - first)] = byte
    write_crc(batch, 0)
    header = read_batch_header(batch)
    with contextlib.suppress(CorruptRecordError, UnsupportedCompressionTypeError):
        decode_batches(batch, "t", 0)
    with contextlib.suppress(CorruptRecordError, UnsupportedCompressionTypeError):
        decode_raw_records(batch, 0, header)


# --- vectorised decoder vs the pure-Python reference loop -------------------------------------

from kafkakit.records import fastdecode  # noqa: E402
from kafkakit.records.decoder import _decode_section_slowly, _read_headers, _records_section  # noqa: E402

# Values that cross the 1/2/3-byte length varint boundaries (63, 8191 bytes).
fast_value_st = st.none() | st.binary(max_size=70) | st.sampled_from([b"", b"v" * 63, b"w" * 64, b"x" * 8200])
# Deltas from one-byte varints up to ones too long for the fast path (> 4 bytes: 2**27 and more).
fast_delta_st = st.sampled_from([0, 1, -1, 63, -64, 64, 8191, 8192, 2**20, -(2**26), 2**27, 2**40])
fast_record_st = st.tuples(
    st.none() | st.sampled_from([b"", b"k", b"key" * 30]),
    fast_value_st,
    fast_delta_st.map(lambda d: BASE_TS + d),
    st.sampled_from([[], [], [], [("h", b"1")], [("a", None), ("", b"")]]),
)
fast_batch_st = st.tuples(
    st.lists(fast_record_st, min_size=1, max_size=90),
    codec_st,
    st.booleans(),  # LogAppendTime
    st.integers(min_value=0, max_value=2**40),  # base offset
)


def _fetch_buffer(batches: list[Any]) -> bytes:
    out = bytearray()
    for records, codec, log_append, base_offset in batches:
        batch = bytearray(encode_batch(records, compression=codec))
        set_base_offset(batch, 0, base_offset)
        if log_append:
            set_log_append_time(batch, 0, BASE_TS + 12345)
        out += batch
    return bytes(out)


def _reference(buf: bytes, min_offset: int) -> list[Any] | CorruptRecordError:
    out: list[Any] = []
    try:
        for pos, header in iter_batch_headers(buf):
            _decode_section_slowly(out, _records_section(buf, pos, header), "t", 3, min_offset)
    except CorruptRecordError as exc:
        return exc
    return out


def _fast(buf: bytes, min_offset: int) -> list[Any] | None:
    sections = [_records_section(buf, pos, header) for pos, header in iter_batch_headers(buf)]
    return fastdecode.decode_sections(sections, "t", 3, min_offset, _read_headers)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches=st.lists(fast_batch_st, min_size=1, max_size=3), skip=st.integers(min_value=0, max_value=100))
def test_vectorised_decoder_matches_reference(batches: list[Any], skip: int) -> None:
    buf = _fetch_buffer(batches)
    min_offset = batches[0][3] + skip
    reference = _reference(buf, min_offset)
    assert not isinstance(reference, CorruptRecordError)
    fast = _fast(buf, min_offset)
    event("fast path" if fast is not None else "declined")
    if fast is not None:  # None: the fast path declined (e.g. a delta beyond 2**27)
        assert fast == reference
        assert [type(r.headers) for r in fast] == [tuple] * len(fast)
    assert decode_batches(buf, "t", 3, min_offset=min_offset) == reference


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=fast_batch_st, where=st.integers(min_value=0), byte=st.integers(min_value=0, max_value=255))
def test_vectorised_decoder_on_mangled_records_agrees_with_reference(batch: Any, where: int, byte: int) -> None:
    """A corrupted records section: the fast path decodes it identically, declines, or both paths raise."""
    records, _codec, log_append, base_offset = batch
    buf = bytearray(_fetch_buffer([(records, Compression.NONE, log_append, base_offset)]))
    buf[HEADER_SIZE + where % (len(buf) - HEADER_SIZE)] = byte
    write_crc(buf, 0)
    data = bytes(buf)
    reference = _reference(data, 0)
    fast = _fast(data, 0)
    event(f"reference {'raised' if isinstance(reference, CorruptRecordError) else 'decoded'}, fast path "
          f"{'declined' if fast is None else 'decoded'}")
    if isinstance(reference, CorruptRecordError):
        assert fast is None
        with pytest.raises(CorruptRecordError):
            decode_batches(data, "t", 3)
    else:
        assert fast is None or fast == reference
        assert decode_batches(data, "t", 3) == reference


def test_vectorised_decoder_takes_the_common_cases() -> None:
    """The fast path must not silently decline typical batches (it would still be correct, but slow)."""
    values = [b"x" * (i % 150) for i in range(10_000)]  # offset deltas and lengths of 1 and 2 bytes
    records = [(None if i % 3 else b"k%d" % i, v, BASE_TS + i * 3, []) for i, v in enumerate(values)]
    records[17] = (b"key", None, BASE_TS - 5000, [("trace", b"abc"), ("n", None)])
    for codec in Compression:
        buf = _fetch_buffer([(records, codec, False, 500), (records[:100], codec, True, 10_500)])
        fast = _fast(buf, 0)
        assert fast is not None and fast == _reference(buf, 0), codec
        assert list(fast[17].headers) == [("trace", b"abc"), ("n", None)]
        assert fast[-1].timestamp == BASE_TS + 12345 and fast[-1].timestamp_type == 1
    same = _fetch_buffer([([(None, b"v" * 100, BASE_TS, [])] * 9000, Compression.NONE, False, 0)])
    assert _fast(same, 0) == _reference(same, 0)
    assert _fast(same, 8990) == _reference(same, 8990)


def test_vectorised_decoder_declines_what_it_cannot_decode() -> None:
    records = [(None, b"v", BASE_TS + (2**40 if i == 30 else 0), []) for i in range(40)]
    buf = _fetch_buffer([(records, Compression.NONE, False, 0)])
    assert _fast(buf, 0) is None  # a 6-byte timestamp delta
    assert [r.timestamp for r in decode_batches(buf, "t", 3)][29:31] == [BASE_TS, BASE_TS + 2**40]
    negative = bytearray(_fetch_buffer([([(None, b"abc", BASE_TS, [])] * 30, Compression.NONE, False, 0)]))
    negative[HEADER_SIZE + 5] = 0x03  # first value length -2
    write_crc(negative, 0)
    assert _fast(bytes(negative), 0) is None
    with pytest.raises(CorruptRecordError, match="negative value length"):
        decode_batches(negative, "t", 0)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_vectorised_decoder_copies_equal_sized_payloads_exactly(codec: Compression) -> None:
    """Equal-sized keys and values take the strided numpy copy: NUL bytes (also trailing ones) must survive,
    and runs of constant stride must be split where the record length changes (offset delta 64, 8192)."""
    size = 24
    records = [
        (bytes([i % 7, 0, 0]), bytes([0, i % 251]) + b"\x00" * (size - 3) + bytes([i % 2]), BASE_TS + i // 100, [])
        for i in range(9000)
    ]
    buf = _fetch_buffer([(records, codec, False, 0), (records[:50], codec, False, 9000)])
    fast = _fast(buf, 0)
    assert fast is not None and fast == _reference(buf, 0)
    assert [r.value for r in fast[:9000]] == [v for _, v, _, _ in records]
    assert all(type(r.value) is bytes and type(r.key) is bytes for r in fast)
    assert _fast(buf, 8999) == _reference(buf, 8999)
    empty = _fetch_buffer([([(b"", b"", BASE_TS, [])] * 40, codec, False, 7)])
    assert _fast(empty, 0) == _reference(empty, 0)


# --- the garbage collector around large decodes (kafkakit.records.gcpolicy) --------------------

import gc  # noqa: E402
import weakref  # noqa: E402

from kafkakit.records import gcpolicy  # noqa: E402


class _Node:
    """A cyclic object the collector must still reclaim."""

    def __init__(self) -> None:
        self.me = self


def _large_fetch() -> bytes:
    return _fetch_buffer([([(None, b"v" * 10, BASE_TS, [])] * (gcpolicy.BYPASS_RECORDS + 10), Compression.NONE, False, 0)])


def test_large_decode_keeps_records_out_of_the_young_generations() -> None:
    data = _large_fetch()
    assert gc.isenabled()
    records = decode_batches(data, "t", 0)
    assert len(records) == gcpolicy.BYPASS_RECORDS + 10
    young = {id(o) for o in gc.get_objects(generation=0)} | {id(o) for o in gc.get_objects(generation=1)}
    assert not any(id(r) in young for r in records[:: len(records) // 50])
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_young_cyclic_garbage_is_still_collected_around_large_decodes() -> None:
    node = _Node()
    dead = weakref.ref(node)
    del node  # unreachable cycle in the young generation, not collected yet
    decode_batches(_large_fetch(), "t", 0)
    assert dead() is None, "the collection before a large decode must reclaim young cycles"


def test_full_collections_still_happen_when_only_decodes_allocate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpolicy, "_FULL_COLLECTION_EVERY", 3)
    data = _large_fetch()
    before = gc.get_stats()[2]["collections"]
    for _ in range(5):
        decode_batches(data, "t", 0)
    assert gc.get_stats()[2]["collections"] > before


def test_an_application_that_disabled_or_froze_the_collector_is_left_alone() -> None:
    data = _large_fetch()
    gc.disable()
    try:
        decode_batches(data, "t", 0)
        assert not gc.isenabled()
    finally:
        gc.enable()
    keep = [_Node() for _ in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        records = len(decode_batches(data, "t", 0))
        # Frozen objects that other threads free meanwhile leave the count; an unfreeze would
        # empty it, and freezing the records would add thousands.
        assert records >= gcpolicy.BYPASS_RECORDS
        assert frozen - 100 <= gc.get_freeze_count() <= frozen and gc.isenabled()
    finally:
        gc.unfreeze()
    del keep


# --- the uniform-records encoder vs the reference loop -------------------------------------------

from kafkakit.records import fastencode  # noqa: E402
from kafkakit.records.encoder import UNIFORM_MIN_RECORDS, _encode_records, _encode_records_slowly  # noqa: E402


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    count=st.sampled_from([fastencode.MIN_RECORDS, 63, 64, 65, 200, 8191, 8193]),
    length=st.sampled_from([0, 1, 62, 63, 64, 100, 8200]),
    deltas=st.lists(
        st.one_of(st.integers(min_value=0, max_value=63), st.integers(min_value=0, max_value=(1 << 20) - 1)),
        min_size=1,
        max_size=50,
    ),
    rising=st.booleans(),
    fill=st.binary(min_size=1, max_size=8),
    key_length=st.sampled_from([None, None, 0, 1, 11, 64, 300]),
)
def test_uniform_encoder_matches_the_loop(
    count: int, length: int, deltas: list[int], rising: bool, fill: bytes, key_length: int | None
) -> None:
    """No headers, equal value lengths, keys all null or all of one length: the numpy encoder must
    write the loop's bytes exactly (offset deltas crossing the 1/2-byte varint widths at 64 and
    8192, key and value lengths at 64, and timestamp deltas of 1-3 varint bytes, rising as a
    clock's or in any order)."""
    if rising:
        deltas = sorted(deltas)
    stamps = [BASE_TS] + [BASE_TS + deltas[min(i, len(deltas) - 1) if rising else i % len(deltas)] for i in range(1, count)]

    def key(i: int) -> bytes | None:  # distinct keys of one length
        return None if key_length is None else (b"%d-" % i * key_length)[:key_length]

    records = [(key(i), (fill * (length // len(fill) + 1))[:length], stamps[i], ()) for i in range(count)]
    fast = fastencode.encode_uniform_records(records)
    if fast is None:  # widths going up and down too often: the loop is as quick
        assert not rising and len(set(deltas)) > 1
        return
    assert fast == _encode_records_slowly(records)


def test_uniform_encoder_takes_a_slow_producers_timestamps() -> None:
    """A request that coalesced records over seconds (a producer fallen behind) stays on the fast
    path: one record per millisecond over 9,000 ms crosses the 1- and 2-byte timestamp widths."""
    records = [(None, b"v" * 100, BASE_TS + i, ()) for i in range(9000)]
    fast = fastencode.encode_uniform_records(records)
    assert fast is not None and fast == _encode_records_slowly(records)
    assert fast[2] == BASE_TS + 8999


def test_uniform_encoder_declines_other_records() -> None:
    """Anything but the uniform shape goes to the loop (same bytes via _encode_records)."""
    n = fastencode.MIN_RECORDS
    cases = [
        [(None, b"abc", BASE_TS + ((1 << 20) if i == 5 else 0), ()) for i in range(n)],  # a 4-byte timestamp delta
        [(None, b"abc", BASE_TS + (64 if i % 2 else 0), ()) for i in range(200)],  # 1-2-1-2... bytes: 200 runs
        [(None, b"abc", BASE_TS - (1 if i == 5 else 0), ()) for i in range(n)],  # a negative delta
        [(None, b"abc" * (1 + i % 2), BASE_TS, ()) for i in range(n)],  # lengths differ
        [(b"k" if i == 3 else None, b"abc", BASE_TS, ()) for i in range(n)],  # one key among null keys
        [(None if i == 3 else b"k", b"abc", BASE_TS, ()) for i in range(n)],  # one null key among keys
        [(b"k" * (1 + i % 2), b"abc", BASE_TS, ()) for i in range(n)],  # key lengths differ
        [(None, b"abc", BASE_TS, [("h", b"1")] if i == 3 else ()) for i in range(n)],  # headers
        [(None, None if i == 3 else b"abc", BASE_TS, ()) for i in range(n)],  # a null value
    ]
    for records in cases:
        assert fastencode.encode_uniform_records(records) is None
        assert _encode_records(records) == _encode_records_slowly(records)
    for odd_stamp in (float(BASE_TS), str(BASE_TS), 1 << 70):  # never truncated, parsed or wrapped
        assert fastencode.encode_uniform_records([(None, b"abc", BASE_TS, ())] * (n - 1) + [(None, b"abc", odd_stamp, ())]) is None
    with pytest.raises(TypeError):
        _encode_records([(None, "text", BASE_TS, ())] * n)
    as_bytearray = [(None, bytearray(b"abc"), BASE_TS, ())] * n
    assert fastencode.encode_uniform_records(as_bytearray) == _encode_records_slowly(as_bytearray)


@dataclass
class _Queued:
    """Records as columns, the shape of the producer's batches (kafkakit.records.QueuedRecords)."""

    values: list[Any] = field(default_factory=list)
    stamps: list[Any] = field(default_factory=list)
    keys: list[Any] | None = None
    unkeyed: int = 0
    headers: dict[int, Any] | None = None

    @classmethod
    def of(cls, records: Sequence[Any], stamps_per_ms: int = 1) -> _Queued:
        queued = cls()
        for index, (key, value, stamp, headers) in enumerate(records):
            queued.values.append(value)
            queued.stamps.append(stamp * stamps_per_ms)
            if key is not None:  # keys up to the last keyed record, None for the keyless ones
                missing = index - len(queued.keys or ())
                queued.keys = [*(queued.keys or ()), *[None] * missing, key]
                queued.unkeyed += missing
            if headers:
                queued.headers = {**(queued.headers or {}), index: headers}
        return queued


@pytest.mark.parametrize("uniform", [True, False])
def test_nanosecond_stamps_encode_as_their_milliseconds(uniform: bool) -> None:
    """The producer stores time.time_ns() stamps (stamps_per_ms=1,000,000): the batch must be the
    one with those stamps floored to milliseconds, on the uniform path and the loop, one part or several."""
    from kafkakit.records import encode_queued_batches

    count = 3 * UNIFORM_MIN_RECORDS
    nanos = [BASE_TS * 1_000_000 + i * 333_333 + (999_999 if i % 7 == 0 else 0) for i in range(count)]
    records = [(None if uniform or i % 3 else b"k", b"v%04d" % i, stamp // 1_000_000, ()) for i, stamp in enumerate(nanos)]
    in_nanos = _Queued.of(records)
    in_nanos.stamps = nanos
    expected = encode_batch(records)
    assert encode_queued_batches([in_nanos], stamps_per_ms=1_000_000) == expected
    cut = UNIFORM_MIN_RECORDS
    parts = [_Queued.of(records[:cut]), _Queued.of(records[cut:])]
    parts[0].stamps, parts[1].stamps = nanos[:cut], nanos[cut:]
    assert encode_queued_batches(parts, stamps_per_ms=1_000_000) == expected


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("codec", ["none", "lz4", "gzip"])
@pytest.mark.parametrize("producer", [(-1, -1, -1, False), (4711, 3, 1000, False), (4711, 3, 2**31 - 5, True)])
def test_queued_records_encode_as_tuple_batches(uniform: bool, codec: str, producer: tuple[int, int, int, bool]) -> None:
    """encode_queued_batches (the producer's batches, producer fields written in place) gives
    encode_batch's bytes, whether the uniform encoder's scratch buffer or the loop builds them."""
    from kafkakit.records import encode_queued_batches

    producer_id, epoch, sequence, transactional = producer
    count = 3 * UNIFORM_MIN_RECORDS
    records = [
        (None if uniform or i % 2 else b"key", b"v%04d" % i, BASE_TS + i % 9, () if uniform or i % 5 else [("h", b"x")])
        for i in range(count)
    ]
    expected = encode_batch(
        records, compression=codec, producer_id=producer_id, producer_epoch=epoch,
        base_sequence=sequence, transactional=transactional,
    )  # fmt: skip
    for _ in range(2):  # the second call reuses the scratch buffer
        got = encode_queued_batches(
            [_Queued.of(records)], compression=codec, producer_id=producer_id, producer_epoch=epoch,
            base_sequence=sequence, transactional=transactional,
        )  # fmt: skip
        assert got == expected
    (_, header), = iter_batch_headers(got)
    assert verify_crc(got, 0, header) and header.producer_id == producer_id and header.is_transactional == transactional
    torn = _Queued.of(records)  # a timestamp short
    torn.stamps.pop()
    with pytest.raises(ValueError, match="values but"):
        encode_queued_batches([torn])
    with pytest.raises(ValueError, match="at least one record"):
        encode_queued_batches([_Queued()])


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_several_queued_parts_encode_as_their_concatenation(uniform: bool, codec: str) -> None:
    """encode_queued_batches over several parts (the producer's coalesced batches) gives the bytes of
    one batch of all their records, in order, whether they are uniform, split unevenly or one is not uniform."""
    from kafkakit.records import encode_queued_batches

    count = 5 * UNIFORM_MIN_RECORDS
    records = [(None, b"v%04d" % i, BASE_TS + i % 7, ()) for i in range(count)]
    if not uniform:
        records[count - 3] = (b"key", records[count - 3][1], BASE_TS, [("h", b"x")])
    cuts = [0, 1, UNIFORM_MIN_RECORDS, count - 2, count]  # a one-record part too
    parts = [_Queued.of(records[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
    expected = encode_batch(records, compression=codec, producer_id=7, producer_epoch=1, base_sequence=40)
    got = encode_queued_batches(parts, compression=codec, producer_id=7, producer_epoch=1, base_sequence=40)
    assert got == expected
    whole = encode_queued_batches([_Queued.of(records)], compression=codec, producer_id=7, producer_epoch=1, base_sequence=40)
    assert whole == expected


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_keyed_queued_records_take_the_uniform_encoder(codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer's keyed batches (a key per record, keys of one length, no headers) are encoded
    by numpy, across coalesced parts, with encode_batch's bytes; mixed keys go to the loop."""
    from kafkakit.records import encode_queued_batches
    from kafkakit.records import encoder as encoder_module

    uniform_calls: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = fastencode.encode_uniform_values(*args, **kwargs)
        uniform_calls.append(result is not None)
        return result

    monkeypatch.setattr(encoder_module, "encode_uniform_values", spy)
    count = 4 * UNIFORM_MIN_RECORDS
    records = [(b"user-%04d" % i, b"v%04d" % i, BASE_TS + i // 10, ()) for i in range(count)]
    cut = count // 3
    parts = [_Queued.of(records[:cut]), _Queued.of(records[cut:])]
    expected = encode_batch(records, compression=codec)
    assert encode_queued_batches(parts, compression=codec) == expected
    assert uniform_calls == [True]
    mixed = [(None if i % 5 == 0 else key, value, stamp, ()) for i, (key, value, stamp, _) in enumerate(records)]
    assert encode_queued_batches([_Queued.of(mixed)], compression=codec) == encode_batch(mixed, compression=codec)
    assert uniform_calls == [True]  # not offered to the uniform encoder at all


def test_request_frames_keep_large_fields_as_chunks() -> None:
    """A record batch of 64 KiB or more travels as its own chunk (not copied); the chunks join into the frame."""
    from kafkakit.protocol import ApiKey, encode_request, encode_request_chunks
    from kafkakit.protocol.build import make_request

    batch = encode_batch([(None, b"x" * 70_000, BASE_TS, ())])
    request = make_request(
        ApiKey.PRODUCE, 9, transactional_id=None, acks=1, timeout=1000,
        topic_data=[{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    )  # fmt: skip
    chunks = encode_request_chunks(5, "client", request)
    assert any(chunk is batch for chunk in chunks)
    frame = b"".join(chunks)
    assert frame == encode_request(5, "client", request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    small = make_request(ApiKey.API_VERSIONS, 3, client_software_name="k", client_software_version="1")
    assert len(encode_request_chunks(6, "client", small)) == 1
