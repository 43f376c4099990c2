"""The national brain's use cases, the planner and the coordinator, load no database,
transport or generated wire code: they work on the core's values and on ports."""

import subprocess
import sys

import pytest

IO = (
    "grpc",
    "sqlalchemy",
    "asyncpg",
    "aiosqlite",
    "httpx",
    "redis",
    "cnbrain.v1",
    "cnbrain.storage",
)


@pytest.mark.parametrize("module", ["cnbrain.national.planner", "cnbrain.national.coordinator"])
def test_a_national_use_case_imports_no_io_library(module: str) -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print(*sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [m for m in loaded if m in IO or m.startswith(tuple(f"{io}." for io in IO))] == []
