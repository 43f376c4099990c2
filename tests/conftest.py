"""Shared fixtures: the tiny map (see tiny_map.py), and a umask of 0."""

import os
from collections.abc import Iterator
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


@pytest.fixture
def no_umask() -> Iterator[None]:
    """Run with umask 0: whatever is not private is created readable (and writable) by all."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)
