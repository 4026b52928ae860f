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
    one = [bytes((2 * n,)) for n in range(64)]
    two = _codes_by_64([(high,) for high in range(1, 128)])  # n >> 6 for 64 <= n < 8192
    three = _codes_by_64([(0x80 | (m & 0x7F), m >> 7) for m in range(128, SMALL_LIMIT >> 6)])
    return (*one, *two, *three)


def _codes_by_64(tails: list[tuple[int, ...]]) -> list[bytes]:
    """The codes of 64 consecutive n per tail: their first byte is that of 2n for n % 64 = 0..63,
    their other bytes the tail's (the same for all 64)."""
    width = 1 + len(tails[0])
    row = bytearray(64 * width)
    row[0::width] = bytes(range(0x80, 0x100, 2))
    rows = []
    for tail in tails:
        for i, byte in enumerate(tail, start=1):
            row[i::width] = bytes((byte,)) * 64
        rows.append(bytes(row))
    blob = b"".join(rows)
    return [blob[i : i + width] for i in range(0, len(blob), width)]


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
