"""Fixtures of the federation's end-to-end tests."""

from collections.abc import Iterator
from typing import Any

import pytest
from federations import make_federation

from federation_processes import LocalFederation


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from make_federation(tmp_path_factory.mktemp("federation"))
