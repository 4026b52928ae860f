"""SCRAM credentials, stored as Kafka stores them: salt, StoredKey, ServerKey and iterations.

Passwords never reach the disk.  Credentials are set at start-up with
``--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` (the form of
``kafka-storage format --add-scram``) or with AlterUserScramCredentials, and
persist in ``<data dir>/.kafkakit-security/scram-credentials.json``.  In a KRaft cluster they
are cluster metadata: :meth:`ScramCredentialStore.replace_all` sets them from the metadata
image (:mod:`kafkakit.broker.security.metadata_publisher`), without the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kafkakit.broker.security.store import JsonDocument
from kafkakit.errors import KafkaConfigError
from kafkakit.security import scram

FILE_NAME = "scram-credentials.json"
_ADD_SCRAM = re.compile(r"^\s*(?P<mechanism>[A-Za-z0-9-]+)\s*=\s*\[(?P<body>.*)\]\s*$")


@dataclass(frozen=True, slots=True)
class AddScram:
    """One ``--add-scram`` entry."""

    mechanism: str
    user: str
    password: str
    iterations: int


def parse_add_scram(spec: str) -> AddScram:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]``; KafkaConfigError if malformed."""
    match = _ADD_SCRAM.match(spec)
    if match is None:
        raise KafkaConfigError("--add-scram", "expected MECHANISM=[name=USER,password=PASSWORD]")
    mechanism = match["mechanism"].upper()
    if mechanism not in scram.MECHANISMS:
        raise KafkaConfigError("--add-scram", f"mechanism must be one of {', '.join(scram.MECHANISMS)}")
    fields: dict[str, str] = {}
    for part in match["body"].split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise KafkaConfigError("--add-scram", f"expected key=value, got {key.strip()!r}")
        fields[key.strip().lower()] = value.strip().strip('"')
    unknown = set(fields) - {"name", "password", "iterations"}
    if unknown or "name" not in fields or "password" not in fields:
        raise KafkaConfigError("--add-scram", "give name= and password= (and optionally iterations=)")
    try:
        iterations = int(fields.get("iterations", "4096"))
    except ValueError:
        raise KafkaConfigError("--add-scram", "iterations must be a number") from None
    return AddScram(mechanism, fields["name"], fields["password"], iterations)


class ScramCredentialStore:
    """The broker's SCRAM credentials by user and mechanism."""

    def __init__(self, directory: Path) -> None:
        self._document = JsonDocument(directory / FILE_NAME)
        stored: dict[str, dict[str, str]] = self._document.load({})
        self._credentials: dict[str, dict[str, scram.ScramCredential]] = {
            user: {mech: scram.ScramCredential.from_kafka_string(text) for mech, text in by_mech.items()}
            for user, by_mech in stored.items()
        }
        #: The ``--add-scram`` entries applied (a cluster node sends them to the controller).
        self.added: list[AddScram] = []

    def lookup(self, mechanism: str, user: str) -> scram.ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._credentials)

    def describe(self, user: str) -> list[tuple[str, int]]:
        """``[(mechanism, iterations)]`` of ``user``'s credentials; empty for an unknown user."""
        return [(mech, cred.iterations) for mech, cred in sorted(self._credentials.get(user, {}).items())]

    def upsert(self, user: str, mechanism: str, credential: scram.ScramCredential) -> None:
        self._credentials.setdefault(user, {})[mechanism] = credential
        self._save()

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove one credential; False when there was none."""
        by_mech = self._credentials.get(user, {})
        if by_mech.pop(mechanism, None) is None:
            return False
        if not by_mech:
            del self._credentials[user]
        self._save()
        return True

    def add(self, entry: AddScram) -> None:
        """Apply one ``--add-scram`` entry (a new salt each time, as Kafka does)."""
        try:
            credential = scram.make_credential(entry.mechanism, entry.password, entry.iterations)
        except ValueError as exc:
            raise KafkaConfigError("--add-scram", str(exc)) from None
        self.upsert(entry.user, entry.mechanism, credential)
        self.added.append(entry)

    def replace_all(self, credentials: Iterable[tuple[str, str, scram.ScramCredential]]) -> None:
        """Cluster mode: hold exactly ``(user, mechanism name, credential)`` (the metadata image's);
        the file is not written."""
        replaced: dict[str, dict[str, scram.ScramCredential]] = {}
        for user, mechanism, credential in credentials:
            replaced.setdefault(user, {})[mechanism] = credential
        self._credentials = replaced

    def _save(self) -> None:
        self._document.save(
            {user: {m: c.to_kafka_string() for m, c in by_mech.items()} for user, by_mech in self._credentials.items()}
        )
