"""Zigzag varints of record batch v2 (Kafka's ``ByteUtils.writeVarint``/``writeVarlong``).

The encoders keep a tuple of precomputed byte strings for small non-negative
values (lengths and offset deltas are almost always small), so the hot loops
index a tuple instead of calling a function.
"""

from __future__ import annotations

from kafkakit.errors import CorruptRecordError

__all__ = ["SMALL_LIMIT", "SMALL", "encode_zigzag", "zigzag", "read_uvarint", "read_zigzag"]


def encode_zigzag(value: int) -> bytes:
    """The zigzag varint bytes of a signed 64-bit ``value``."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: ``SMALL[n]`` is ``encode_zigzag(n)`` for 0 <= n < SMALL_LIMIT.
SMALL_LIMIT = 1 << 15


def _small_table() -> tuple[bytes, ...]:
    # Zigzag of n >= 0 is 2n: one byte below 64, two below 8192, three up to SMALL_LIMIT.
    # Every process that imports kafkakit builds it, so the two- and three-byte codes are
    # sliced out of blobs built 64 codes at a time (their first byte cycles through the same
    # 64 values) rather than made one by one: 45 -> 20 -> 8 ms on a slow VM.
    low_bytes = bytes(range(0x80, 0x100, 2))  # first byte of 2n for n % 64 = 0..63
    one = [bytes((2 * n,)) for n in range(64)]
    row = bytearray(128)
    row[0::2] = low_bytes
    rows = []
    for high in range(1, 128):  # n >> 6 for 64 <= n < 8192
        row[1::2] = bytes((high,)) * 64
        rows.append(bytes(row))
    blob = b"".join(rows)
    two = [blob[i : i + 2] for i in range(0, len(blob), 2)]
    row = bytearray(192)
    row[0::3] = low_bytes
    rows = []
    for middle in range(128, SMALL_LIMIT >> 6):  # n >> 6 for 8192 <= n < SMALL_LIMIT
        row[1::3] = bytes((0x80 | (middle & 0x7F),)) * 64
        row[2::3] = bytes((middle >> 7,)) * 64
        rows.append(bytes(row))
    blob = b"".join(rows)
    three = [blob[i : i + 3] for i in range(0, len(blob), 3)]
    return (*one, *two, *three)


SMALL: tuple[bytes, ...] = _small_table()


def zigzag(value: int) -> bytes:
    """``encode_zigzag`` with the table fast path for small non-negative values."""
    if 0 <= value < SMALL_LIMIT:
        return SMALL[value]
    return encode_zigzag(value)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (still zigzag-encoded) at ``pos``; return (raw value, next pos)."""
    result = 0
    shift = 0
    while True:
        try:
            b = data[pos]
        except IndexError:
            raise CorruptRecordError("varint runs past the end of the records") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return (signed value, next pos)."""
    raw, pos = read_uvarint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos
