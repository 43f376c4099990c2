"""One tree of errors: every exception class the package defines derives from
`cnbrain.domain.errors.CnbrainError`, except the few that are not errors of the brains, and
each has the kind its edges answer."""

import importlib
import inspect
import pkgutil

import pytest

import cnbrain
from cnbrain.domain.errors import CnbrainError, ErrorKind
from cnbrain.execution import errors as execution_errors
from cnbrain.federation.codec import WireError
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.memory import LedgerError
from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import PlacementError, RequestError
from cnbrain.storage import errors as storage_errors

OUTSIDE_THE_TREE = {
    # The REST edge's own answer, and the errors of the package's HTTP clients.
    "cnbrain.regional.problems.ApiError",
    "cnbrain.cli.rest.BrainCallError",
    "cnbrain.bench.http.HttpError",
    # Control flow inside one module, never raised past it.
    "cnbrain.group_commit.BatchAbortedError",
    "cnbrain.national.planner.AttemptError",
    # A broken invariant of the simulator: an assertion.
    "cnbrain.simulate.simulation.ConservationError",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(cnbrain.__path__, "cnbrain."):
        if module_info.name.startswith("cnbrain.v1"):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_error_of_the_package_is_in_the_tree() -> None:
    classes = _exception_classes()
    assert classes, "no exception classes found"
    outside = {name for name, cls in classes.items() if not issubclass(cls, CnbrainError)}
    assert outside == OUTSIDE_THE_TREE


@pytest.mark.parametrize(
    ("cls", "kind"),
    [
        (RequestError, "invalid"),
        (MapError, "invalid"),
        (WireError, "invalid"),
        (storage_errors.RegistryError, "invalid"),
        (storage_errors.TenantError, "invalid"),
        (storage_errors.BadCursor, "invalid"),
        (storage_errors.NotFoundError, "not_found"),
        (storage_errors.UnknownItem, "not_found"),
        (execution_errors.UnknownJob, "not_found"),
        (storage_errors.LastAdmin, "conflict"),
        (storage_errors.CapacityConflict, "conflict"),
        (storage_errors.QuotaExceeded, "conflict"),
        (storage_errors.RequestStoreError, "conflict"),
        (storage_errors.InvalidTransition, "conflict"),
        (LedgerError, "conflict"),
        (execution_errors.BackendRejected, "conflict"),
        (PeerUnavailable, "unavailable"),
        (execution_errors.BackendUnavailable, "unavailable"),
        (PlacementError, "internal"),
    ],
)
def test_each_error_has_the_kind_its_edges_answer(cls: type[CnbrainError], kind: ErrorKind) -> None:
    assert cls.kind == kind


def test_an_invalid_error_names_its_field() -> None:
    error = RequestError("resources.cpu", "must be finite")
    assert error.field == "resources.cpu"
    assert error.message == "must be finite"
    assert str(error) == "resources.cpu: must be finite"
    assert isinstance(error, ValueError)
