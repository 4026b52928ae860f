"""All partition logs under one data directory (Kafka's LogManager, minus the threads)."""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TOPIC_CONFIG_FILE,
    read_offsets_checkpoint,
    read_properties,
    write_offsets_checkpoint,
    write_properties,
)
from .config import LogConfig
from .errors import InvalidPartitionDirectoryError, LogError
from .layout import is_valid_topic_name, parse_partition_dir, partition_dir_name
from .partition import PartitionLog

logger = logging.getLogger(__name__)


class LogManager:
    """Opens every ``<topic>-<partition>`` directory of ``data_dir`` and creates new ones.

    Topic config overrides (the settings that differ from ``default_config``) are
    kept in each partition directory so that they survive a restart.  A directory
    that cannot be opened is logged and listed in :attr:`offline_dirs`, not fatal.
    Every partition's high watermark is written to ``replication-offset-checkpoint``
    at close, Kafka's per-data-directory file; a replicated partition will reopen at
    it, a single-replica one at its log end (see :mod:`.partition`).
    """

    def __init__(self, data_dir: Path, default_config: LogConfig) -> None:
        self.data_dir = Path(data_dir)
        self.default_config = default_config
        self.offline_dirs: list[Path] = []
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._checkpointed_hw = read_offsets_checkpoint(self.data_dir / REPLICATION_OFFSET_CHECKPOINT_FILE)
        for path in sorted(self.data_dir.iterdir()):
            if path.is_dir():
                self._open_existing(path)

    def _open_existing(self, path: Path) -> None:
        parsed = parse_partition_dir(path.name)
        if parsed is None:
            return
        try:
            config = LogConfig.from_topic_configs(
                read_properties(path / TOPIC_CONFIG_FILE), self.default_config
            )
            self._logs[parsed] = PartitionLog.open(
                path, config, high_watermark=self._checkpointed_hw.get(parsed)
            )
        except (OSError, ValueError, LogError) as exc:
            logger.error("cannot open partition directory %s, leaving it offline: %s", path, exc)
            self.offline_dirs.append(path)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def create(
        self, topic: str, partition: int, config: LogConfig | None = None, *, single_replica: bool = True
    ) -> PartitionLog:
        """Create (or return the already existing) log of ``topic``/``partition``.

        ``single_replica=False`` is for a replicated partition (cluster mode): its HW moves only
        by replication and starts at the checkpointed one (the log start without a checkpoint,
        as in Kafka); an already open single-replica log is switched over the same way.
        """
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            if not single_replica:
                existing.start_replication(self._checkpointed_hw.get(key))
            return existing
        if not is_valid_topic_name(topic) or partition < 0:
            raise InvalidPartitionDirectoryError(f"invalid topic partition {topic!r}/{partition}")
        config = config if config is not None else self.default_config
        path = self.data_dir / partition_dir_name(topic, partition)
        path.mkdir(parents=True, exist_ok=True)
        write_properties(path / TOPIC_CONFIG_FILE, self._overrides(config))
        if single_replica:
            log = PartitionLog.open(path, config)
        else:
            log = PartitionLog.open(
                path, config, high_watermark=self._checkpointed_hw.get(key, 0), single_replica=False
            )
        self._logs[key] = log
        return log

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Delete one partition's directory (a replica moved off this node); False if it had none."""
        log = self._logs.pop((topic, partition), None)
        self._checkpointed_hw.pop((topic, partition), None)
        if log is None:
            return False
        log.delete()
        return True

    def _overrides(self, config: LogConfig) -> dict[str, str]:
        defaults = self.default_config.to_topic_configs()
        return {k: v for k, v in config.to_topic_configs().items() if defaults.get(k) != v}

    def topic_config_overrides(self, topic: str) -> dict[str, str]:
        """Settings of ``topic`` that differ from the broker defaults (DescribeConfigs' TOPIC_CONFIG source)."""
        for (name, _), log in self._logs.items():
            if name == topic:
                return self._overrides(log.config)
        return {}

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply and persist new configs to every partition of ``topic`` (AlterConfigs)."""
        overrides = self._overrides(config)
        for (name, _), log in self._logs.items():
            if name == topic:
                log.update_config(config)
                write_properties(log.directory / TOPIC_CONFIG_FILE, overrides)

    def delete_topic(self, topic: str) -> None:
        """Delete every partition directory of ``topic``."""
        for key in [k for k in self._logs if k[0] == topic]:
            self._checkpointed_hw.pop(key, None)
            self._logs.pop(key).delete()

    def partitions(self) -> dict[tuple[str, int], PartitionLog]:
        """A snapshot of the open logs keyed by (topic, partition)."""
        return dict(self._logs)

    def topics(self) -> dict[str, list[int]]:
        """Topic name -> sorted partition numbers, e.g. to rebuild metadata after a restart."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self._logs):
            out.setdefault(topic, []).append(partition)
        return out

    def enforce_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(log.enforce_retention(now_ms) for log in self._logs.values())

    def flush_due(self, now_ms: int) -> None:
        """fsync the logs whose flush.ms has elapsed."""
        for log in self._logs.values():
            log.flush_if_due(now_ms)

    def checkpoint_high_watermarks(self) -> None:
        """Write every open partition's high watermark to ``replication-offset-checkpoint``."""
        offsets = {key: log.high_watermark for key, log in self._logs.items() if not log.closed}
        write_offsets_checkpoint(self.data_dir / REPLICATION_OFFSET_CHECKPOINT_FILE, offsets, fsync=True)

    def close(self) -> None:
        """Close every log cleanly (each flushes and leaves its clean-shutdown marker)."""
        try:
            self.checkpoint_high_watermarks()
        except OSError as exc:
            logger.error("writing %s failed: %s", REPLICATION_OFFSET_CHECKPOINT_FILE, exc)
        for key, log in list(self._logs.items()):
            try:
                log.close()
            except OSError as exc:
                logger.error("closing %s-%d failed: %s", key[0], key[1], exc)
