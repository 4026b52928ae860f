"""Typed errors for kafkakit.

Every Kafka error code maps to one exception class; the ones a user is
likely to catch have a named class, the rest share :class:`BrokerResponseError`
with the code attached.  ``retriable`` follows Apache Kafka's classification.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """Base of every error kafkakit raises."""

    retriable: bool = False


class KafkaConfigError(KafkaError, ValueError):
    """A client or broker setting has a bad value; ``setting`` names it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


class KafkaConnectionError(KafkaError):
    """A connection to a broker failed or was closed."""

    retriable = True


class KafkaTimeoutError(KafkaError):
    """An operation did not complete within its timeout."""

    retriable = True


class AuthenticationError(KafkaError):
    """The client could not prove who it is, or the broker could not (TLS verification, SASL).

    Never retried: the same credentials fail the same way, so retrying would only
    hammer the broker.
    """

    retriable = False


class AuthorizationError(KafkaError):
    """An operation was refused by the broker's ACLs (the typed subclasses name the resource kind)."""

    retriable = False


class SSLVerificationError(KafkaConnectionError, AuthenticationError):
    """The broker's TLS certificate failed verification (untrusted issuer, wrong host name, expired)."""

    retriable = False


class SslAuthenticationError(KafkaConnectionError, AuthenticationError):
    """The broker refused this client during TLS: no client certificate where one is required,
    or one it does not trust (Java's SslAuthenticationException)."""

    retriable = False


class ProducerClosed(KafkaError):
    """The producer was stopped; no more records are accepted."""


class ConsumerStoppedError(KafkaError):
    """The consumer was stopped while a call was waiting."""


class IllegalStateError(KafkaError):
    """An API was called in a state where it is not allowed."""


class UnsupportedVersionError(KafkaError):
    """No protocol version is supported by both the client and the broker."""


class GroupProtocolUnsupportedError(UnsupportedVersionError):
    """The group coordinator does not speak KIP-848's consumer group protocol
    (no ConsumerGroupHeartbeat, or UNSUPPORTED_VERSION): use ``group_protocol="classic"``."""


class ShareGroupsNotSupportedError(UnsupportedVersionError):
    """The broker does not support KIP-932 share groups (no ShareGroupHeartbeat / ShareFetch,
    or UNSUPPORTED_VERSION): Apache Kafka 4.0+ with share groups enabled is needed."""


class CorruptRecordError(KafkaError):
    """A record batch failed its CRC or could not be decoded."""


class RecordTooLargeError(KafkaError):
    """A record is larger than ``max_request_size`` or the broker allows."""


class NotYetSupportedError(KafkaError, NotImplementedError):
    """A feature that kafkakit does not implement yet."""


class CommitFailedError(KafkaError):
    """An offset commit cannot succeed: this member is no longer in the group generation it
    consumed in (kicked out after a session or poll timeout, or fenced by a rejoin).

    Not retriable: the partitions may already belong to another member. The
    consumer rejoins on its next poll; records processed since the last
    successful commit may be delivered again to their new owner.
    """


class TransactionAbortedError(KafkaError):
    """A record was not delivered because its transaction was aborted before it was sent."""


class TransactionStateError(IllegalStateError):
    """A transactional call does not fit the transaction's state (e.g. ``send`` outside a
    transaction, ``commit_transaction`` after a failed send: abort instead)."""


class BrokerResponseError(KafkaError):
    """An error code returned by a broker."""

    code: int = -1

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__()
        code = cls.__dict__.get("code")
        if code is not None and code in _RETRIABLE:
            cls.retriable = _RETRIABLE[code]
            _BY_CODE.setdefault(code, cls)

    def __init__(self, message: str = "") -> None:
        name = _NAMES.get(self.code, f"error {self.code}")
        super().__init__(f"[{self.code}] {name}" + (f": {message}" if message else ""))


_NAMES: dict[int, str] = {int(e): e.name.upper() for e in ErrorCode}
_RETRIABLE: dict[int, bool] = {int(e): bool(e.retriable) for e in ErrorCode}
_BY_CODE: dict[int, type[BrokerResponseError]] = {}

# Named classes for the codes applications commonly handle.


class UnknownServerError(BrokerResponseError):
    code = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerResponseError):
    code = 1  # OFFSET_OUT_OF_RANGE


class LogTruncationError(OffsetOutOfRangeError):  # type: ignore[misc]
    """The partition's new leader does not hold the records before the consumer's position
    (KIP-320: an unclean leader election truncated the log), and ``auto_offset_reset="none"``.

    ``divergent_offsets`` maps each partition to the first offset where the consumer's log and
    the leader's differ (None when the leader knows nothing of the consumer's epoch); seek
    there, or elsewhere, to go on.
    """

    def __init__(self, message: str = "", divergent_offsets: dict[Any, int | None] | None = None) -> None:
        super().__init__(message)
        self.divergent_offsets: dict[Any, int | None] = dict(divergent_offsets or {})


class CorruptMessageError(BrokerResponseError):
    code = 2  # CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = 3  # UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(BrokerResponseError):
    code = 5  # LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(BrokerResponseError):
    code = 6  # NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(BrokerResponseError):
    code = 7  # REQUEST_TIMED_OUT


class MessageSizeTooLargeError(BrokerResponseError):
    code = 10  # MESSAGE_TOO_LARGE


class NetworkExceptionError(BrokerResponseError):
    code = 13  # NETWORK_EXCEPTION


class CoordinatorLoadInProgressError(BrokerResponseError):
    code = 14  # COORDINATOR_LOAD_IN_PROGRESS


class CoordinatorNotAvailableError(BrokerResponseError):
    code = 15  # COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(BrokerResponseError):
    code = 16  # NOT_COORDINATOR


class InvalidTopicError(BrokerResponseError):
    code = 17  # INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(BrokerResponseError):
    code = 18  # RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(BrokerResponseError):
    code = 19  # NOT_ENOUGH_REPLICAS


class IllegalGenerationError(BrokerResponseError):
    code = 22  # ILLEGAL_GENERATION


class InconsistentGroupProtocolError(BrokerResponseError):
    code = 23  # INCONSISTENT_GROUP_PROTOCOL


class UnknownMemberIdError(BrokerResponseError):
    code = 25  # UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(BrokerResponseError):
    code = 26  # INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(BrokerResponseError):
    code = 27  # REBALANCE_IN_PROGRESS


class TopicAuthorizationFailedError(BrokerResponseError, AuthorizationError):
    code = 29  # TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(BrokerResponseError, AuthorizationError):
    code = 30  # GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(BrokerResponseError, AuthorizationError):
    code = 31  # CLUSTER_AUTHORIZATION_FAILED


class UnsupportedSaslMechanismError(BrokerResponseError, AuthenticationError):
    """The broker does not enable the client's ``sasl_mechanism``; the message lists those it does."""

    code = 33  # UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(BrokerResponseError, AuthenticationError):
    code = 34  # ILLEGAL_SASL_STATE


class TransactionalIdAuthorizationFailedError(BrokerResponseError, AuthorizationError):
    code = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabledError(BrokerResponseError):
    """An ACL or credential request reached a broker that has no authorizer configured."""

    code = 54  # SECURITY_DISABLED


class SaslAuthenticationError(BrokerResponseError, AuthenticationError):
    """SASL authentication failed: wrong credentials, an invalid token, or a server that failed to
    prove it knows the SCRAM credential.  The message names the mechanism and the broker."""

    code = 58  # SASL_AUTHENTICATION_FAILED


class UnsupportedVersionResponseError(BrokerResponseError):
    code = 35  # UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerResponseError):
    code = 36  # TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerResponseError):
    code = 37  # INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError):
    code = 38  # INVALID_REPLICATION_FACTOR


class InvalidRequestError(BrokerResponseError):
    code = 42  # INVALID_REQUEST


class UnsupportedCompressionTypeError(BrokerResponseError):
    code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class OutOfOrderSequenceNumberError(BrokerResponseError):
    code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(BrokerResponseError):
    code = 46  # DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerResponseError):
    code = 47  # INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(BrokerResponseError):
    code = 48  # INVALID_TXN_STATE


class InvalidProducerIdMappingError(BrokerResponseError):
    code = 49  # INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(BrokerResponseError):
    code = 50  # INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(BrokerResponseError):
    code = 51  # CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(BrokerResponseError):
    code = 52  # TRANSACTION_COORDINATOR_FENCED


class KafkaStorageError(BrokerResponseError):
    code = 56  # KAFKA_STORAGE_ERROR


class UnknownProducerIdError(BrokerResponseError):
    code = 59  # UNKNOWN_PRODUCER_ID


class FencedInstanceIdError(BrokerResponseError):
    code = 82  # FENCED_INSTANCE_ID


class MemberIdRequiredError(BrokerResponseError):
    code = 79  # MEMBER_ID_REQUIRED


class UnstableOffsetCommitError(BrokerResponseError):
    code = 88  # UNSTABLE_OFFSET_COMMIT


class ProducerFencedError(BrokerResponseError):
    code = 90  # PRODUCER_FENCED


class FencedLeaderEpochError(BrokerResponseError):
    code = 74  # FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerResponseError):
    code = 75  # UNKNOWN_LEADER_EPOCH


# Every other code gets a generated class, so for_code() always has a precise type.
for _code in ErrorCode:
    if int(_code) != 0 and int(_code) not in _BY_CODE:
        type("".join(p.title() for p in _code.name.split("_")) + "Error", (BrokerResponseError,), {"code": int(_code)})


def for_code(code: int) -> type[BrokerResponseError]:
    """The exception class for a Kafka error code (an unknown code gets a generic class)."""
    try:
        return _BY_CODE[code]
    except KeyError:
        return type(f"KafkaErrorCode{code}", (BrokerResponseError,), {"code": code})


def raise_for_code(code: int, message: str = "") -> None:
    """Raise the typed error for ``code`` unless it is 0 (no error)."""
    if code:
        raise for_code(code)(message)
