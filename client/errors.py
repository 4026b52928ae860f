"""Typed errors for kafkakit.

Every Kafka error code maps to one exception class; the ones a user is
likely to catch have a named class, the rest share :class:`BrokerResponseError`
with the code attached.  ``retriable`` follows Apache Kafka's classification.
"""

from __future__ import annotations

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


class ProducerClosed(KafkaError):
    """The producer was stopped; no more records are accepted."""


class ConsumerStoppedError(KafkaError):
    """The consumer was stopped while a call was waiting."""


class IllegalStateError(KafkaError):
    """An API was called in a state where it is not allowed."""


class UnsupportedVersionError(KafkaError):
    """No protocol version is supported by both the client and the broker."""


class CorruptRecordError(KafkaError):
    """A record batch failed its CRC or could not be decoded."""


class RecordTooLargeError(KafkaError):
    """A record is larger than ``max_request_size`` or the broker allows."""


class NotYetSupportedError(KafkaError, NotImplementedError):
    """A feature that kafkakit does not implement yet."""


class BrokerResponseError(KafkaError):
    """An error code returned by a broker."""

    code: int = -1

    def __init__(self, message: str = "") -> None:
        name = _NAMES.get(self.code, f"error {self.code}")
        super().__init__(f"[{self.code}] {name}" + (f": {message}" if message else ""))


_NAMES: dict[int, str] = {int(e): e.name.upper() for e in ErrorCode}
_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _error_class(name: str, code: ErrorCode, base: type[BrokerResponseError] = BrokerResponseError) -> type[BrokerResponseError]:
    cls = type(name, (base,), {"code": int(code), "retriable": bool(code.retriable), "__doc__": f"Kafka error {int(code)} ({code.name.upper()})."})
    _BY_CODE[int(code)] = cls
    return cls


# Named classes for the codes applications commonly handle.
UnknownServerError = _error_class("UnknownServerError", ErrorCode.unknown_server_error)
OffsetOutOfRangeError = _error_class("OffsetOutOfRangeError", ErrorCode.offset_out_of_range)
CorruptMessageError = _error_class("CorruptMessageError", ErrorCode.corrupt_message)
UnknownTopicOrPartitionError = _error_class("UnknownTopicOrPartitionError", ErrorCode.unknown_topic_or_partition)
LeaderNotAvailableError = _error_class("LeaderNotAvailableError", ErrorCode.leader_not_available)
NotLeaderOrFollowerError = _error_class("NotLeaderOrFollowerError", ErrorCode.not_leader_or_follower)
RequestTimedOutError = _error_class("RequestTimedOutError", ErrorCode.request_timed_out)
MessageSizeTooLargeError = _error_class("MessageSizeTooLargeError", ErrorCode.message_too_large)
NetworkExceptionError = _error_class("NetworkExceptionError", ErrorCode.network_exception)
CoordinatorLoadInProgressError = _error_class("CoordinatorLoadInProgressError", ErrorCode.coordinator_load_in_progress)
CoordinatorNotAvailableError = _error_class("CoordinatorNotAvailableError", ErrorCode.coordinator_not_available)
NotCoordinatorError = _error_class("NotCoordinatorError", ErrorCode.not_coordinator)
InvalidTopicError = _error_class("InvalidTopicError", ErrorCode.invalid_topic_exception)
RecordListTooLargeError = _error_class("RecordListTooLargeError", ErrorCode.record_list_too_large)
NotEnoughReplicasError = _error_class("NotEnoughReplicasError", ErrorCode.not_enough_replicas)
IllegalGenerationError = _error_class("IllegalGenerationError", ErrorCode.illegal_generation)
InconsistentGroupProtocolError = _error_class("InconsistentGroupProtocolError", ErrorCode.inconsistent_group_protocol)
UnknownMemberIdError = _error_class("UnknownMemberIdError", ErrorCode.unknown_member_id)
InvalidSessionTimeoutError = _error_class("InvalidSessionTimeoutError", ErrorCode.invalid_session_timeout)
RebalanceInProgressError = _error_class("RebalanceInProgressError", ErrorCode.rebalance_in_progress)
TopicAuthorizationFailedError = _error_class("TopicAuthorizationFailedError", ErrorCode.topic_authorization_failed)
UnsupportedVersionResponseError = _error_class("UnsupportedVersionResponseError", ErrorCode.unsupported_version)
TopicAlreadyExistsError = _error_class("TopicAlreadyExistsError", ErrorCode.topic_already_exists)
InvalidPartitionsError = _error_class("InvalidPartitionsError", ErrorCode.invalid_partitions)
InvalidReplicationFactorError = _error_class("InvalidReplicationFactorError", ErrorCode.invalid_replication_factor)
InvalidRequestError = _error_class("InvalidRequestError", ErrorCode.invalid_request)
UnsupportedCompressionTypeError = _error_class("UnsupportedCompressionTypeError", ErrorCode.unsupported_compression_type)
OutOfOrderSequenceNumberError = _error_class("OutOfOrderSequenceNumberError", ErrorCode.out_of_order_sequence_number)
DuplicateSequenceNumberError = _error_class("DuplicateSequenceNumberError", ErrorCode.duplicate_sequence_number)
InvalidProducerEpochError = _error_class("InvalidProducerEpochError", ErrorCode.invalid_producer_epoch)
InvalidTxnStateError = _error_class("InvalidTxnStateError", ErrorCode.invalid_txn_state)
InvalidProducerIdMappingError = _error_class("InvalidProducerIdMappingError", ErrorCode.invalid_producer_id_mapping)
InvalidTransactionTimeoutError = _error_class("InvalidTransactionTimeoutError", ErrorCode.invalid_transaction_timeout)
ConcurrentTransactionsError = _error_class("ConcurrentTransactionsError", ErrorCode.concurrent_transactions)
TransactionCoordinatorFencedError = _error_class("TransactionCoordinatorFencedError", ErrorCode.transaction_coordinator_fenced)
KafkaStorageError = _error_class("KafkaStorageError", ErrorCode.kafka_storage_error)
UnknownProducerIdError = _error_class("UnknownProducerIdError", ErrorCode.unknown_producer_id)
FencedInstanceIdError = _error_class("FencedInstanceIdError", ErrorCode.fenced_instance_id)
MemberIdRequiredError = _error_class("MemberIdRequiredError", ErrorCode.member_id_required)
UnstableOffsetCommitError = _error_class("UnstableOffsetCommitError", ErrorCode.unstable_offset_commit)
ProducerFencedError = _error_class("ProducerFencedError", ErrorCode.producer_fenced)
FencedLeaderEpochError = _error_class("FencedLeaderEpochError", ErrorCode.fenced_leader_epoch)
UnknownLeaderEpochError = _error_class("UnknownLeaderEpochError", ErrorCode.unknown_leader_epoch)

for _code in ErrorCode:
    if int(_code) != 0 and int(_code) not in _BY_CODE:
        _error_class("".join(p.title() for p in _code.name.split("_")) + "Error", _code)


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
