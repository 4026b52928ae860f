"""Output of the ``kafkakit`` command: tables (rich) or JSON, and errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["emit_json", "error", "print_table", "terminal"]


def terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (progress bars and colour only then)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    stream: TextIO | None = None,
) -> None:
    """A table on ``stream`` (stdout): boxed on a terminal, plain aligned columns when piped.

    Piped output stays one row per line with no box characters, so it can be
    read by ``grep``/``awk`` like Kafka's tools' output.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out = stream or sys.stdout
    interactive = terminal(out)
    console = Console(
        file=out, width=None if interactive else 10_000, no_color=not interactive, highlight=False
    )
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD if interactive else None,
        show_edge=False,
        pad_edge=False,
        title_justify="left",
        collapse_padding=True,
    )
    for header in headers:
        table.add_column(header, overflow="fold", no_wrap=not interactive)
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    console.print(table)


def emit_json(value: Any, *, stream: TextIO | None = None) -> None:
    """``value`` as one JSON document on stdout."""
    out = stream or sys.stdout
    out.write(json.dumps(value, default=str, indent=2) + "\n")


def error(message: str) -> None:
    """An error line on stderr."""
    print(f"kafkakit: error: {message}", file=sys.stderr)
