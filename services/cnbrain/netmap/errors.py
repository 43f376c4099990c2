"""Errors raised while reading or checking a map."""

from cnbrain.domain.errors import Invalid


class MapError(Invalid):
    """A map is wrong; the message names the item (and field) at fault."""
