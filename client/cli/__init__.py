"""kafkakit.cli: the ``kafkakit`` command line (topics, produce, consume, groups, cluster, perf)."""
