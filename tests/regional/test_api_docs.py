"""The API docs work without the internet: /docs (Swagger UI) and /redoc (ReDoc) load every
script, style and icon from the brain itself, and it serves them. Every operation says what
it does and shows examples of what it takes and answers, valid against its own schemas."""

import re
from typing import Any

import jsonschema_rs
import pytest

from cnbrain.regional.app import create_app
from tests.regional.brain_api import Api

_REFERENCE = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(("page", "script"), [("/docs", "swagger-ui"), ("/redoc", "redoc")])
async def test_the_docs_load_their_assets_from_the_brain(api: Api, page: str, script: str) -> None:
    html = await api.client.get(page)
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    assert "/openapi.json" in html.text
    assert not re.search(r"https?://", html.text), "a page that reaches outside the brain"
    references = _REFERENCE.findall(html.text)
    assert any(script in reference and reference.endswith(".js") for reference in references)
    for reference in references:
        assert reference.startswith("/"), reference
        asset = await api.client.get(reference)
        assert asset.status_code == 200 and len(asset.content) > 1000, reference


def _operations() -> list[tuple[str, dict[str, Any]]]:
    document = create_app().openapi()
    return [
        (f"{method.upper()} {path}", operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def _examples(operation: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, media type) of the operation's JSON body and its JSON answers of success."""
    found = []
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        found.append(("request body", body))
    for status, response in operation["responses"].items():
        media = response.get("content", {}).get("application/json")
        if status.startswith("2") and media is not None:
            found.append((f"answer {status}", media))
    return found


def test_every_operation_has_a_description_and_examples() -> None:
    operations = _operations()
    assert len(operations) >= 50
    for name, operation in operations:
        assert len(operation.get("description", "")) >= 20, f"{name}: no description"
        for where, media in _examples(operation):
            assert "example" in media or "examples" in media, f"{name}: no example of its {where}"


def test_every_example_is_valid_against_its_schema() -> None:
    document = create_app().openapi()
    checked = 0
    for name, operation in _operations():
        for where, media in _examples(operation):
            values = [media["example"]] if "example" in media else []
            values += [example["value"] for example in media.get("examples", {}).values()]
            validator = jsonschema_rs.validator_for(
                {**media["schema"], "components": document["components"]}
            )
            for value in values:
                errors = [error.message for error in validator.iter_errors(value)]
                assert not errors, f"{name}: its {where} example: {errors[:3]}"
                checked += 1
    assert checked >= 60
