"""Reading and writing map documents as YAML or JSON files."""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError

_ID_KEYS = ("id", "code")


def parse_map_document(raw: Any) -> MapDocument:
    """Validate a parsed YAML/JSON value as a map document.

    Raises MapError whose message names the item (by its id) and the field at fault.
    """
    if not isinstance(raw, Mapping):
        raise MapError(
            "a map document must be a mapping with regions, provinces, nodes, sites, links"
        )
    try:
        return MapDocument.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(raw, err["loc"], err["msg"]) for err in exc.errors()]
        raise MapError("; ".join(problems)) from None


def read_map_document(path: Path) -> MapDocument:
    """Read a `.yaml`, `.yml` or `.json` map document."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MapError(f"{path}: cannot read the map file ({exc.strerror})") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise MapError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from None
    return parse_map_document(raw)


def write_map_document(document: MapDocument, path: Path) -> None:
    """Write `document` as JSON or YAML, chosen by the file suffix."""
    data = document.model_dump(mode="json")
    if path.suffix == ".json":
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")


def _describe(raw: Mapping[str, Any], loc: tuple[int | str, ...], msg: str) -> str:
    """Turn a pydantic location such as ('sites', 3, 'capacity', 'cpu_cores') into
    "sites[3] (id 'bj-1'): capacity.cpu_cores: <msg>"."""
    if len(loc) >= 2 and isinstance(loc[1], int):
        section, index, rest = str(loc[0]), loc[1], loc[2:]
        item = raw.get(section, [])[index] if isinstance(raw.get(section), list) else None
        label = f"{section}[{index}]"
        if isinstance(item, Mapping):
            for key in _ID_KEYS:
                if key in item:
                    label += f" ({key} {item[key]!r})"
                    break
            else:
                if "a" in item and "b" in item:
                    label += f" ({item['a']}--{item['b']})"
        field = ".".join(str(p) for p in rest)
        return f"{label}: {field}: {msg}" if field else f"{label}: {msg}"
    return f"{'.'.join(str(p) for p in loc)}: {msg}"
