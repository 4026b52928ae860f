"""Cross-checks of kafkakit.records against aiokafka's and kafka-python's record batch code.

Batches built by their builders must decode identically with ours, and ours
must decode with their readers (CRC included), for every codec they support.
"""

from __future__ import annotations

from typing import Any

import kafka.codec as kafka_codec
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafkakit.records import (
    XERIAL_MAGIC,
    Compression,
    build_control_batch,
    decode_batches,
    encode_batch,
    read_batch_header,
    verify_crc,
)

BASE_TS = 1_700_000_000_000

# Compressible records (both foreign builders drop compression when it does not help),
# with null keys/values, empty values, headers with None values and negative timestamp deltas.
RECORDS: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = [
    (None if i % 4 == 0 else b"key-%d" % (i % 7), None if i % 9 == 5 else b"value %d " % i * (i % 13),
     BASE_TS + (i * 37) % 500 - 200, [(f"h{j}", None if j == 1 else b"hv" * j) for j in range(i % 3)])
    for i in range(300)
]
EXPECTED = [(i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(RECORDS)]

KAFKA_PYTHON_CODECS = [c for c, available in [
    (Compression.NONE, True),
    (Compression.GZIP, kafka_codec.has_gzip()),
    (Compression.SNAPPY, kafka_codec.has_snappy()),
    (Compression.LZ4, kafka_codec.has_lz4()),
    (Compression.ZSTD, kafka_codec.has_zstd()),
] if available]


def ours(batch: bytes) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_batches(batch, "t", 0)]


def theirs(records: Any) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in records]


def build_with(builder_cls: Any, codec: Compression) -> bytes:
    builder = builder_cls(2, int(codec), 0, -1, -1, -1, 1 << 24)
    for i, (key, value, ts, headers) in enumerate(RECORDS):
        builder.append(i, ts, key, value, headers)
    return bytes(builder.build())


def test_kafka_python_supports_every_codec_here() -> None:
    # If this fails a codec silently dropped out of the cross-checks below.
    assert KAFKA_PYTHON_CODECS == list(Compression)


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_builder_decodes_with_ours(codec: Compression) -> None:
    batch = build_with(AioBuilder, codec)
    header = read_batch_header(batch)
    assert header.compression is codec
    assert verify_crc(batch, 0, header)
    assert ours(batch) == EXPECTED


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_kafka_python_builder_decodes_with_ours(codec: Compression) -> None:
    batch = build_with(KpBuilder, codec)
    header = read_batch_header(batch)
    assert header.compression is codec
    assert verify_crc(batch, 0, header)
    assert ours(batch) == EXPECTED


def test_foreign_snappy_is_xerial_framed() -> None:
    for builder_cls in (AioBuilder, KpBuilder):
        batch = build_with(builder_cls, Compression.SNAPPY)
        assert batch[61:69] == XERIAL_MAGIC, builder_cls
        assert ours(batch) == EXPECTED


@pytest.mark.parametrize("codec", list(Compression))
def test_our_batches_decode_with_aiokafka(codec: Compression) -> None:
    batch = encode_batch(RECORDS, compression=codec, base_offset=1000)
    reader = AioBatch(batch)
    assert reader.validate_crc()
    assert reader.compression_type == codec
    assert reader.base_offset == 1000 and reader.next_offset == 1300
    assert reader.max_timestamp == max(ts for _, _, ts, _ in RECORDS)
    assert theirs(reader) == [(1000 + o, ts, k, v, h) for o, ts, k, v, h in EXPECTED]


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_our_batches_decode_with_kafka_python(codec: Compression) -> None:
    batch = encode_batch(RECORDS, compression=codec)
    reader = KpBatch(batch)
    assert reader.validate_crc()
    assert reader.compression_type == codec
    assert theirs(reader) == EXPECTED


def test_our_control_batch_reads_as_control_in_both() -> None:
    marker = build_control_batch(5, 1, commit=True, coordinator_epoch=3, timestamp_ms=BASE_TS)
    aio = AioBatch(marker)
    assert aio.validate_crc() and aio.is_control_batch and aio.is_transactional
    kp = KpBatch(marker)
    assert kp.validate_crc() and kp.is_control_batch
    (control,) = list(kp)
    assert control.commit and not control.abort
