"""A region's part of the map and what differs between it and another brain's map: sites and
links added, changed and retired, and a part that names what is not the region's refused."""

import pytest
from pydantic import HttpUrl

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.federation.map_delta import RegionPart, delta, part_of
from cnbrain.netmap.compute_map import ComputeNetworkMap


def _fresh_site(cmap: ComputeNetworkMap) -> RegionPart:
    """The west's part with CC-fresh added: CC-hub's twin, attached to the same nodes."""
    part = RegionPart.of(cmap, "west")
    hub = next(site for site in part.sites if site.id == "CC-hub")
    fresh = hub.model_copy(update={"id": "CC-fresh", "labels": {"pool": "fresh"}})
    links = [
        link.model_copy(
            update={
                "a": "CC-fresh" if link.a == "CC-hub" else link.a,
                "b": "CC-fresh" if link.b == "CC-hub" else link.b,
            }
        )
        for link in part.links
        if "CC-hub" in (link.a, link.b)
    ]
    return RegionPart(sites=(*part.sites, fresh), links=(*part.links, *links))


def test_a_part_as_the_map_has_it_changes_nothing(tiny_map: ComputeNetworkMap) -> None:
    part = RegionPart.of(tiny_map, "west")
    assert {site.id for site in part.sites} == {"CC-hub"}
    assert part.links and all(link.owner == "west" for link in part.links)
    assert delta(tiny_map, "west", part).is_empty()
    assert part.digest() == RegionPart.of(tiny_map, "west").digest()
    assert part.digest() != RegionPart.of(tiny_map, "east").digest()


def test_a_new_site_comes_with_the_links_that_attach_it(tiny_map: ComputeNetworkMap) -> None:
    part = _fresh_site(tiny_map)
    change = delta(tiny_map, "west", part)
    [(site, links)] = change.new_sites
    assert site.id == "CC-fresh" and site.labels == {"pool": "fresh"}
    assert links and all("CC-fresh" in (link.a, link.b) for link in links)
    assert not (change.new_links or change.changed_sites or change.retired_sites)
    assert change.summary() == f"1 sites added, {len(links)} links added"


def test_changed_and_retired_sites_and_links(tiny_map: ComputeNetworkMap) -> None:
    part = RegionPart.of(tiny_map, "west")
    hub = part.sites[0]
    bigger = hub.model_copy(update={"labels": {"tier": "gold"}})
    first, *rest = part.links
    wider = first.model_copy(update={"bandwidth_gbps": first.bandwidth_gbps * 2})
    change = delta(tiny_map, "west", RegionPart(sites=(bigger,), links=(wider, *rest)))
    assert [s.id for s in change.changed_sites] == ["CC-hub"]
    assert [link.id for link in change.changed_links] == [first.id]
    gone = delta(tiny_map, "west", RegionPart(sites=(), links=part.links))
    assert gone.retired_sites == ["CC-hub"]
    assert gone.retired_links == []  # those attaching CC-hub go with it


def test_a_site_sent_without_its_execution_backend(tiny_map: ComputeNetworkMap) -> None:
    part = RegionPart.of(tiny_map, "west")
    slurm = BackendRef(
        kind="slurm", url=HttpUrl("https://slurm.example:6820"), credential="cc", user="cnbrain"
    )
    hidden = part.sites[0].model_copy(update={"execution": slurm})
    sites, _ = RegionPart(sites=(hidden,), links=()).documents()
    assert "slurm" in sites[0]  # documents() keeps what it is given; of() and part_of() strip
    read = part_of("west", frozenset({"CC"}), sites, [])
    assert read.sites[0].execution.kind == "simulator"


@pytest.mark.parametrize("which", ["site", "link"])
def test_a_part_naming_what_is_not_the_regions_is_refused(
    tiny_map: ComputeNetworkMap, which: str
) -> None:
    east = RegionPart.of(tiny_map, "east")
    sites, links = east.documents()
    with pytest.raises(ValueError, match=r"not (of )?'west'"):
        if which == "site":
            part_of("west", frozenset({"CC"}), sites[:1], [])
        else:
            part_of("west", frozenset({"CC"}), [], links[:1])
