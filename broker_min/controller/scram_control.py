"""SCRAM credentials on the controller: Kafka's ScramControlManager (AlterUserScramCredentials).

An upsertion carries what the client computed (KIP-554): the salt, the salted password
(PBKDF2 of the password) and the iteration count, never the password. The controller derives
StoredKey and ServerKey from the salted password and writes a UserScramCredentialRecord; a
deletion becomes a RemoveUserScramCredentialRecord. The credentials are the image's
(``image.security.scram``), so this manager keeps no state.

Kafka's checks and answers, per user (one result per user named):

- a user altered twice in one request (any mechanisms, deletions and upsertions together):
  DUPLICATE_RESOURCE, and none of its changes apply;
- an empty user name: UNACCEPTABLE_CREDENTIAL; an unknown mechanism: UNSUPPORTED_SASL_MECHANISM;
- an upsertion with fewer iterations than the mechanism's minimum (4096) or more than 16384:
  UNACCEPTABLE_CREDENTIAL;
- deleting a credential the image does not have: RESOURCE_NOT_FOUND.

The valid changes are applied together; the answers list the deletions, then the upsertions,
then the errors, as Kafka's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kafkakit.broker.metadata import MetadataImage, MetadataRecord, RemoveUserScramCredentialRecord
from kafkakit.broker.metadata.security_image import scram_record
from kafkakit.security import scram
from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    """Delete ``user``'s credential for ``mechanism`` (Kafka's number: 1 = SHA-256, 2 = SHA-512)."""

    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """Set ``user``'s credential for ``mechanism`` from a salted password."""

    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class ScramAlterResult:
    """The answer for one user of an AlterUserScramCredentials request."""

    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


_DUPLICATE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def _check_name_and_mechanism(user: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    try:
        scram.mechanism_by_type(mechanism)
    except ValueError:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


class ScramControlManager:
    """Turns AlterUserScramCredentials into SCRAM credential records, against the image."""

    def alter_credentials(
        self, image: MetadataImage, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> tuple[list[ScramAlterResult], list[MetadataRecord]]:
        """The answer per user and the records of the valid changes."""
        to_delete: dict[str, ScramDeletion] = {}
        to_upsert: dict[str, ScramUpsertion] = {}
        errors: dict[str, tuple[ErrorCode, str]] = {}
        for deletion in deletions:
            name = deletion.user
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None:
                errors[name] = _DUPLICATE
                continue
            problem = _check_name_and_mechanism(name, deletion.mechanism)
            if problem is None and (name, deletion.mechanism) not in image.security.scram:
                problem = ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
            if problem is not None:
                errors[name] = problem
            else:
                to_delete[name] = deletion
        for upsertion in upsertions:
            name = upsertion.user
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
                errors[name] = _DUPLICATE
                continue
            problem = _check_name_and_mechanism(name, upsertion.mechanism)
            if problem is None:
                info = scram.mechanism_by_type(upsertion.mechanism)
                if upsertion.iterations < info.min_iterations:
                    problem = ErrorCode.unacceptable_credential, "Too few iterations"
                elif upsertion.iterations > scram.MAX_ITERATIONS:
                    problem = ErrorCode.unacceptable_credential, "Too many iterations"
            if problem is not None:
                errors[name] = problem
            else:
                to_upsert[name] = upsertion
        results: list[ScramAlterResult] = []
        records: list[MetadataRecord] = []
        for deletion in to_delete.values():
            results.append(ScramAlterResult(deletion.user))
            records.append(RemoveUserScramCredentialRecord(deletion.user, deletion.mechanism))
        for upsertion in to_upsert.values():
            info = scram.mechanism_by_type(upsertion.mechanism)
            credential = scram.credential_from_salted_password(
                info.name, upsertion.salted_password, upsertion.salt, upsertion.iterations
            )
            results.append(ScramAlterResult(upsertion.user))
            records.append(scram_record(upsertion.user, upsertion.mechanism, credential))
        results += [ScramAlterResult(user, code, message) for user, (code, message) in errors.items()]
        return results, records


__all__ = ["ScramAlterResult", "ScramControlManager", "ScramDeletion", "ScramUpsertion"]
