"""Parsing requests and checking them against a map, with errors that name the field."""

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from cnbrain.domain.accelerators import ACCELERATOR_MODELS
from cnbrain.domain.flows import Endpoint, Flows
from cnbrain.domain.request import PlacementRequest
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.errors import RequestError


def parse_request(raw: Any) -> PlacementRequest:
    """Validate a JSON-like value as a request; raise RequestError naming the first bad field."""
    if not isinstance(raw, Mapping):
        raise RequestError("(request)", "a request must be a JSON object")
    try:
        return PlacementRequest.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(request)"
        raise RequestError(field, err["msg"]) from None


def check_request(request: PlacementRequest, cmap: ComputeNetworkMap) -> None:
    """Raise RequestError if `request` names anything `cmap` does not know."""
    province = cmap.provinces.get(request.source_province)
    if province is None:
        raise RequestError(
            "source_province",
            f"unknown province {request.source_province!r}; "
            f"known: {', '.join(cmap.province_codes)}",
        )
    if request.access_node is not None and request.access_node not in province.access_nodes:
        raise RequestError(
            "access_node",
            f"{request.access_node!r} is not an access node of {province.code} "
            f"({', '.join(province.access_nodes)})",
        )
    accelerator = request.resources.accelerator
    if accelerator is not None and accelerator.model not in ACCELERATOR_MODELS:
        raise RequestError(
            "resources.accelerator.model",
            f"unknown accelerator model {accelerator.model!r}; "
            f"known: {', '.join(ACCELERATOR_MODELS)}",
        )
    for name in ("regions_allowed", "regions_denied"):
        for i, item in enumerate(getattr(request.constraints, name)):
            if item not in cmap.provinces and item not in cmap.regions:
                raise RequestError(
                    f"constraints.{name}[{i}]",
                    f"{item!r} is neither a province code nor a region id",
                )
    if request.flows is not None:
        if request.start != "queue" and request.moves_data:
            raise RequestError(
                "start",
                'a request with flows is planned over time: it must ask start "queue"',
            )
        check_flows(cmap, request.flows)


def check_flows(cmap: ComputeNetworkMap, flows: Flows) -> None:
    """Raise RequestError naming the field of a flow end or serving province `cmap` lacks."""
    for i, staging in enumerate(flows.staging):
        _check_end(cmap, staging.source, f"flows.staging.{i}.source")
    for i, delivery in enumerate(flows.delivery):
        _check_end(cmap, delivery.destination, f"flows.delivery.{i}.destination")
    if flows.serving is not None:
        for i, province in enumerate(flows.serving.provinces):
            if province not in cmap.provinces:
                raise RequestError(f"flows.serving.provinces.{i}", f"unknown province {province!r}")


def _check_end(cmap: ComputeNetworkMap, end: Endpoint, name: str) -> None:
    if end.site is not None and end.site not in cmap.site_index:
        raise RequestError(f"{name}.site", f"unknown site {end.site!r}")
    if end.province is not None and end.province not in cmap.provinces:
        raise RequestError(f"{name}.province", f"unknown province {end.province!r}")
