"""The REST edge of the error tree: each kind answers its status as problem+json."""

import json

import pytest

from cnbrain.cache.base import CacheUnavailable
from cnbrain.domain.errors import CnbrainError, Exhausted, Forbidden
from cnbrain.execution.errors import BackendRejected, UnknownJob
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import PlacementError, RequestError
from cnbrain.regional.problems import PROBLEM_JSON, RETRY_AFTER_S, answer_of
from cnbrain.storage.errors import UnknownItem


def _body(error: CnbrainError) -> tuple[int, dict[str, object], dict[str, str]]:
    response = answer_of(error)
    assert response.media_type == PROBLEM_JSON
    return response.status_code, json.loads(bytes(response.body)), dict(response.headers)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (MapError("link 'a--b': capacity_gbps must be positive"), 422),
        (UnknownItem("site 'XJ-hub' is not registered"), 404),
        (UnknownJob("42"), 404),
        (BackendRejected("job 42 cannot be suspended"), 409),
    ],
)
def test_each_kind_answers_its_status_with_the_message(error: CnbrainError, status: int) -> None:
    code, body, _ = _body(error)
    assert code == status
    assert body["status"] == status
    assert body["detail"] == str(error)


def test_an_invalid_error_with_a_field_names_it() -> None:
    code, body, _ = _body(RequestError("resources.cpu", "must be finite"))
    assert code == 422
    assert body["errors"] == [{"field": "resources.cpu", "message": "must be finite"}]


def test_a_forbidden_error_answers_403() -> None:
    code, body, _ = _body(Forbidden("you may submit only for tenant 'acme'"))
    assert code == 403
    assert body["title"] == "Forbidden"


def test_a_spent_rate_answers_429_with_retry_after_in_whole_seconds() -> None:
    code, body, headers = _body(Exhausted("rate limit of 60 per minute reached", retry_after_s=2.4))
    assert code == 429
    assert body["title"] == "Too Many Requests"
    assert headers["retry-after"] == "2"
    _, _, soon = _body(Exhausted("rate limit of 60 per minute reached", retry_after_s=0.1))
    assert soon["retry-after"] == "1"


def test_an_unavailable_peer_answers_503_with_retry_after() -> None:
    code, body, headers = _body(PeerUnavailable("the national brain", "unavailable"))
    assert code == 503
    assert headers["retry-after"] == str(RETRY_AFTER_S)
    assert "the national brain" in str(body["detail"])


def test_an_unavailable_cache_answers_503_naming_the_cache() -> None:
    code, body, headers = _body(CacheUnavailable("redis://127.0.0.1:6379/0 does not answer"))
    assert code == 503
    assert body["unavailable"] == ["cache"]
    assert headers["retry-after"] == str(RETRY_AFTER_S)


def test_an_internal_error_answers_500_closes_and_says_nothing_of_it() -> None:
    code, body, headers = _body(PlacementError("solve", RuntimeError("secret detail")))
    assert code == 500
    assert headers["connection"] == "close"
    assert "secret detail" not in json.dumps(body)
