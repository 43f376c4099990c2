"""Fixtures of the federation's end-to-end tests."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.federation_processes import LocalFederation, local_federation


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(tmp_path_factory.mktemp("federation"))
