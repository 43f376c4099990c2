"""Errors raised while reading or checking a map."""


class MapError(ValueError):
    """A map is wrong; the message names the item (and field) at fault."""
