"""The netlab's plan, pure: which network namespaces, veth links, addresses, SIDs and static
routes emulate a map (or a part of it), and what one owner installs to steer a decision.

Every network node and site of the map (or of its part) is a namespace `<lab>-<node>`, a
router or a site. Its End SID (`routing.srv6.SidPlan`) is a /128 address on its loopback, so
the kernel's own SRv6 endpoint processing acts on a packet sent to it: End while segments are
left, the decapsulation of the inner packet at the last one. Every link of the map is a veth
pair named alike at both ends (`interface_name`), with link-local addresses fe80::1 at its end
`a` and fe80::2 at its end `b`; each end routes its neighbour's locator (the SID's /64) to
that neighbour, and nothing else: a strict segment list names one neighbour after another.
Every access node has a users' host, namespace `<lab>-<access>@users`, behind its interface
`users`.

A site's jobs have addresses in its job prefix (`fd00:` and the 48 bits of its SID after
`fc00:`, a /64), all delivered in the site's namespace; a request's address there is that
prefix and 64 bits of the SHA-256 of the request id (`job_address`). Traffic to that address
is what a decision's reservation steers.

A part of a map is a set of its provinces: their nodes, sites, links and access nodes' users,
and the whole backbone (every gateway and backbone node and link), so that every backbone
path between the part's provinces is there.
"""

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from functools import cached_property
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from cnbrain.domain.bounds import Text
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.enums import LinkLayer, NodeRole
from cnbrain.domain.errors import Invalid
from cnbrain.domain.model import DomainModel
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.routing.srv6 import SidPlan

LAB_NAME = re.compile(r"[a-z][a-z0-9]{0,7}")
"""A lab's name: the prefix of its namespaces, so no lab's names are another's."""

NODE_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""A node or site id the netlab takes: a part of a namespace's name."""

PROVINCE_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")

MAX_HOSTS = 2000
"""Namespaces one lab holds at most."""

ROUTER_MTU = 9000
"""MTU of the links between routers: room for the encapsulation of a full users' packet."""

USERS_MTU = 1500
USERS_INTERFACE = "users"
"""The access router's interface to its users' host."""

UPLINK_INTERFACE = "uplink"
"""The users' host's interface to its access router."""

END_A = "fe80::1"
END_B = "fe80::2"

JOB_BLOCK = 0xFD00
USERS_BLOCK = 0xFD01
SID_BLOCK = 0xFC00

MAX_RATE_BYTES_S = 2**40
"""The highest rate a policer takes (bytes/s); a reservation above it is not policed."""


class PlanError(Invalid):
    """A lab or a steering that cannot be planned; the message says why."""


def _ipv6(value: str) -> str:
    if ipaddress.IPv6Address(value).scope_id is not None:
        raise ValueError(f"{value!r}: an address without a scope")
    return value


def _ipv6_network(value: str) -> str:
    if "%" in value:
        raise ValueError(f"{value!r}: a prefix without a scope")
    ipaddress.IPv6Network(value)
    return value


# The kinds of a plan's fields: every name and address of a plan reaches netlink and the
# `nft` scripts run as root, so a plan read from a manifest is held to them.
_LAB, _NODE = LAB_NAME.pattern, NODE_ID.pattern
LabName = Annotated[str, StringConstraints(pattern=rf"^{_LAB}$")]
NodeId = Annotated[str, StringConstraints(pattern=rf"^{_NODE}$")]
LinkId = Annotated[str, StringConstraints(pattern=rf"^{_NODE}--{_NODE}$")]
Namespace = Annotated[str, StringConstraints(pattern=rf"^{_LAB}-{_NODE}(@users)?$")]
InterfaceName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9]{0,14}$")]
ProvinceCode = Annotated[str, StringConstraints(pattern=rf"^{PROVINCE_CODE.pattern}$")]
IPv6 = Annotated[str, StringConstraints(max_length=45), AfterValidator(_ipv6)]
IPv6Prefix = Annotated[str, StringConstraints(max_length=49), AfterValidator(_ipv6_network)]


class HostKind(StrEnum):
    ROUTER = "router"
    SITE = "site"
    USERS = "users"


class Host(DomainModel):
    """One namespace: a router or a site of the map (`node`), or the users' host of access
    node `node`. `sid`: its End SID, an address on its loopback (none for users);
    `address`: the users' host's own address; `job_prefix`: a site's."""

    node: NodeId
    kind: HostKind
    namespace: Namespace
    sid: IPv6 | None = None
    address: IPv6 | None = None
    job_prefix: IPv6Prefix | None = None


class Wire(DomainModel):
    """A veth pair: end `a` in namespace `a_namespace` named `a_interface` with address
    fe80::1, end `b` likewise with fe80::2. `link`: the map link's id (None: a users' wire)."""

    link: LinkId | None
    a_namespace: Namespace
    a_interface: InterfaceName
    b_namespace: Namespace
    b_interface: InterfaceName
    mtu: int = Field(ge=1280, le=65535)


class StaticRoute(DomainModel):
    """In `namespace`: `prefix` via link-local `via` on interface `interface`."""

    namespace: Namespace
    prefix: IPv6Prefix
    via: IPv6
    interface: InterfaceName


class LabPlan(DomainModel):
    """A lab: its name, the map it emulates (`map_name`, `provinces` of the part: empty for
    the whole map), its namespaces, wires and static routes."""

    name: LabName
    map_name: Text
    provinces: tuple[ProvinceCode, ...] = ()
    hosts: tuple[Host, ...] = Field(max_length=MAX_HOSTS)
    wires: tuple[Wire, ...]
    routes: tuple[StaticRoute, ...]

    @cached_property
    def host_of(self) -> Mapping[str, Host]:
        """The router or site host of every node of the lab, by node id."""
        return {h.node: h for h in self.hosts if h.kind is not HostKind.USERS}

    @cached_property
    def users_of(self) -> Mapping[str, Host]:
        """The users' host of every access node of the lab, by access node id."""
        return {h.node: h for h in self.hosts if h.kind is HostKind.USERS}

    @cached_property
    def wire_of(self) -> Mapping[str, Wire]:
        """The wire of every map link of the lab, by link id."""
        return {w.link: w for w in self.wires if w.link is not None}

    def wire(self, a: str, b: str) -> Wire:
        """The wire of the map link between nodes `a` and `b` (either way); PlanError when
        the lab has none."""
        found = self.wire_of.get(f"{a}--{b}") or self.wire_of.get(f"{b}--{a}")
        if found is None:
            raise PlanError(f"netlab {self.name!r} has no link between {a!r} and {b!r}")
        return found


class Headend(DomainModel):
    """What an owner installs at the first node of one of its segments of a decision: the
    traffic to `job` that reaches `namespace` leaves it by `interface`, encapsulated (outer
    source `source`) with the strict segment list `sids`, and is policed to `rate_bytes_s`
    (0: not policed). It is reservation `reservation_id`'s, of request `request_id`."""

    reservation_id: str
    request_id: str
    owner: str
    segment: int = Field(description="The segment's position on the path.")
    node: str
    namespace: str
    job: str
    source: str
    sids: tuple[str, ...]
    interface: str
    rate_bytes_s: int


def check_lab_name(name: str) -> str:
    """`name` when it is a lab's name (a lowercase letter, then up to 7 lowercase letters or
    digits); PlanError otherwise."""
    if not LAB_NAME.fullmatch(name):
        raise PlanError(
            f"lab name {name!r}: a lowercase letter, then up to 7 lowercase letters or digits"
        )
    return name


def interface_name(link_id: str) -> str:
    """The name of a map link's interface at both its ends: 13 characters, within Linux's 15."""
    return "v" + hashlib.sha256(link_id.encode()).hexdigest()[:12]


def namespace_of(lab: str, node: str) -> str:
    """The namespace of a node or site of lab `lab`."""
    return f"{lab}-{node}"


def users_namespace(lab: str, access_node: str) -> str:
    """The namespace of the users' host of an access node of lab `lab`."""
    return f"{lab}-{access_node}@users"


def job_prefix(site_sid: str) -> str:
    """A site's job prefix (/64), from its End SID."""
    return _rebased(site_sid, JOB_BLOCK) + "/64"


def job_address(site_sid: str, request_id: str) -> str:
    """The address of request `request_id`'s job at the site whose End SID is `site_sid`."""
    suffix = int.from_bytes(hashlib.sha256(request_id.encode()).digest()[:8], "big")
    base = int(ipaddress.IPv6Address(_rebased(site_sid, JOB_BLOCK)))
    return str(ipaddress.IPv6Address(base | suffix))


def users_address(access_sid: str) -> str:
    """The address of the users' host of the access node whose End SID is `access_sid`."""
    base = int(ipaddress.IPv6Address(_rebased(access_sid, USERS_BLOCK)))
    return str(ipaddress.IPv6Address(base | 1))


def _rebased(sid: str, block: int) -> str:
    """`sid`'s 48 bits after its first 16, under `block` instead, with its last 64 bits 0."""
    value = int(ipaddress.IPv6Address(sid))
    if value >> 112 != SID_BLOCK:
        raise PlanError(f"SID {sid!r} is not in fc00::/16")
    middle = (value >> 64) & ((1 << 48) - 1)
    return str(ipaddress.IPv6Address((block << 112) | (middle << 64)))


def parse_part(text: str) -> tuple[str, ...]:
    """The provinces of a part written `provinces=AA,BB` (an empty text: the whole map, no
    provinces); PlanError otherwise."""
    if not text:
        return ()
    key, equals, value = text.partition("=")
    codes = tuple(c.strip() for c in value.split(",") if c.strip())
    if key.strip() != "provinces" or not equals or not codes:
        raise PlanError(f"part {text!r}: write provinces=CODE,CODE,...")
    return codes


def plan_lab(cmap: ComputeNetworkMap, *, name: str, provinces: Sequence[str] = ()) -> LabPlan:
    """The lab `name` of map `cmap`, or of its part `provinces` (empty: the whole map).
    PlanError for a bad name, an unknown province, an id that cannot name a namespace, two
    interfaces of one namespace with one name, or more than MAX_HOSTS namespaces."""
    check_lab_name(name)
    unknown = sorted(set(provinces) - set(cmap.provinces))
    if unknown:
        raise PlanError(f"part: no province {unknown[0]!r} on map {cmap.name!r}")
    chosen = set(provinces) or set(cmap.provinces)
    sids = SidPlan(cmap)
    backbone_roles = (NodeRole.GATEWAY, NodeRole.BACKBONE)
    nodes = [n.id for n in cmap.nodes.values() if n.province in chosen or n.role in backbone_roles]
    sites = [s.id for s in cmap.sites if s.province in chosen]
    access = [a for code in sorted(chosen) for a in cmap.provinces[code].access_nodes]
    if len(nodes) + len(sites) + len(access) > MAX_HOSTS:
        raise PlanError(
            f"{len(nodes) + len(sites) + len(access)} namespaces: a lab holds at most "
            f"{MAX_HOSTS}; choose a part (provinces=...)"
        )
    for node in [*nodes, *sites]:
        if not NODE_ID.fullmatch(node):
            raise PlanError(f"node {node!r}: only letters, digits, '_', '.' and '-' name a host")
    for code in provinces:
        if not PROVINCE_CODE.fullmatch(code):
            raise PlanError(f"province {code!r}: only letters, digits, '_', '.' and '-' name one")
    hosts = [
        Host(node=n, kind=HostKind.ROUTER, namespace=namespace_of(name, n), sid=sids.sid(n))
        for n in nodes
    ]
    hosts += [
        Host(
            node=s,
            kind=HostKind.SITE,
            namespace=namespace_of(name, s),
            sid=sids.sid(s),
            job_prefix=job_prefix(sids.sid(s)),
        )
        for s in sites
    ]
    hosts += [
        Host(
            node=a,
            kind=HostKind.USERS,
            namespace=users_namespace(name, a),
            address=users_address(sids.sid(a)),
        )
        for a in access
    ]
    present = set(nodes) | set(sites)
    links = [
        link
        for link in cmap.links
        if link.a in present
        and link.b in present
        and (link.layer is LinkLayer.BACKBONE or cmap.node_province[link.a] in chosen)
    ]
    wires = [
        Wire(
            link=link.id,
            a_namespace=namespace_of(name, link.a),
            a_interface=interface_name(link.id),
            b_namespace=namespace_of(name, link.b),
            b_interface=interface_name(link.id),
            mtu=ROUTER_MTU,
        )
        for link in links
    ]
    wires += [
        Wire(
            link=None,
            a_namespace=namespace_of(name, a),
            a_interface=USERS_INTERFACE,
            b_namespace=users_namespace(name, a),
            b_interface=UPLINK_INTERFACE,
            mtu=USERS_MTU,
        )
        for a in access
    ]
    _check_interfaces(wires)
    routes = [
        route
        for link in links
        for route in (
            StaticRoute(
                namespace=namespace_of(name, link.a),
                prefix=f"{sids.sid(link.b)}/64",
                via=END_B,
                interface=interface_name(link.id),
            ),
            StaticRoute(
                namespace=namespace_of(name, link.b),
                prefix=f"{sids.sid(link.a)}/64",
                via=END_A,
                interface=interface_name(link.id),
            ),
        )
    ]
    routes += [
        StaticRoute(
            namespace=users_namespace(name, a), prefix="::/0", via=END_A, interface=UPLINK_INTERFACE
        )
        for a in access
    ]
    return LabPlan(
        name=name,
        map_name=cmap.name,
        provinces=tuple(sorted(provinces)),
        hosts=tuple(hosts),
        wires=tuple(wires),
        routes=tuple(routes),
    )


def _check_interfaces(wires: Iterable[Wire]) -> None:
    seen: set[tuple[str, str]] = set()
    for wire in wires:
        for end in ((wire.a_namespace, wire.a_interface), (wire.b_namespace, wire.b_interface)):
            if end in seen:
                raise PlanError(f"two interfaces named {end[1]!r} in namespace {end[0]!r}")
            seen.add(end)


def rate_bytes_s(bandwidth_gbps: float) -> int:
    """The policer's rate of a reservation of `bandwidth_gbps`: bytes per second, at least 1;
    0 (not policed) for none, or for more than MAX_RATE_BYTES_S."""
    rate = round(bandwidth_gbps * 1e9 / 8)
    if bandwidth_gbps <= 0 or rate > MAX_RATE_BYTES_S:
        return 0
    return max(rate, 1)


def headends(lab: LabPlan, decision: Decision, *, owner: str | None) -> tuple[Headend, ...]:
    """What `owner` installs to steer `decision` in `lab`: a headend for each of its
    segments (None: of every segment), in path order (none when it owns none). Each
    segment's segment list is the decision's SIDs of its hops; its last SID is the segment's
    last node, where the kernel decapsulates, and the next segment's headend takes the job's
    traffic on. PlanError when
    the decision is not a placed one with a path and a reservation, when its segment list
    does not name one SID per hop, or names a SID the lab gives another node, or when a node
    or link of one of `owner`'s segments is not in the lab."""
    path = decision.path
    if (
        decision.status is not DecisionStatus.PLACED
        or path is None
        or decision.site is None
        or decision.reservation_id is None
    ):
        raise PlanError(f"request {decision.request_id!r}: no placed path with a reservation")
    hops = sum(len(segment.hops) for segment in path.segments)
    if len(path.srv6_segment_list) != hops:
        raise PlanError(
            f"reservation {decision.reservation_id!r}: {len(path.srv6_segment_list)} SIDs for "
            f"{hops} hops"
        )
    site = lab.host_of.get(decision.site)
    if site is None or site.sid is None:
        raise PlanError(f"netlab {lab.name!r} has no site {decision.site!r}")
    job = job_address(site.sid, decision.request_id)
    rate = rate_bytes_s(path.bandwidth_gbps)
    planned: list[Headend] = []
    offset = 0
    for position, segment in enumerate(path.segments):
        sids = path.srv6_segment_list[offset : offset + len(segment.hops)]
        offset += len(segment.hops)
        if (owner is not None and segment.owner != owner) or not segment.hops:
            continue
        for hop, sid in zip(segment.hops, sids, strict=True):
            lab.wire(hop.from_node, hop.to_node)
            host = lab.host_of.get(hop.to_node)
            if host is None:
                raise PlanError(f"netlab {lab.name!r} has no node {hop.to_node!r}")
            if host.sid != sid:
                raise PlanError(
                    f"reservation {decision.reservation_id!r}: SID {sid} of hop to "
                    f"{hop.to_node!r} is {host.sid} in netlab {lab.name!r}"
                )
        first = segment.hops[0]
        head = lab.host_of.get(first.from_node)
        if head is None or head.sid is None:
            raise PlanError(f"netlab {lab.name!r} has no node {first.from_node!r}")
        planned.append(
            Headend(
                reservation_id=decision.reservation_id,
                request_id=decision.request_id,
                owner=segment.owner,
                segment=position,
                node=head.node,
                namespace=head.namespace,
                job=job,
                source=head.sid,
                sids=tuple(sids),
                interface=lab.wire(first.from_node, first.to_node).a_interface,
                rate_bytes_s=rate,
            )
        )
    return tuple(planned)
