"""A regional brain checks the national brain's answer to GetTenancy before it takes any of
it: no more changes than asked, versions increasing from above its own up to the latest, and
every change a valid one."""

import json

import pytest

from cnbrain.regional.federation import tenancy_page
from cnbrain.v1 import national_pb2

TENANT = json.dumps({"kind": "tenant.created", "tenant_id": "acme", "name": "Acme"})


def _answer(
    versions: list[int], latest: int, text: str = TENANT
) -> national_pb2.GetTenancyResponse:
    return national_pb2.GetTenancyResponse(
        changes=[national_pb2.TenancyChange(version=v, change_json=text) for v in versions],
        latest_version=latest,
    )


def test_a_page_in_order_is_taken() -> None:
    page = tenancy_page(_answer([4, 5, 7], 9), since=3, limit=3)
    assert [v for v, _ in page.changes] == [4, 5, 7]
    assert page.latest_version == 9
    assert page.changes[0][1].kind == "tenant.created"


@pytest.mark.parametrize(
    ("answer", "limit", "words"),
    [
        (_answer([4, 5], 5), 1, "2 changes, not at most 1"),
        (_answer([3], 5), 10, "version 3 does not follow 3"),
        (_answer([5, 4], 5), 10, "version 4 does not follow 5"),
        (_answer([6], 5), 10, "up to 5"),
        (_answer([], -1), 10, "out of range"),
        (_answer([], 2**63 - 1), 10, "out of range"),
        (_answer([4], 4, text=TENANT.replace("acme", "a b")), 10, "tenant_id"),
        (
            _answer(
                [4],
                4,
                text=json.dumps(
                    {
                        "kind": "api_key.created",
                        "key_id": "0123456789abcdef",
                        "user_id": "alice",
                        "secret_sha256": "the secret itself",
                    }
                ),
            ),
            10,
            "secret_sha256",
        ),
        (_answer([4], 4, text='{"kind": "tenant.deleted", "tenant_id": "acme"}'), 10, "kind"),
    ],
)
def test_a_wrong_page_is_refused_whole(
    answer: national_pb2.GetTenancyResponse, limit: int, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        tenancy_page(answer, since=3, limit=limit)
