"""Topic configs on the controller: Kafka's ConfigurationControlManager (topics only).

- :meth:`ConfigControlManager.incremental_alter_configs`: IncrementalAlterConfigs' SET,
  DELETE, APPEND and SUBTRACT on topic configs, each resource all or nothing, as
  ConfigRecords (only the keys whose value changes).
- :meth:`ConfigControlManager.validate_topic_configs`: a topic's effective configs from its
  overrides, INVALID_CONFIG for a bad value (also used by CreateTopics).
- :func:`unclean_leader_election_enabled`: ``unclean.leader.election.enable`` of a topic, its
  override over the controller's setting.

Broker and cluster-wide configs are not built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafkakit.broker.log import LogConfig
from kafkakit.broker.metadata import TOPIC_RESOURCE, ConfigRecord, MetadataImage, MetadataRecord
from kafkakit.errors import KafkaConfigError
from kio.schema.errors import ErrorCode

from .api_types import ConfigResource, ControllerError, ControllerSettings, NamedResult

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
# Kafka's ConfigSource ids (DescribeConfigs / CreateTopics v5+).
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5
# Kafka's AlterConfigOp.OpType.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: Topic configs that hold lists (APPEND/SUBTRACT apply to these only).
LIST_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)


def unclean_leader_election_enabled(image: MetadataImage, topic: str, default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable``, else ``default`` (the controller's setting)."""
    value = image.topic_configs(topic).get(UNCLEAN_LEADER_ELECTION)
    if value is None:
        return default
    return value.strip().lower() == "true"


class ConfigControlManager:
    """Validates topic configs and turns IncrementalAlterConfigs into ConfigRecords."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings

    def validate_topic_configs(self, configs: Mapping[str, str]) -> dict[str, str]:
        """The effective configs of a topic with these overrides; INVALID_CONFIG for a bad value."""
        try:
            effective = LogConfig.from_topic_configs(dict(configs), LogConfig()).to_topic_configs()
        except KafkaConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        unclean = configs.get(UNCLEAN_LEADER_ELECTION)
        if unclean is not None and unclean.strip().lower() not in ("true", "false"):
            raise ControllerError(
                ErrorCode.invalid_config,
                f"{UNCLEAN_LEADER_ELECTION}: expected true or false, got {unclean!r}",
            )
        effective.setdefault(
            UNCLEAN_LEADER_ELECTION, str(self.settings.unclean_leader_election_enable).lower()
        )
        return effective

    def incremental_alter_configs(
        self, image: MetadataImage, resources: Sequence[ConfigResource]
    ) -> tuple[list[NamedResult], list[MetadataRecord]]:
        """The answer per resource and the records of the valid ones."""
        keys = [(r.resource_type, r.name) for r in resources]
        records: list[MetadataRecord] = []
        results: list[NamedResult] = []
        for resource, key in zip(resources, keys, strict=True):
            if keys.count(key) > 1:
                results.append(
                    NamedResult(
                        resource.name,
                        ErrorCode.invalid_request,
                        "Duplicate resource.",
                        resource.resource_type,
                    )
                )
                continue
            try:
                records += self._alter_configs(image, resource)
            except ControllerError as exc:
                results.append(NamedResult(resource.name, exc.code, exc.message, resource.resource_type))
                continue
            results.append(NamedResult(resource.name, resource_type=resource.resource_type))
        return results, records

    def _alter_configs(self, image: MetadataImage, resource: ConfigResource) -> list[MetadataRecord]:
        if resource.resource_type != TOPIC_RESOURCE:
            raise ControllerError(ErrorCode.invalid_request, "this controller alters topic configs only")
        if resource.name not in image.topics:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{resource.name}' does not exist."
            )
        before = image.topic_configs(resource.name)
        configs = dict(before)
        defaults = self.validate_topic_configs({})
        for change in resource.ops:
            key, value = change.name, change.value
            if change.op == DELETE:
                configs.pop(key, None)
            elif value is None:
                raise ControllerError(ErrorCode.invalid_request, f"config {key!r}: a value is required")
            elif change.op == SET:
                configs[key] = value
            elif change.op in (APPEND, SUBTRACT):
                if key not in LIST_CONFIGS:
                    raise ControllerError(
                        ErrorCode.invalid_config, f"config {key!r} is not a list: it cannot be appended to"
                    )
                items = [i for i in configs.get(key, defaults.get(key, "")).split(",") if i]
                for item in (i.strip() for i in value.split(",") if i.strip()):
                    if change.op == APPEND and item not in items:
                        items.append(item)
                    elif change.op == SUBTRACT and item in items:
                        items.remove(item)
                configs[key] = ",".join(items)
            else:
                raise ControllerError(
                    ErrorCode.invalid_request, f"config {key!r}: unknown operation {change.op}"
                )
        self.validate_topic_configs(configs)
        changed = sorted(set(before) | set(configs))
        return [
            ConfigRecord(TOPIC_RESOURCE, resource.name, k, configs.get(k))
            for k in changed
            if before.get(k) != configs.get(k)
        ]
