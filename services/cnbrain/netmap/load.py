"""Resolve a map spec (`china`, `synthetic:...`, a `.gml` file, or a YAML/JSON file) to a map."""

from pathlib import Path

from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.files import read_map_document
from cnbrain.netmap.synthetic import SYNTHETIC_PREFIX, parse_synthetic_spec, synthetic_document
from cnbrain.netmap.topology_zoo import zoo_document

BUILTIN_MAPS = ("china",)


def load_document(spec: str) -> MapDocument:
    """The map document named by `spec`; raises MapError when it cannot be had."""
    if spec == "china":
        return china_document()
    if spec.startswith(SYNTHETIC_PREFIX):
        return synthetic_document(**parse_synthetic_spec(spec))
    path = Path(spec)
    if not path.exists():
        raise MapError(
            f"map {spec!r}: neither a built-in map ({', '.join(BUILTIN_MAPS)}), "
            f"a '{SYNTHETIC_PREFIX}...' spec, nor an existing file"
        )
    if path.suffix.lower() == ".gml":
        return zoo_document(path)
    if path.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise MapError(f"map {spec!r}: unknown file type; use .yaml, .yml, .json or .gml")
    return read_map_document(path)


def load_map(spec: str) -> ComputeNetworkMap:
    """Load and check the map named by `spec`."""
    return ComputeNetworkMap.from_document(load_document(spec))
