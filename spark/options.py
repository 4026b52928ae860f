"""Data source options: names as in Spark's own Kafka connector, checked early.

Spark hands options over as a case-insensitive mapping with lower-cased keys
(``dict(options)`` loses the case-insensitivity), so every lookup goes through
:class:`SourceOptions`.  ``kafka.*`` options are Java client settings
(``kafka.linger.ms``); they become kafkakit keyword arguments (``linger_ms``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkakit.errors import KafkaConfigError
from kafkakit.spark.security import SECURITY_KEYS, SecurityOptions

BOOTSTRAP = "kafka.bootstrap.servers"

# Java client names whose kafkakit keyword differs from the mechanical
# "drop kafka., dots to underscores" rule.
_RENAMED = {
    "batch.size": "max_batch_size",
    "max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
}

# Settings the connector owns itself (as Spark's connector does): users set the
# data source option instead, or the value would fight the source's offsets.
_RESERVED = {
    "key.serializer",
    "value.serializer",
    "key.deserializer",
    "value.deserializer",
    "enable.auto.commit",
    "auto.offset.reset",
    "transactional.id",
    "bootstrap.servers",
}


class SourceOptions:
    """Case-insensitive, typed access to data source options."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {str(k).lower(): str(v) for k, v in dict(options).items()}

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._values

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name.lower(), default)

    def require(self, name: str) -> str:
        value = self.get(name)
        if value is None or not value.strip():
            raise KafkaConfigError(name, "is required")
        return value.strip()

    def int(self, name: str, default: int | None = None, *, minimum: int | None = None) -> int | None:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            raise KafkaConfigError(name, f"must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise KafkaConfigError(name, f"must be >= {minimum}, got {value}")
        return value

    def bool(self, name: str, default: bool) -> bool:
        raw = self.get(name)
        if raw is None:
            return default
        text = raw.strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise KafkaConfigError(name, f"must be true or false, got {raw!r}")

    def items(self) -> Iterable[tuple[str, str]]:
        return self._values.items()

    def to_dict(self) -> dict[str, str]:
        """Plain picklable copy (keys lower-cased) to ship to executors."""
        return dict(self._values)

    def bootstrap_servers(self) -> str:
        return self.require(BOOTSTRAP)

    def security(self) -> SecurityOptions:
        """The ``kafka.security.protocol``/``sasl.*``/``ssl.*`` options, checked now (see spark/security.py)."""
        return SecurityOptions.from_options(self._values)

    def client_settings(self, client: Callable[..., Any], *, skip: Iterable[str] = ()) -> dict[str, Any]:
        """``kafka.*`` options as keyword arguments of ``client`` (Producer or Consumer).

        An option the client does not accept raises KafkaConfigError naming it,
        rather than being silently ignored.
        """
        accepted = set(inspect.signature(client).parameters)
        skipped = {s.lower() for s in skip} | {BOOTSTRAP} | {f"kafka.{key}" for key in SECURITY_KEYS}
        settings: dict[str, Any] = {}
        for key, raw in self._values.items():
            if not key.startswith("kafka.") or key in skipped:
                continue
            java_name = key[len("kafka.") :]
            if java_name in _RESERVED:
                raise KafkaConfigError(key, "is managed by the kafkakit data source and cannot be set")
            keyword = _RENAMED.get(java_name, java_name.replace(".", "_"))
            if keyword not in accepted:
                raise KafkaConfigError(key, f"is not a setting kafkakit's {client.__name__} supports")
            settings[keyword] = _parse_scalar(raw)
        return settings


def _parse_scalar(raw: str) -> Any:
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text
