"""How decoding a large piece of a fetch keeps the cyclic garbage collector out of the way.

A ConsumerRecord is a NamedTuple, and CPython's collector only untracks *exact*
tuples whose items are atomic; tuple subclasses stay tracked. Left alone, every
record the consumer builds is traversed by a young-generation collection (the
records are alive: the application is about to read them), promoted, and often
traversed again in the next generation: about a fifth of the consumer's time
at a million records a second, for objects that can never be part of a cycle.

:func:`gc_paused` therefore decodes with the collector disabled and, for a
large piece, moves the new records straight to the oldest generation (a
``gc.freeze()`` / ``gc.unfreeze()`` pair: two list splices, whatever the
number of objects). To keep that from promoting the application's own young
objects unexamined, the young generations are collected first
(``gc.collect(1)``, which costs little as long as the records never enter them).
Everything the collector would do still happens: young garbage is collected
before every large decode; reachable survivors reach the oldest generation
the normal way (and count towards its next collection); and because the
records no longer drive young collections, a full collection is run if none
has happened over ``_FULL_COLLECTION_EVERY`` large decodes, so cycles that die
in the oldest generation are still reclaimed in an application that allocates
almost nothing between two ``getmany`` calls.

Nothing is changed when the application disabled the collector or froze
objects itself (``gc.freeze()`` before forking: ``unfreeze`` would undo it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BYPASS_RECORDS", "gc_paused"]

#: Pieces with at least this many records bypass the young generations; smaller ones are not worth a collection.
BYPASS_RECORDS = 1024
#: Large decodes without a full collection in between after which one is run.
_FULL_COLLECTION_EVERY = 256


class _State:
    """How many large decodes ran since the last full collection this module saw."""

    decodes = 0
    full_collections = -1


@contextmanager
def gc_paused(records: int) -> Iterator[None]:
    """Run the block (which builds about ``records`` records) with the collector paused; see the module doc."""
    if not gc.isenabled():
        yield
        return
    bypass = records >= BYPASS_RECORDS and gc.get_freeze_count() == 0
    if bypass:
        _collect_before_bypass()
    gc.disable()
    try:
        yield
    finally:
        # Checked again: the application may have frozen objects while we decoded (another thread).
        if bypass and gc.get_freeze_count() == 0:
            gc.freeze()  # every tracked object, the new records included, to the permanent generation ...
            gc.unfreeze()  # ... and from there to the oldest one: the young generations are left empty
        gc.enable()


def _collect_before_bypass() -> None:
    """Collect the young generations, and everything when no full collection happened for a long while."""
    full = gc.get_stats()[2]["collections"]
    if full != _State.full_collections:
        _State.full_collections = full
        _State.decodes = 0
    _State.decodes += 1
    if _State.decodes > _FULL_COLLECTION_EVERY:
        gc.collect()
    else:
        gc.collect(1)
