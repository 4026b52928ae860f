"""Cross-checks of kafkakit.records against aiokafka's and kafka-python's record batch code.

Batches built by their builders must decode identically with ours, and ours
must decode with their readers (CRC included), for every codec they support.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
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
    set_base_offset,
    verify_crc,
)

from tests.brokers import ensure_kafka_jars, missing_kafka_tools

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
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decode_batches(batch, "t", 0)]


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


# --- Apache Kafka's Java client (the reference implementation) ---------------------------------

JAVA_CHECK = r"""
import java.nio.ByteBuffer;
import java.nio.file.*;
import java.util.*;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.*;

public class RecordsCheck {
    static String hex(ByteBuffer b) {
        if (b == null) return "null";
        StringBuilder sb = new StringBuilder("x");
        ByteBuffer d = b.duplicate();
        while (d.hasRemaining()) sb.append(String.format("%02x", d.get()));
        return sb.toString();
    }
    static String hex(byte[] b) { return b == null ? "null" : hex(ByteBuffer.wrap(b)); }
    static byte[] unhex(String s) {
        if (s.equals("null")) return null;
        byte[] b = new byte[(s.length() - 1) / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(1 + 2 * i, 3 + 2 * i), 16);
        return b;
    }
    static Compression codec(String name) {
        switch (name) {
            case "none": return Compression.NONE;
            case "gzip": return Compression.gzip().build();
            case "snappy": return Compression.snappy().build();
            case "lz4": return Compression.lz4().build();
            default: return Compression.zstd().build();
        }
    }
    public static void main(String[] args) throws Exception {
        Path dir = Paths.get(args[1]);
        for (String name : args[2].split(",")) {
            if (args[0].equals("read")) {
                byte[] data = Files.readAllBytes(dir.resolve(name + ".bin"));
                StringBuilder out = new StringBuilder();
                for (MutableRecordBatch batch : MemoryRecords.readableRecords(ByteBuffer.wrap(data)).batches()) {
                    batch.ensureValid();
                    out.append("batch ").append(batch.compressionType().name).append(' ').append(batch.baseOffset()).append('\n');
                    for (org.apache.kafka.common.record.internal.Record r : batch) {
                        r.ensureValid();
                        if (batch.isControlBatch()) {
                            EndTransactionMarker m = EndTransactionMarker.deserialize(r);
                            out.append("control ").append(m.controlType()).append(' ').append(m.coordinatorEpoch()).append('\n');
                            continue;
                        }
                        out.append(r.offset()).append(' ').append(r.timestamp()).append(' ').append(hex(r.key())).append(' ').append(hex(r.value()));
                        for (Header h : r.headers()) out.append(' ').append(h.key()).append('=').append(hex(h.value()));
                        out.append('\n');
                    }
                }
                Files.writeString(dir.resolve(name + ".txt"), out.toString());
            } else {
                MemoryRecordsBuilder builder = MemoryRecords.builder(
                    ByteBuffer.allocate(1 << 22), RecordBatch.CURRENT_MAGIC_VALUE, codec(name), TimestampType.CREATE_TIME, 0L);
                for (String line : Files.readAllLines(dir.resolve("records.txt"))) {
                    String[] f = line.split(" ");
                    List<Header> headers = new ArrayList<>();
                    for (int i = 3; i < f.length; i++) {
                        String[] kv = f[i].split("=", 2);
                        headers.add(new RecordHeader(kv[0], unhex(kv[1])));
                    }
                    builder.append(Long.parseLong(f[0]), unhex(f[1]), unhex(f[2]), headers.toArray(new Header[0]));
                }
                ByteBuffer buf = builder.build().buffer();
                byte[] bytes = new byte[buf.remaining()];
                buf.get(bytes);
                Files.write(dir.resolve(name + ".java.bin"), bytes);
            }
        }
    }
}
"""


def _hex(data: bytes | None) -> str:
    return "null" if data is None else "x" + data.hex()


def _spec(ts: int, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> str:
    return " ".join([str(ts), _hex(key), _hex(value)] + [f"{k}={_hex(v)}" for k, v in headers])


def _run_java(lib: Path, source: Path, *args: str) -> None:
    proc = subprocess.run(
        ["java", "-cp", f"{lib}/*", str(source), *args], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.interop
def test_java_kafka_clients_agrees_with_us_in_both_directions(tmp_path: Path) -> None:
    reason = missing_kafka_tools()
    if reason:
        pytest.skip(reason)
    lib = ensure_kafka_jars()
    source = tmp_path / "RecordsCheck.java"
    source.write_text(JAVA_CHECK)
    names = [c.name.lower() for c in Compression]

    # Java reads what we write (ensureValid checks CRCs and record framing).
    for codec in Compression:
        data = encode_batch(RECORDS, compression=codec, base_offset=500)
        marker = bytearray(build_control_batch(7, 2, commit=codec != Compression.GZIP, coordinator_epoch=9,
                                               timestamp_ms=BASE_TS))
        set_base_offset(marker, 0, 800)
        (tmp_path / f"{codec.name.lower()}.bin").write_bytes(data + bytes(marker))
    _run_java(lib, source, "read", str(tmp_path), ",".join(names))
    for codec in Compression:
        lines = (tmp_path / f"{codec.name.lower()}.txt").read_text().splitlines()
        marker_type = "ABORT" if codec == Compression.GZIP else "COMMIT"
        assert lines == (
            [f"batch {codec.name.lower()} 500"]
            + [f"{500 + o} {_spec(ts, k, v, h)}" for o, ts, k, v, h in EXPECTED]
            + ["batch none 800", f"control {marker_type} 9"]
        )

    # We read what Java writes.
    (tmp_path / "records.txt").write_text("".join(_spec(ts, k, v, h) + "\n" for _, ts, k, v, h in EXPECTED))
    _run_java(lib, source, "write", str(tmp_path), ",".join(names))
    for codec in Compression:
        batch = (tmp_path / f"{codec.name.lower()}.java.bin").read_bytes()
        assert read_batch_header(batch).compression is codec
        assert ours(batch) == EXPECTED
