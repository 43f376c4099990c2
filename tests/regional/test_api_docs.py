"""The API docs work without the internet: /docs (Swagger UI) and /redoc (ReDoc) load every
script, style and icon from the brain itself, and it serves them."""

import re

import pytest

from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")

_REFERENCE = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


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
