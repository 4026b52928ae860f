"""SASL PLAIN (RFC 4616): ``authzid NUL username NUL password`` in UTF-8.

Kafka sends PLAIN only over TLS in production; the codec itself is trivial.
"""

from __future__ import annotations

__all__ = ["client_message", "parse_client_message"]

_MAX_FIELD = 255 * 4  # RFC 4616 allows 255 characters per field, up to 4 bytes each in UTF-8


def client_message(username: str, password: str, authzid: str = "") -> bytes:
    """The single PLAIN message; ValueError when a field holds a NUL or the user/password is empty."""
    for name, value in (("username", username), ("password", password), ("authzid", authzid)):
        if "\0" in value:
            raise ValueError(f"SASL PLAIN {name} must not contain NUL")
    if not username or not password:
        raise ValueError("SASL PLAIN needs a username and a password")
    return f"{authzid}\0{username}\0{password}".encode()


def parse_client_message(message: bytes) -> tuple[str, str, str]:
    """``(authzid, username, password)``; ValueError when the message is not valid PLAIN."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("PLAIN message is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise ValueError("Invalid SASL/PLAIN response: expected 3 tokens")
    authzid, username, password = parts
    if not username:
        raise ValueError("Authentication failed: username not specified")
    if not password:
        raise ValueError("Authentication failed: password not specified")
    if any(len(part.encode()) > _MAX_FIELD for part in parts):
        raise ValueError("Invalid SASL/PLAIN response: field too long")
    return authzid, username, password
