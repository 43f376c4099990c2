"""The console of the national brain, served by its HTTP listener, in headless Chromium: a
federation of the national brain and the regions east and west (separate processes on
PostgreSQL); an operator made on the east (a key of the federation's, which the national
brain holds too) sees the whole country's map, the backbone links a cross-region placement
crossed coloured by their load, each region with its latest summary, and the sites of the
registered regions coloured by the load their region's latest summary carried (the site of
the placement as its region's own capacity API shows it; the sites of regions without a
brain stay grey); a tenant's key sees the layout alone."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.console.browser import open_page, screenshot
from tests.console.test_console import SITES, bucket, columns, legend
from tests.federation.member_requests import GPU_REQUEST, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.processes import free_port

REGIONS = ["east", "west"]
NONE = "\N{EN DASH}"
"""What a cell shows for what is not known."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("national-console"),
        regions=REGIONS,
        database_prefix="cnbrain_natconsole",
        national_env={"CNBRAIN_HTTP_PORT": str(free_port())},
        shared_env={"CNBRAIN_TENANCY_INTERVAL_S": "0.5"},
    )


@pytest.fixture(scope="module")
def national(federation: LocalFederation) -> str:
    """The national brain's HTTP base URL."""
    return f"http://127.0.0.1:{federation.members['national'].env['CNBRAIN_HTTP_PORT']}"


@pytest.fixture(scope="module")
def keys(federation: LocalFederation) -> dict[str, str]:
    """An operator's and a tenant user's keys, made on the east."""
    admin = {"Authorization": f"Bearer {federation.admin_token}"}
    made: dict[str, str] = {}
    with httpx.Client(base_url=federation.members["east"].url, headers=admin, timeout=30) as east:
        east.post("/v1/tenants", json={"id": "acme", "name": "Acme"}).raise_for_status()
        for role, tenant in (("operator", None), ("tenant-user", "acme")):
            user = east.post("/v1/users", json={"name": role, "role": role, "tenant": tenant})
            assert user.status_code == 201, user.text
            key = east.post(f"/v1/users/{user.json()['id']}/api-keys")
            assert key.status_code == 201, key.text
            made[role] = key.json()["token"]
    return made


@pytest.fixture(scope="module")
def placed(federation: LocalFederation, keys: dict[str, str]) -> dict[str, Any]:
    """The GPU training job from Zhejiang (east), placed on a western hub."""
    view = submit(federation, "east", GPU_REQUEST)
    assert view["state"] == "placed", view
    return view


def _national_map(national: str, key: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{national}/console/api/map", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def _west_h800_in_use(national: str, key: str) -> float | None:
    west = next(r for r in _national_map(national, key)["regions"] if r["id"] == "west")
    h800 = [a for a in west["accelerators"] or [] if a["model"] == "H800"]
    return h800[0]["total"] - h800[0]["free"] if h800 else None


def _site_loads(national: str, key: str) -> dict[str, float | None]:
    return {s["id"]: s["utilisation"] for s in _national_map(national, key)["sites"]}


def _west_site_load(federation: LocalFederation, site_id: str) -> float:
    """The load of the west's site `site_id` as the west's capacity API shows it."""
    sites = get(federation, "west", "/v1/capacity/sites")
    share: float = next(s for s in sites if s["id"] == site_id)["utilisation"]
    return share


def test_the_national_console_shows_the_country_from_the_national_view(
    federation: LocalFederation,
    national: str,
    keys: dict[str, str],
    placed: dict[str, Any],
    driver: webdriver.Chrome,
) -> None:
    operator = keys["operator"]
    hub = placed["site"]
    # The west's summaries follow its ledger within its summary interval.
    for _ in range(300):
        if _west_h800_in_use(national, operator) == 64 and _site_loads(national, operator)[
            hub
        ] == round(_west_site_load(federation, hub), 4):
            break
        time.sleep(0.1)
    assert _west_h800_in_use(national, operator) == 64
    loads = _site_loads(national, operator)
    assert loads[hub] == round(_west_site_load(federation, hub), 4)
    assert 0 < (loads[hub] or 0) < 0.25
    data = _national_map(national, operator)
    region_of = {p["code"]: p["region"] for p in data["provinces"]}
    for site in data["sites"]:
        # Every site of a registered region has its load; the others none.
        known = region_of[site["province"]] in REGIONS
        assert (site["utilisation"] is not None) == known, site

    driver.get("about:blank")
    view = open_page(driver, f"{national}/console/#key={operator}", "map")
    assert "national brain" in driver.find_element(By.ID, "brain").text
    marks = {
        m.get_attribute("data-site"): m for m in view.find_elements(By.CSS_SELECTOR, "circle.site")
    }
    assert len(marks) == SITES
    colours = legend(view)
    for site in data["sites"]:
        mark = marks[site["id"]]
        shown = mark.get_attribute("data-utilisation")
        if site["utilisation"] is None:
            assert shown is None, site
            assert mark.get_attribute("fill") == colours["not known here"], site
        else:
            assert float(shown or "nan") == site["utilisation"], site
            assert mark.get_attribute("fill") == colours[bucket(site["utilisation"])], site
    assert marks[hub].get_attribute("fill") == colours["< 25 %"]
    busiest = view.find_element(By.CSS_SELECTOR, "table.busiest-sites tbody tr")
    assert busiest.text.startswith(hub)
    backbone = next(s for s in placed["decision"]["path"]["segments"] if s["kind"] == "backbone")
    for hop in backbone["hops"]:
        line = view.find_element(By.CSS_SELECTOR, f'line[data-link="{hop["link"]}"]')
        share = float(line.get_attribute("data-utilisation") or "nan")
        assert share > 0
        assert line.get_attribute("stroke") == colours[bucket(share)]
    regions = {row["Region"].split()[0]: row for row in columns(view, "table.regions")}
    assert set(regions) == {"east", "north", "south", "west"}
    for region in REGIONS:
        assert regions[region]["Brain"] == "registered"
    assert regions["north"]["Brain"] == "not registered"
    assert "H800 64/" in regions["west"]["Accelerators in use"]
    screenshot(driver, "national")

    driver.get("about:blank")
    view = open_page(driver, f"{national}/console/#key={keys['tenant-user']}", "map")
    lines = view.find_elements(By.CSS_SELECTOR, "line.link")
    assert lines and all(line.get_attribute("data-utilisation") is None for line in lines)
    circles = view.find_elements(By.CSS_SELECTOR, "circle.site")
    assert circles and all(c.get_attribute("data-utilisation") is None for c in circles)
    assert all(r["Accelerators in use"] == NONE for r in columns(view, "table.regions"))


def test_the_national_console_needs_a_federation_key(national: str) -> None:
    assert httpx.get(f"{national}/").headers["location"] == "/console/"
    assert httpx.get(f"{national}/console/api/map").status_code == 401
    wrong = {"Authorization": "Bearer ck_nobody.not-a-key"}
    assert httpx.get(f"{national}/console/api/info", headers=wrong).status_code == 401
