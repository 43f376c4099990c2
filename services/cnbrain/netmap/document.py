"""The map file format: one document of regions, provinces, nodes, sites and links.

The same document is read from YAML or JSON (see docs/map-format.md).
"""

from pydantic import Field

from cnbrain.domain.model import DomainModel
from cnbrain.domain.network import Link, Node, Province, Region
from cnbrain.domain.site import Site


class MapDocument(DomainModel):
    name: str = Field(min_length=1)
    description: str = ""
    attribution: str = ""
    regions: tuple[Region, ...]
    provinces: tuple[Province, ...]
    nodes: tuple[Node, ...]
    sites: tuple[Site, ...]
    links: tuple[Link, ...]
