"""Validation shared by every client's settings: a bad value names its setting."""

from __future__ import annotations

from typing import Any

from kafkakit.errors import KafkaConfigError

INT32_MAX = 2**31 - 1


def check_int(setting: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in [minimum, maximum]; else KafkaConfigError(setting)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KafkaConfigError(setting, f"must be an integer, got {value!r}")
    if maximum is None:
        if value < minimum:
            raise KafkaConfigError(setting, f"must be at least {minimum}, got {value}")
    elif not minimum <= value <= maximum:
        raise KafkaConfigError(setting, f"must be between {minimum} and {maximum}, got {value}")
    return value
