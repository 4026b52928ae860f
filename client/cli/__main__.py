"""``python -m kafkakit.cli``: the same as the ``kafkakit`` command."""

from kafkakit.cli.main import run

run()
