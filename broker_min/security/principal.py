"""Who is on a connection: the authenticated principal and client host, as handlers see them.

The server sets :data:`SESSION` in a connection's reader task once the
connection is authenticated (TLS handshake, SASL exchange or neither); every
handler task it starts afterwards copies that context, so a handler calls
:func:`current_session` to learn who is asking.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal as Kafka writes it: ``User:alice``, ``User:CN=client,O=kafkakit``."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> KafkaPrincipal("User", "alice"); raises ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class Session:
    """The principal of one connection, the client's address, and the listener it came in on."""

    principal: KafkaPrincipal = ANONYMOUS
    client_host: str = ""
    listener: str = "PLAINTEXT"


# Session is frozen, so sharing the default instance is safe.
SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar("kafkakit_session", default=Session())  # noqa: B039


def current_session() -> Session:
    """The session of the connection whose request is being handled."""
    return SESSION.get()
