"""Checks of what applications hand to ``send``/``send_batch``: acks, bytes, headers.

Kept apart from the Producer so that both send paths share them; each raises the
typed error that names what is wrong (KafkaConfigError for a setting, TypeError
for a record field).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkakit.errors import KafkaConfigError
from kafkakit.structs import Header

_BYTES_LIKE = (bytes, bytearray, memoryview)
_BYTES_OR_NONE = {bytes, type(None)}


def check_acks(acks: object) -> int:
    if acks == "all":
        return -1
    if isinstance(acks, int) and not isinstance(acks, bool) and acks in (0, 1, -1):
        return acks
    raise KafkaConfigError("acks", f"must be 0, 1, -1 or 'all', not {acks!r}")


def as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, _BYTES_LIKE):
        return bytes(data)
    raise TypeError(
        f"record {what} must be bytes (or set {what.split()[0]}_serializer), not {type(data).__name__}"
    )


def lengths(items: list[bytes | None]) -> list[int]:
    if None in items:
        return [0 if item is None else len(item) for item in items]
    return list(map(len, items))  # type: ignore[arg-type]


def bytes_list(items: Sequence[Any], what: str) -> list[bytes | None]:
    out = list(items)
    if set(map(type, out)) <= _BYTES_OR_NONE:
        return out
    for i, item in enumerate(out):
        if item is not None and item.__class__ is not bytes:
            out[i] = as_bytes(item, what)
    return out


def check_headers(headers: Sequence[Header]) -> tuple[list[Header], int]:
    """Validated headers as a list, plus their encoded size."""
    checked: list[Header] = []
    size = 0
    for header in headers:
        try:
            name, value = header
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes | None) pair, not {header!r}") from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, "header value")
        checked.append((name, value))
        name_size = len(name) if name.isascii() else len(name.encode("utf-8"))
        size += name_size + (len(value) if value is not None else 0) + 6
    return checked, size
