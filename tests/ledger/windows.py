"""The window of the claims of tests that are not about time."""

from cnbrain.ledger.calendar import Window

HOUR = Window(1_800_000_000, 1_800_003_600)
"""One hour, from an arbitrary epoch second."""
