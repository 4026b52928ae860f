"""Entry point of the ``kafkakit`` command."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    print("kafkakit: the command line is not yet supported (issue 12)", file=sys.stderr)
    return 2
