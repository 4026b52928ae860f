"""Compression codecs of record batch v2, in the byte formats the Java client uses.

* gzip: one gzip member (zlib, level 6 like Java's ``GZIPOutputStream``).
* snappy: the xerial snappy-java stream framing on output (Java brokers and
  clients expect it); input accepts xerial-framed and raw snappy.
* lz4: a standard LZ4 frame with independent blocks and no content size,
  because Java's ``Lz4BlockInputStream`` rejects dependent (linked) blocks.
* zstd: one zstd frame; decoding does not need the content size in the header
  (Java's zstd-jni streams omit it).
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard
from kafkakit.errors import CorruptRecordError, KafkaConfigError, UnsupportedCompressionTypeError

__all__ = ["Compression", "compress", "decompress", "XERIAL_MAGIC"]


class Compression(enum.IntEnum):
    """Codec ids stored in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str | None) -> Compression:
        """Map a ``compression_type`` setting ("gzip", "lz4", "none", None, ...) to a codec."""
        if name is None:
            return cls.NONE
        if isinstance(name, Compression):
            return name
        if isinstance(name, str):
            codec = _BY_NAME.get(name.strip().lower())
            if codec is not None:
                return codec
        raise KafkaConfigError(
            "compression_type", f"unknown codec {name!r}; expected one of none, gzip, snappy, lz4, zstd"
        )


_BY_NAME: dict[str, Compression] = {c.name.lower(): c for c in Compression}

#: First 8 bytes of a snappy-java (xerial) stream.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
# Header = magic + int32 version 1 + int32 min-compatible version 1 (what snappy-java writes).
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)
_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()


def _gzip_compress(data: bytes | memoryview) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31 = gzip container
    return c.compress(data) + c.flush()


def _gzip_decompress(data: bytes) -> bytes:
    d = zlib.decompressobj(47)  # 32 + 15: accept gzip or zlib headers
    out = d.decompress(data)
    if d.unused_data:  # several gzip members: let the stdlib walk them
        return gzip.decompress(data)
    return out


def _snappy_compress(data: bytes | memoryview) -> bytes:
    compress_raw = cramjam.snappy.compress_raw
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes) -> bytes:
    decompress_raw = cramjam.snappy.decompress_raw
    if data[:8] != XERIAL_MAGIC:
        return bytes(decompress_raw(data))
    pos, end, parts = 16, len(data), []
    view = memoryview(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError("truncated xerial snappy block")
        parts.append(bytes(decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(parts)


def _lz4_compress(data: bytes | memoryview) -> bytes:
    out: bytes = lz4.frame.compress(data, block_linked=False, store_size=False, content_checksum=False)
    return out


def _lz4_decompress(data: bytes) -> bytes:
    out: bytes = lz4.frame.decompress(data)
    return out


def _zstd_compress(data: bytes | memoryview) -> bytes:
    return _ZSTD_COMPRESSOR.compress(data)


def _zstd_decompress(data: bytes) -> bytes:
    # decompressobj copes with frames that omit the content size.
    out: bytes = _ZSTD_DECOMPRESSOR.decompressobj().decompress(data)
    return out


_COMPRESSORS: dict[int, Callable[[bytes | memoryview], bytes]] = {
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: _snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}
_DECOMPRESSORS: dict[int, Callable[[bytes], bytes]] = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` with ``codec`` (a :class:`Compression`); NONE returns it unchanged."""
    if codec == Compression.NONE:
        return bytes(data)
    fn = _COMPRESSORS.get(codec)
    if fn is None:
        raise UnsupportedCompressionTypeError(f"codec id {codec}")
    return fn(data)


def decompress(codec: int, data: bytes) -> bytes:
    """Undo :func:`compress`; raises CorruptRecordError when the data is not valid for the codec."""
    if codec == Compression.NONE:
        return bytes(data)
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise UnsupportedCompressionTypeError(f"codec id {codec}")
    try:
        return fn(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # each library raises its own error type
        raise CorruptRecordError(f"cannot decompress {Compression(codec).name.lower()} records: {exc}") from exc
