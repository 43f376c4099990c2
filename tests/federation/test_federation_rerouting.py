"""End to end on separate processes, without a data plane (`steering = off`): a federation
(the national brain, the east and the west on the tiny map) re-routes a cross-region path
segment by segment off the links its operators report down, each owner moving only its own
part; new placements keep off those links; and what became of a segment reaches the
request's source region even when that region was down at the time: the note stays owed in
the owner's database and is told once the region is back."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cnbrain.domain.decision import Decision
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.files import write_map_document
from tests.federation.rerouted_paths import (
    decision_at_source,
    links_of,
    part_links,
    placed,
    read_rows,
    wait_rerouted,
)
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import wait_for
from tests.tiny_map import tiny_map_raw


@pytest.fixture
def brains(tmp_path: Path) -> Iterator[LocalFederation]:
    map_file = tmp_path / "tiny.yaml"
    write_map_document(MapDocument.model_validate(tiny_map_raw()), map_file)
    yield from local_federation(
        tmp_path,
        regions=["east", "west"],
        database_prefix="cnbrain_reroute_fed",
        shared_env={"CNBRAIN_MAP": str(map_file), "CNBRAIN_RESTEER_INTERVAL_S": "0.2"},
    )


def report_down(brains: LocalFederation, region: str, link: str) -> dict[str, str]:
    """Report `link` down at `region`'s brain, as its admin; the answer."""
    answer = httpx.put(
        f"{brains.members[region].url}/v1/links/{link}/state",
        json={"state": "down", "reason": "fibre cut"},
        headers={"Authorization": f"Bearer {brains.admin_token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def all_links(decision: Decision) -> set[str]:
    assert decision.path is not None
    return {hop.link for segment in decision.path.segments for hop in segment.hops}


def test_reports_reroute_each_owners_segment_and_keep_new_placements_off(
    brains: LocalFederation,
) -> None:
    decision = placed(brains)
    assert decision.path is not None
    site_link = decision.path.segments[2].hops[-1].link
    backbone_link = decision.path.segments[1].hops[0].link

    assert report_down(brains, "west", site_link)["kept_by"] == "west"
    [first] = wait_rerouted(brains, decision.request_id, 1)
    assert (first["detail"]["segment"], first["detail"]["owner"]) == ("destination", "west")
    assert report_down(brains, "east", backbone_link)["kept_by"] == "national"
    second = wait_rerouted(brains, decision.request_id, 2)[-1]
    assert (second["detail"]["segment"], second["detail"]["owner"]) == ("backbone", "national")

    moved = decision_at_source(brains, decision.request_id)
    assert moved.path is not None
    assert moved.reservation_id == decision.reservation_id
    assert moved.path.segments[0] == decision.path.segments[0]
    assert not {site_link, backbone_link} & all_links(moved)
    assert part_links(brains, str(moved.reservation_id)) == {
        segment.owner: links_of(segment.hops) for segment in moved.path.segments
    }

    later = placed(brains)
    assert not {site_link, backbone_link} & all_links(later)


def test_a_source_region_down_is_told_of_its_rerouted_segment_once_it_is_back(
    brains: LocalFederation,
) -> None:
    decision = placed(brains)
    assert decision.path is not None
    site_link = decision.path.segments[2].hops[-1].link
    west_db = brains.databases["west"]

    brains.kill("east")
    report_down(brains, "west", site_link)

    # West moves its part at once, and owes east the note while east is down.
    def moved_at_west() -> bool:
        return site_link not in part_links(brains, str(decision.reservation_id))["west"]

    wait_for(moved_at_west, "west's part moved off the link")
    wait_for(
        lambda: read_rows(west_db, "SELECT count(*) FROM owed_notes") == [(1,)],
        "a note owed to east",
    )

    brains.start_member("east", wait=False)
    brains.wait_ready("east")
    [rerouted] = wait_rerouted(brains, decision.request_id, 1)
    assert (rerouted["detail"]["segment"], rerouted["detail"]["owner"]) == ("destination", "west")
    moved = decision_at_source(brains, decision.request_id)
    assert moved.path is not None
    assert site_link not in all_links(moved)
    assert (
        links_of(moved.path.segments[2].hops)
        == part_links(brains, str(decision.reservation_id))["west"]
    )
    wait_for(
        lambda: read_rows(west_db, "SELECT count(*) FROM owed_notes") == [(0,)],
        "the note settled",
    )
