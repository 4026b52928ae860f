"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them.

Both sides of the exchange live here so that the client and broker_min share
one implementation of the key derivation.  Written by hand because no
maintained Python library implements the server side, and the client side is
thirty lines over :mod:`hashlib` and :mod:`hmac`.

Kafka specifics: no channel binding (the GS2 header is ``n,,``), at least 4096
and at most 16384 iterations, and credentials stored as salt, StoredKey,
ServerKey and the iteration count (never the password), in the string form
``salt=...,stored_key=...,server_key=...,iterations=...``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "credential_from_salted_password",
    "make_credential",
    "mechanism_by_type",
    "salted_password",
]

#: Kafka refuses SCRAM iteration counts outside this range.
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, hash, Kafka wire number and minimum iterations."""

    name: str
    hash_name: str
    type: int
    min_iterations: int = 4096

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


MECHANISMS: dict[str, ScramMechanism] = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 2),
}


def mechanism(name: str) -> ScramMechanism:
    """The mechanism called ``name``; ValueError for any other name."""
    found = MECHANISMS.get(name.upper())
    if found is None:
        raise ValueError(f"unknown SCRAM mechanism {name!r}; expected one of {', '.join(MECHANISMS)}")
    return found


def mechanism_by_type(wire_type: int) -> ScramMechanism:
    """The mechanism with Kafka's wire number ``wire_type`` (1 = SHA-256, 2 = SHA-512)."""
    for candidate in MECHANISMS.values():
        if candidate.type == wire_type:
            return candidate
    raise ValueError(f"unknown SCRAM mechanism type {wire_type}")


def salted_password(mechanism_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 of the password with the mechanism's HMAC."""
    info = mechanism(mechanism_name)
    _check_iterations(info, iterations)
    return hashlib.pbkdf2_hmac(info.hash_name, password.encode("utf-8"), salt, iterations)


def _check_iterations(info: ScramMechanism, iterations: int) -> None:
    if not info.min_iterations <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"{info.name} needs between {info.min_iterations} and {MAX_ITERATIONS} iterations, got {iterations}"
        )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server stores for one user and mechanism: enough to check a proof, not to log in."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        """Kafka's persisted form (``ScramCredentialUtils.credentialToString``)."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_kafka_string`'s form; ValueError when a field is missing or malformed."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential string: {exc}") from None


def credential_from_salted_password(
    mechanism_name: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential for an already salted password (what AlterUserScramCredentials carries)."""
    info = mechanism(mechanism_name)
    client_key = info.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=info.digest(client_key),
        server_key=info.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def make_credential(
    mechanism_name: str, password: str, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredential:
    """A fresh credential for ``password``, with a random 32-byte salt unless one is given."""
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(mechanism_name, password, salt, iterations)
    return credential_from_salted_password(mechanism_name, salted, salt, iterations)


def _escape_name(name: str) -> str:
    # RFC 5802 5.1: "=" and "," in a saslname are written =3D and =2C.
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ValueError("invalid escape in SCRAM username")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    """``a=1,b=2`` as a dict; ValueError on a part that is not ``letter=value``."""
    parsed: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"malformed SCRAM attribute {part!r}")
        parsed.setdefault(part[0], part[2:])
    return parsed


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


def _nonce() -> str:
    return secrets.token_urlsafe(24)


_GS2_HEADER = "n,,"


class ScramClient:
    """The client side of one exchange: first message, final message, then check the server."""

    def __init__(self, mechanism_name: str, username: str, password: str, nonce: str | None = None) -> None:
        self._mechanism = mechanism(mechanism_name)
        self._password = password
        self._nonce = nonce or _nonce()
        self._first_bare = f"n={_escape_name(username)},r={self._nonce}"
        self._expected_server_signature: bytes | None = None

    def first_message(self) -> bytes:
        return (_GS2_HEADER + self._first_bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final-message with the proof; ValueError if the server's message is unacceptable."""
        text = server_first.decode("utf-8")
        attributes = _attributes(text)
        if "e" in attributes:
            raise ValueError(f"server refused: {attributes['e']}")
        nonce, salt_b64, iterations_text = attributes.get("r"), attributes.get("s"), attributes.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise ValueError("server-first-message lacks r, s or i")
        # The server must extend our nonce: otherwise this is a replay or a confused server.
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ValueError("server nonce does not extend the client nonce")
        iterations = int(iterations_text)
        if iterations < self._mechanism.min_iterations:
            raise ValueError(f"server asked for {iterations} iterations, below {self._mechanism.min_iterations}")
        salt = base64.b64decode(salt_b64, validate=True)
        salted = hashlib.pbkdf2_hmac(self._mechanism.hash_name, self._password.encode("utf-8"), salt, iterations)
        without_proof = f"c={base64.b64encode(_GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = self._mechanism.hmac(salted, b"Client Key")
        signature = self._mechanism.hmac(self._mechanism.digest(client_key), auth_message)
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        self._expected_server_signature = self._mechanism.hmac(
            self._mechanism.hmac(salted, b"Server Key"), auth_message
        )
        return f"{without_proof},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature; ValueError if it is wrong or the server reported an error."""
        attributes = _attributes(server_final.decode("utf-8"))
        if "e" in attributes:
            raise ValueError(f"server refused: {attributes['e']}")
        if self._expected_server_signature is None:
            raise ValueError("server-final-message before client-final-message")
        signature = base64.b64decode(attributes.get("v", ""), validate=True)
        if not hmac.compare_digest(signature, self._expected_server_signature):
            raise ValueError("the server's signature is wrong: it does not know this user's credential")


CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """The server side of one exchange; ``lookup(username)`` gives the stored credential or None.

    An unknown user gets a server-first-message with a salt derived from the name,
    so the exchange looks the same as for a real user until the proof fails.
    """

    _fake_salt_key = os.urandom(32)

    def __init__(self, mechanism_name: str, lookup: CredentialLookup) -> None:
        self._mechanism = mechanism(mechanism_name)
        self._lookup = lookup
        self.username = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def handle_client_first(self, message: bytes) -> bytes:
        text = message.decode("utf-8")
        flag, authzid, rest = _split_gs2(text)
        if flag.startswith("p"):
            raise ValueError("channel binding is not supported")
        self._gs2 = f"{flag},{authzid},"
        attributes = _attributes(rest)
        if "n" not in attributes or "r" not in attributes:
            raise ValueError("client-first-message lacks n or r")
        self.username = _unescape_name(attributes["n"])
        if authzid and authzid.removeprefix("a=") != self.username:
            raise ValueError("authorization id differs from the username")
        credential = self._lookup(self.username)
        self._known = credential is not None
        self._credential = credential or self._fake_credential(self.username)
        self._first_bare = rest
        self._nonce = attributes["r"] + _nonce()
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode()

    def handle_client_final(self, message: bytes) -> bytes:
        """Verify the proof; return the server-final-message, or ValueError when it is wrong."""
        credential = self._credential
        if credential is None:
            raise ValueError("client-final-message before client-first-message")
        text = message.decode("utf-8")
        attributes = _attributes(text)
        if attributes.get("r") != self._nonce:
            raise ValueError("nonce mismatch")
        if base64.b64decode(attributes.get("c", ""), validate=True) != self._gs2.encode():
            raise ValueError("channel binding does not match the GS2 header")
        without_proof, _, proof_part = text.rpartition(",p=")
        if not proof_part:
            raise ValueError("client-final-message lacks a proof")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = self._mechanism.hmac(credential.stored_key, auth_message)
        proof = base64.b64decode(proof_part, validate=True)
        if len(proof) != len(signature):
            raise ValueError("invalid proof")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(self._mechanism.digest(client_key), credential.stored_key) or not self._known:
            raise ValueError("invalid credentials")
        server_signature = self._mechanism.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

    def _fake_credential(self, username: str) -> ScramCredential:
        salt = hmac.new(self._fake_salt_key, username.encode(), "sha256").digest()
        return ScramCredential(salt, os.urandom(self._mechanism_digest_size()), b"", self._mechanism.min_iterations)

    def _mechanism_digest_size(self) -> int:
        return hashlib.new(self._mechanism.hash_name).digest_size


def _split_gs2(text: str) -> tuple[str, str, str]:
    """The GS2 header's flag and authzid, and the client-first-message-bare after them."""
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") and not parts[0].startswith("p="):
        raise ValueError("malformed GS2 header")
    return parts[0], parts[1], parts[2]
