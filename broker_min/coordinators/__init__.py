"""Coordinators: the classic group coordinator and its ``__consumer_offsets`` storage."""
