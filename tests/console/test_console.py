"""The web console of a real regional brain, loaded in headless Chromium: the key it asks
for, the map with every site at its coordinates coloured by its load, the admission queue by
class, a request's explanation and three segments on the map, tenants' usage, and what a
tenant's key does not show. What the pages show is checked against the brain's REST API."""

import math
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.console.browser import open_page, screenshot, wait_for
from tests.console.conftest import Seeded, admin_client
from tests.regional.brain_api import ADMIN_TOKEN

SITES = 96
"""Sites of the built-in map."""
COS_35 = math.cos(math.radians(35))
"""The map's projection shrinks longitude by this (docs/console.md)."""
BUCKETS = ((0.0, "idle"), (0.25, "< 25 %"), (0.5, "25-50 %"), (0.75, "50-75 %"), (0.9, "75-90 %"))
"""The legend's buckets of load (docs/console.md): the label of the shares from each bound
up to the next one (`idle`: none in use); "≥ 90 %" above the last."""


def bucket(share: float) -> str:
    if share == 0:
        return "idle"
    label = "≥ 90 %"
    for bound, name in reversed(BUCKETS[1:]):
        if share < bound:
            label = name
    return label


def show(
    driver: webdriver.Chrome, seeded: Seeded, route: str, key: str = ADMIN_TOKEN
) -> WebElement:
    """Page `route` of the console, signed in with `key` (taken from the URL's fragment) on a
    fresh load of the page."""
    driver.get("about:blank")
    open_page(driver, f"{seeded.url}/console/#key={key}", "map")
    if route == "map":
        return driver.find_element(By.ID, "view")
    return open_page(driver, f"{seeded.url}/console/#/{route}", route)


def api_map(seeded: Seeded) -> dict[str, Any]:
    with admin_client(seeded.url) as admin:
        answer = admin.get("/console/api/map")
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def legend(view: WebElement) -> dict[str, str]:
    """The legend's colour of each label."""
    return {
        swatch.text.strip(): str(swatch.find_element(By.TAG_NAME, "i").get_attribute("data-colour"))
        for swatch in view.find_elements(By.CSS_SELECTOR, ".legend .swatch")
    }


def test_the_root_leads_to_the_console_which_asks_for_a_key(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    driver.get(f"{seeded.url}/console/")
    driver.execute_script("sessionStorage.clear()")
    driver.get("about:blank")
    open_page(driver, f"{seeded.url}/", "key")
    assert driver.current_url == f"{seeded.url}/console/"
    driver.find_element(By.ID, "key").send_keys("ck_nobody.not-a-key")
    driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
    error = wait_for(driver, lambda d: d.find_elements(By.ID, "key-error"), "the key's refusal")
    assert "not valid" in error[0].text
    screenshot(driver, "key")
    # The page and its scripts need no key; the data does.
    assert httpx.get(f"{seeded.url}/console/static/main.js").status_code == 200
    assert httpx.get(f"{seeded.url}/console/api/map").status_code == 401


def test_the_map_draws_every_site_at_its_place_coloured_by_its_load(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    view = show(driver, seeded, "map")
    data = api_map(seeded)
    sites = {s["id"]: s for s in data["sites"]}
    marks = {
        m.get_attribute("data-site"): m for m in view.find_elements(By.CSS_SELECTOR, "circle.site")
    }
    assert len(marks) == len(sites) == SITES
    colours = legend(view)
    placed = seeded.training["site"]
    for site_id in (placed, "ZJ-idle-1", "XJ-dc-1"):
        mark, site = marks[site_id], sites[site_id]
        assert float(mark.get_attribute("cx") or "nan") == pytest.approx(site["lon"] * COS_35)
        assert float(mark.get_attribute("cy") or "nan") == pytest.approx(-site["lat"])
        share = float(mark.get_attribute("data-utilisation") or "nan")
        assert share == site["utilisation"]
        assert mark.get_attribute("fill") == colours[bucket(share)], site_id
    # The training job holds its share of the hub (as its decision said); the V100 job all the
    # V100 of ZJ-idle-1; XJ-dc-1 nothing.
    after = seeded.training["decision"]["outcome"]["site_utilisation"]
    assert sites[placed]["utilisation"] == pytest.approx(after, abs=1e-3)
    assert 0 < sites[placed]["utilisation"] < 0.25
    assert sites["ZJ-idle-1"]["utilisation"] == 1.0
    assert sites["XJ-dc-1"]["utilisation"] == 0.0
    assert len({colours["< 25 %"], colours["≥ 90 %"], colours["idle"]}) == 3
    # The backbone links of its path carry its bandwidth, drawn by their load.
    backbone = next(
        s for s in seeded.training["decision"]["path"]["segments"] if s["kind"] == "backbone"
    )
    for hop in backbone["hops"]:
        line = view.find_element(By.CSS_SELECTOR, f'line[data-link="{hop["link"]}"]')
        share = float(line.get_attribute("data-utilisation") or "nan")
        assert share > 0
        assert line.get_attribute("stroke") == colours[bucket(share)]
    busiest = view.find_element(By.CSS_SELECTOR, "table.busiest-sites tbody tr")
    assert busiest.text.startswith("ZJ-idle-1") and "100 %" in busiest.text
    screenshot(driver, "map")

    view.find_element(By.XPATH, "//*[name()='text'][text()='ZJ']").click()
    close = wait_for(driver, lambda d: _page(d, "map/ZJ"), "the close-up of Zhejiang")
    labels = {t.text for t in close.find_elements(By.CSS_SELECTOR, "text.site-label")}
    assert {"ZJ-idle-1", "ZJ-dc-1"} <= labels
    screenshot(driver, "map-province")


def test_the_queue_shows_waiting_requests_by_class_with_their_wait(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    view = show(driver, seeded, "queue")
    sections = {
        s.get_attribute("data-class"): s
        for s in view.find_elements(By.CSS_SELECTOR, "section.queue-class")
    }
    classes = [
        s.get_attribute("data-class")
        for s in view.find_elements(By.CSS_SELECTOR, "section.queue-class")
    ]
    assert classes == ["high", "normal", "low"]  # by value, highest first
    for name, request in (("high", seeded.queued_high), ("normal", seeded.queued_normal)):
        rows = sections[name].find_elements(By.CSS_SELECTOR, "table.queue tbody tr")
        assert len(rows) == 1, name
        row = rows[0]
        assert row.find_element(By.CSS_SELECTOR, "a[data-request]").text == request["id"]
        assert "acme-ai" in row.text
        assert row.find_element(By.CSS_SELECTOR, ".wait").text.endswith("s")
        assert "ZJ-idle-1" in row.text  # planned there, once the V100 job ends
    assert "(value 500, the default class, preemptible): 1 waiting" in sections["normal"].text
    assert not sections["low"].find_elements(By.CSS_SELECTOR, "table.queue")
    screenshot(driver, "queue")


def test_a_request_page_explains_its_decision_and_draws_its_three_segments(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    request = seeded.training
    decision = request["decision"]
    page = show(driver, seeded, f"requests/{request['id']}")
    verdict = page.find_element(By.CSS_SELECTOR, ".verdict").text
    assert f"Placed on {decision['site']}" in verdict
    explanation = page.find_element(By.CSS_SELECTOR, ".explanation").text
    why = decision["explanation"]
    assert f"{why['sites_feasible']} of {why['sites_total']} sites were feasible" in explanation
    assert why["local_first"] in explanation
    candidates = page.find_elements(By.CSS_SELECTOR, "table.candidates tbody tr")
    assert [c.text.split()[0] for c in candidates] == [c["site"] for c in why["candidates"]]
    assert [c.text.split()[0] for c in candidates if c.text.endswith("chosen")] == [
        decision["site"]
    ]
    rejections = page.find_elements(By.CSS_SELECTOR, "table.rejections tbody tr")
    assert len(rejections) == len(why["rejections"])

    segments = decision["path"]["segments"]
    assert [s["kind"] for s in segments] == ["source", "backbone", "destination"]
    main_map = page.find_element(By.CSS_SELECTOR, "section.path > .map-frame svg")
    drawn = main_map.find_elements(By.CSS_SELECTOR, "polyline.segment")
    assert [(d.get_attribute("data-kind"), d.get_attribute("data-owner")) for d in drawn] == [
        (s["kind"], s["owner"]) for s in segments
    ]
    for line, segment in zip(drawn, segments, strict=True):
        points = (line.get_attribute("points") or "").split()
        assert len(points) == len(segment["hops"]) + 1
    figures = page.find_elements(By.CSS_SELECTOR, "figure.segment-map")
    assert [f.get_attribute("data-kind") for f in figures] == ["source", "backbone", "destination"]
    for figure in figures:
        assert len(figure.find_elements(By.CSS_SELECTOR, "polyline.segment")) == 1
    rows = page.find_elements(By.CSS_SELECTOR, "table.segments tbody tr")
    assert [r.text.split()[:2] for r in rows] == [[s["kind"], s["owner"]] for s in segments]
    screenshot(driver, "request")


def test_a_queued_request_page_says_where_it_waits(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    page = show(driver, seeded, f"requests/{seeded.queued_high['id']}")
    waiting = page.find_element(By.CSS_SELECTOR, "section.queued").text
    assert "Waiting: place 0 in the queue" in waiting
    assert "ZJ-idle-1" in waiting


def test_tenants_usage_is_what_the_quotas_and_the_meters_hold(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    page = show(driver, seeded, "tenants")
    held = columns(page, "table.quotas")
    assert [row["Tenant"] for row in held] == ["acme-ai", "other-co"]
    metered = columns(page, "table.metered")
    with admin_client(seeded.url) as admin:
        for row in held:
            quota = admin.get(f"/v1/tenants/{row['Tenant']}/quota").json()
            assert row["Active requests"] == str(quota["used_active_requests"])
            assert row["Accelerators"] == f"{quota['used_accelerators']:g}"
            assert row["CPU cores"] == f"{quota['used_cpu_cores']:g}"
        report = admin.get("/v1/usage/report").json()["tenants"]
    # acme-ai's placed jobs hold 64 H800 and 32 V100; its queued ones nothing yet.
    assert held[0]["Accelerators"] == "96"
    assert [row["Tenant"] for row in metered] == sorted(report) == ["other-co"]
    assert metered[0]["Jobs"] == str(report["other-co"]["records"]) == "1"
    assert float(metered[0]["Core-hours"]) == pytest.approx(
        report["other-co"]["cpu_core_hours"], abs=1e-3
    )
    screenshot(driver, "tenants")


def columns(page: WebElement, selector: str) -> list[dict[str, str]]:
    """The rows of the table at `selector`, each cell under its column's title."""
    table = page.find_element(By.CSS_SELECTOR, selector)
    titles = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    return [
        dict(zip(titles, (td.text for td in tr.find_elements(By.TAG_NAME, "td")), strict=True))
        for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]


def test_a_tenant_key_shows_its_own_tenant_and_no_load(
    seeded: Seeded, driver: webdriver.Chrome
) -> None:
    key = seeded.tenant_key
    view = show(driver, seeded, "map", key=key)
    marks = view.find_elements(By.CSS_SELECTOR, "circle.site")
    assert len(marks) == SITES
    assert all(m.get_attribute("data-utilisation") is None for m in marks)
    assert len({m.get_attribute("fill") for m in marks}) == 1
    assert "operators and admins" in view.find_element(By.CSS_SELECTOR, ".legend").text
    assert not view.find_elements(By.CSS_SELECTOR, "table.busiest-sites")

    listed = open_page(driver, f"{seeded.url}/console/#/requests", "requests")
    ids = {a.text for a in listed.find_elements(By.CSS_SELECTOR, "a[data-request]")}
    acme = {
        seeded.training["id"],
        seeded.v100["id"],
        seeded.queued_high["id"],
        seeded.queued_normal["id"],
    }
    assert ids == acme  # not other-co's

    tenants = open_page(driver, f"{seeded.url}/console/#/tenants", "tenants")
    assert [row["Tenant"] for row in columns(tenants, "table.quotas")] == ["acme-ai"]
    assert not tenants.find_elements(By.CSS_SELECTOR, "table.metered")  # acme-ai's: none

    other = open_page(driver, f"{seeded.url}/console/#/requests/{seeded.other['id']}", "error")
    assert "404" in other.text


def _page(driver: webdriver.Chrome, page: str) -> WebElement | None:
    view = driver.find_element(By.ID, "view")
    return view if view.get_attribute("data-page") == page else None
