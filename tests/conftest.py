"""Shared fixtures: the tiny map (see tiny_map.py)."""

from typing import Any

import pytest

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.files import parse_map_document
from tests.tiny_map import tiny_map_raw


@pytest.fixture
def tiny_raw() -> dict[str, Any]:
    return tiny_map_raw()


@pytest.fixture(scope="session")
def tiny_map() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(parse_map_document(tiny_map_raw()))
