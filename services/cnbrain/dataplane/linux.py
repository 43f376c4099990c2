"""The netlab on Linux: namespaces, veth pairs, addresses and routes over netlink
(pyroute2), sysctls through `ip netns exec`, policers with nftables (`nft`), and the
headends' eBPF programs (`bpf`). Needs root.

`build` makes a lab from its plan (all of it, or, when a step fails or it is interrupted,
none: what it made is removed); `destroy` removes every namespace of a lab; `set_link` takes a
link down or up; `Headends` installs and removes headends; `hop_counts` reads the hop
counters.

In every router's namespace, table `ip6 cnbrain` holds the policers: a limit object per
reservation (`r` and 16 hex digits of the SHA-256 of its id) and the map `rates` from job
address to limit, applied on the forward hook (a packet over its limit is dropped).
"""

import hashlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from cnbrain.dataplane import bpf, encaps
from cnbrain.dataplane.plan import (
    END_A,
    END_B,
    USERS_INTERFACE,
    Headend,
    Host,
    HostKind,
    LabPlan,
    Wire,
    check_lab_name,
)
from cnbrain.domain.errors import Unavailable

TABLE = "cnbrain"
RATES = "rates"
BURST_S = 0.1
"""A policer's burst: this long at its rate, and at least MIN_BURST_BYTES."""

MIN_BURST_BYTES = 64 * 1024
_NFT_TIMEOUT_S = 10
NETLINK_ROUTE = 0
_LOCAL_TABLE = 255
_MAIN_TABLE = 254

SYSCTLS = (
    "net.ipv6.conf.all.forwarding=1",
    "net.ipv6.conf.all.seg6_enabled=1",
    "net.ipv6.conf.default.seg6_enabled=1",
    "net.ipv6.conf.all.accept_dad=0",
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv6.conf.all.keep_addr_on_down=1",
    "net.ipv6.conf.default.keep_addr_on_down=1",
    "net.ipv6.conf.default.router_solicitations=0",
    "net.ipv6.conf.default.accept_ra=0",
)
"""Every namespace's: routing on, SRv6 endpoint processing on every interface, no duplicate
address detection (addresses usable at once), addresses kept while a link is down."""

POLICERS = f"""table ip6 {TABLE} {{
  map {RATES} {{ type ipv6_addr : limit ; }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    limit name ip6 daddr map @{RATES} drop
  }}
}}
"""
"""Every router's policers (see the module docstring)."""

HOPS_TABLE = "cnbrain_hops"
JOBS = "fd00::/16"
"""Where every site's job prefix lies (`plan.JOB_BLOCK`)."""

_JOB_BLOCK = ipaddress.IPv6Network(JOBS)


def hops_ruleset(host: Host, wires: Iterable[Wire]) -> str:
    """The hop counters of a router or site: on each of its links, the packets that arrive
    for its SID (each rule's comment is the link's id), and on an access router the packets
    its users send to jobs."""
    rules = []
    for wire in wires:
        for namespace, interface in (
            (wire.a_namespace, wire.a_interface),
            (wire.b_namespace, wire.b_interface),
        ):
            if namespace != host.namespace:
                continue
            if wire.link is None:
                rules.append(
                    f'iifname "{interface}" ip6 daddr {JOBS} counter comment "{USERS_INTERFACE}"'
                )
            else:
                rules.append(
                    f'iifname "{interface}" ip6 daddr {host.sid} counter comment "{wire.link}"'
                )
    body = "".join(f"    {rule}\n" for rule in rules)
    return (
        f"table ip6 {HOPS_TABLE} {{\n  chain arrivals {{\n"
        "    type filter hook prerouting priority raw; policy accept;\n"
        f"{body}  }}\n}}\n"
    )


class LabError(Unavailable):
    """A step on the lab failed; the message names it and says why."""


def build(plan: LabPlan) -> None:
    """Make every namespace, wire, address and route of `plan`, and the policers' table in
    every router. LabError when a namespace of the lab exists already or a step fails; then,
    as when the build is interrupted (KeyboardInterrupt raised again), every namespace of the
    lab is removed. Built from the main thread, SIGINT and SIGTERM interrupt it only between
    two steps (`_HeldSignals`), so no step is left half made."""
    existing = lab_namespaces(plan.name)
    if existing:
        raise LabError(
            f"netlab {plan.name!r} is up already ({len(existing)} namespaces): run netlab down"
        )
    with _HeldSignals() as held:
        try:
            _build(plan, held.check)
            held.check()
        except BaseException as error:
            destroy(plan.name)
            if isinstance(error, LabError) or not isinstance(error, Exception):
                raise
            raise LabError(f"building netlab {plan.name!r}: {error}") from error


class _HeldSignals:
    """While it is entered from the main thread, SIGINT and SIGTERM are held: `check`
    raises KeyboardInterrupt once one has come. Elsewhere it holds nothing (and Python
    delivers SIGINT to the main thread only)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._caught: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_HeldSignals":
        if threading.current_thread() is threading.main_thread():
            for held in self.SIGNALS:
                self._previous[held] = signal.signal(held, self._hold)
        return self

    def __exit__(self, *_: object) -> None:
        for held, previous in self._previous.items():
            signal.signal(held, previous)

    def _hold(self, signum: int, _frame: object) -> None:
        self._caught = signum

    def check(self) -> None:
        if self._caught is not None:
            raise KeyboardInterrupt(f"signal {signal.Signals(self._caught).name}")


def _build(plan: LabPlan, check: Callable[[], None]) -> None:
    """Build `plan`, calling `check` between every two steps."""
    for host in plan.hosts:
        check()
        netns.create(host.namespace)
        _run(["ip", "netns", "exec", host.namespace, "sysctl", "-qw", *SYSCTLS])
    with _Sockets() as sockets:
        for wire in plan.wires:
            check()
            _add_wire(sockets, wire)
        for host in plan.hosts:
            check()
            ip = sockets.of(host.namespace)
            lo = _index(ip, "lo")
            ip.link("set", index=lo, state="up")
            if host.sid is not None:
                ip.addr("add", index=lo, address=host.sid, prefixlen=128)
            if host.address is not None:
                ip.addr("add", index=lo, address=host.address, prefixlen=128)
            if host.job_prefix is not None:
                prefix, length = host.job_prefix.split("/")
                ip.route(
                    "add",
                    dst=prefix,
                    dst_len=int(length),
                    type="local",
                    table=_LOCAL_TABLE,
                    oif=lo,
                )
        for route in plan.routes:
            check()
            _static_route(sockets.of(route.namespace), route.prefix, route.via, route.interface)
    for host in plan.hosts:
        if host.kind is HostKind.USERS:
            continue
        check()
        policers = POLICERS if host.kind is HostKind.ROUTER else ""
        _nft(host.namespace, policers + hops_ruleset(host, plan.wires))


def _add_wire(sockets: "_Sockets", wire: Wire) -> None:
    a = sockets.of(wire.a_namespace)
    a.link(
        "add",
        ifname=wire.a_interface,
        kind="veth",
        peer={"ifname": wire.b_interface, "net_ns_fd": wire.b_namespace},
    )
    for namespace, interface, address in (
        (wire.a_namespace, wire.a_interface, END_A),
        (wire.b_namespace, wire.b_interface, END_B),
    ):
        ip = sockets.of(namespace)
        index = _index(ip, interface)
        ip.link("set", index=index, mtu=wire.mtu, state="up")
        ip.addr("add", index=index, address=address, prefixlen=64)


def _static_route(ip: Any, prefix: str, via: str, interface: str) -> None:
    dst, length = prefix.split("/")
    ip.route(
        "replace",
        dst=dst,
        dst_len=int(length),
        gateway=via,
        oif=_index(ip, interface),
        family=socket.AF_INET6,
    )


def destroy(name: str) -> list[str]:
    """Remove every namespace of lab `name` (its links go with them); their names."""
    check_lab_name(name)
    removed = []
    for namespace in lab_namespaces(name):
        try:
            netns.remove(namespace)
        except OSError as error:
            raise LabError(f"removing namespace {namespace!r}: {error}") from error
        removed.append(namespace)
    return removed


def lab_namespaces(name: str) -> list[str]:
    """The namespaces of lab `name` there are now."""
    return sorted(ns for ns in netns.listnetns() if ns.startswith(f"{name}-"))


def set_link(plan: LabPlan, a: str, b: str, *, up: bool) -> None:
    """Take the link between nodes `a` and `b` down (both ends) or up again (with its ends'
    link-local addresses and its routes, which the kernel dropped while it was down: it keeps
    only global addresses). Headends' routes over it are not restored here: their steering
    installs them again. PlanError when the lab has no such link; LabError when a step
    fails."""
    wire = plan.wire(a, b)
    state = "up" if up else "down"
    try:
        with _Sockets() as sockets:
            for namespace, interface, address in (
                (wire.a_namespace, wire.a_interface, END_A),
                (wire.b_namespace, wire.b_interface, END_B),
            ):
                ip = sockets.of(namespace)
                index = _index(ip, interface)
                ip.link("set", index=index, state=state)
                if up:
                    ip.addr("replace", index=index, address=address, prefixlen=64)
            if up:
                for route in plan.routes:
                    if (route.namespace, route.interface) in (
                        (wire.a_namespace, wire.a_interface),
                        (wire.b_namespace, wire.b_interface),
                    ):
                        _static_route(
                            sockets.of(route.namespace), route.prefix, route.via, route.interface
                        )
    except (NetlinkError, OSError) as error:
        raise LabError(f"setting link {wire.link} {state}: {error}") from error


def links_down(plan: LabPlan, link_ids: Iterable[str]) -> set[str]:
    """Those of `link_ids` (links of the lab) with an end that is not up."""
    wanted = [plan.wire_of[link] for link in link_ids if link in plan.wire_of]
    down: set[str] = set()
    with _Sockets() as sockets:
        for wire in wanted:
            for namespace, interface in (
                (wire.a_namespace, wire.a_interface),
                (wire.b_namespace, wire.b_interface),
            ):
                try:
                    ip = sockets.of(namespace)
                    [link] = ip.link("get", index=_index(ip, interface))
                except (LabError, NetlinkError, OSError):
                    down.add(str(wire.link))
                    continue
                if not link["flags"] & 1:  # IFF_UP
                    down.add(str(wire.link))
    return down


def hop_counts(plan: LabPlan) -> dict[tuple[str, str], int]:
    """Packets every router and site received for its SID on each of its links, by (node,
    link id); and, by (access node, "users"), the packets each access router took from its
    users. A path's hops are the (to node, link) of its traffic."""
    counts: dict[tuple[str, str], int] = {}
    for host in plan.hosts:
        if host.kind is HostKind.USERS:
            continue
        listed = _run(
            ["ip", "netns", "exec", host.namespace, "nft", "-j", "list", "table", "ip6", HOPS_TABLE]
        )
        for item in json.loads(listed).get("nftables", []):
            rule = item.get("rule")
            if rule is None or "comment" not in rule:
                continue
            packets = next((e["counter"]["packets"] for e in rule["expr"] if "counter" in e), 0)
            counts[(host.node, str(rule["comment"]))] = int(packets)
    return counts


@dataclass(frozen=True, slots=True)
class Policers:
    """A router's policers: the limit object of each job address, and the objects."""

    of_job: Mapping[str, str]
    objects: frozenset[str]


def policer_name(reservation_id: str) -> str:
    """The name of a reservation's limit object."""
    return "r" + hashlib.sha256(reservation_id.encode()).hexdigest()[:16]


class Headends:
    """Installs and removes headends, each in its namespace; one at a time (a lock). The
    netlink socket of a namespace is kept open while the namespace is the one it was opened
    in: one removed, or made again under its name (a lab brought down and up again), is let
    go of at its next use; `close` lets go of them all."""

    def __init__(self) -> None:
        self._sockets = _Sockets()
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._sockets.close()

    def install(self, headend: Headend) -> None:
        """Police `headend.job` to its rate in its namespace (or not at all for rate 0) and
        route it through the headend's encapsulation, replacing what any reservation
        installed for the same job there (the swap of a path). Idempotent. LabError when a
        step fails (what it did stays: `remove` undoes it)."""
        with self._lock:
            try:
                self._police(headend)
                self._route(headend)
            except (NetlinkError, OSError, bpf.BpfError, ValueError) as error:
                raise LabError(f"headend at {headend.node}: {error}") from error

    def remove(self, headend: Headend) -> None:
        """Remove what `headend`'s reservation installed at its namespace: its route to the
        job when that is still its own (not a newer reservation's that replaced it), and its
        policer. Nothing installed: nothing done. LabError when a step fails."""
        with self._lock:
            try:
                ip = self._sockets.of(headend.namespace)
                route = _job_route(ip, headend.job)
                if route is not None and _program_name(route) == headend.reservation_id:
                    ip.route("del", dst=headend.job, dst_len=128, family=socket.AF_INET6)
                self._unpolice(headend)
            except (NetlinkError, OSError) as error:
                raise LabError(f"headend at {headend.node}: {error}") from error

    def installed(self, namespace: str, job: str) -> str | None:
        """The reservation whose route to `job` is installed in `namespace`, or None."""
        with self._lock:
            route = _job_route(self._sockets.of(namespace), job)
            return None if route is None else _program_name(route)

    def routed(self, namespace: str) -> dict[str, str | None]:
        """Every job address with a route in `namespace`, and the reservation whose route it
        is (None: a route no reservation installed). LabError when it cannot be read."""
        with self._lock:
            try:
                routes = self._sockets.of(namespace).route(
                    "dump", family=socket.AF_INET6, table=_MAIN_TABLE
                )
                return {
                    str(route.get("RTA_DST")): _program_name(route)
                    for route in routes
                    if route["dst_len"] == 128 and _is_job(route.get("RTA_DST"))
                }
            except (NetlinkError, OSError) as error:
                raise LabError(f"routes of namespace {namespace!r}: {error}") from error

    def _route(self, headend: Headend) -> None:
        header = encaps.encapsulation(headend.source, headend.sids)
        fd = bpf.load_program(encaps.headend_program(header))
        try:
            ip = self._sockets.of(headend.namespace)
            ip.route(
                "replace",
                dst=headend.job,
                dst_len=128,
                oif=_index(ip, headend.interface),
                family=socket.AF_INET6,
                encap={
                    "type": "bpf",
                    "xmit": {
                        "fd": fd,
                        "name": headend.reservation_id,
                        "headroom": len(header),
                    },
                },
            )
        finally:
            os.close(fd)

    def _police(self, headend: Headend) -> None:
        current = policers(headend.namespace)
        name = policer_name(headend.reservation_id)
        lines: list[str] = []
        held = current.of_job.get(headend.job)
        if headend.rate_bytes_s > 0:
            if name not in current.objects:
                burst = max(int(headend.rate_bytes_s * BURST_S), MIN_BURST_BYTES)
                lines.append(
                    f"add limit ip6 {TABLE} {name} {{ rate over {headend.rate_bytes_s} "
                    f"bytes/second burst {burst} bytes ; }}"
                )
            if held is not None and held != name:
                lines.append(f"delete element ip6 {TABLE} {RATES} {{ {headend.job} }}")
            if held != name:
                lines.append(f'add element ip6 {TABLE} {RATES} {{ {headend.job} : "{name}" }}')
        elif held is not None:
            lines.append(f"delete element ip6 {TABLE} {RATES} {{ {headend.job} }}")
        if lines:
            _nft(headend.namespace, "\n".join(lines) + "\n")

    def _unpolice(self, headend: Headend) -> None:
        current = policers(headend.namespace)
        name = policer_name(headend.reservation_id)
        lines = []
        if current.of_job.get(headend.job) == name:
            lines.append(f"delete element ip6 {TABLE} {RATES} {{ {headend.job} }}")
        if name in current.objects:
            lines.append(f"delete limit ip6 {TABLE} {name}")
        if lines:
            _nft(headend.namespace, "\n".join(lines) + "\n")


def _job_route(ip: Any, job: str) -> Any | None:
    for route in ip.route("dump", family=socket.AF_INET6, table=_MAIN_TABLE):
        if route["dst_len"] == 128 and route.get("RTA_DST") == job:
            return route
    return None


def _is_job(address: str | None) -> bool:
    return address is not None and ipaddress.IPv6Address(address) in _JOB_BLOCK


def _program_name(route: Any) -> str | None:
    encap = route.get("RTA_ENCAP")
    if encap is None:
        return None
    xmit = encap.get("LWT_BPF_XMIT")
    if xmit is None:
        return None
    name: str | None = xmit.get("LWT_BPF_PROG_NAME")
    return name


def policers(namespace: str) -> Policers:
    """The policers of a router's namespace."""
    listed = _run(["ip", "netns", "exec", namespace, "nft", "-j", "list", "table", "ip6", TABLE])
    of_job: dict[str, str] = {}
    objects: set[str] = set()
    for item in json.loads(listed).get("nftables", []):
        if "limit" in item:
            objects.add(item["limit"]["name"])
        elif "map" in item and item["map"].get("name") == RATES:
            for job, name in item["map"].get("elem", []):
                of_job[str(job)] = str(name)
    return Policers(of_job=of_job, objects=frozenset(objects))


def _nft(namespace: str, script: str) -> None:
    _run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], stdin=script)


def _run(command: list[str], *, stdin: str | None = None) -> str:
    """Run `command`; its output. LabError with its error output when it fails."""
    try:
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=_NFT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LabError(f"{' '.join(command[:5])}: {error}") from error
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[:500]
        raise LabError(f"{' '.join(command[:5])}: {said or f'exit {done.returncode}'}")
    return done.stdout


def _index(ip: Any, interface: str) -> int:
    found = ip.link_lookup(ifname=interface)
    if not found:
        raise LabError(f"no interface {interface!r}")
    return int(found[0])


class _Sockets:
    """A netlink socket per namespace, opened on first use, all closed by `close`. Each is
    kept with the identity (device and inode) of the namespace it was opened in, checked at
    every use: a namespace gone, or made again under its name, has its socket closed (so the
    namespace it held is freed), and a new one opened in the namespace there now."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[Any, tuple[int, int]]] = {}

    def of(self, namespace: str) -> Any:
        try:
            found = Path(netns.NETNS_RUN_DIR, namespace).stat()
        except OSError as error:
            self._drop(namespace)
            raise LabError(f"namespace {namespace!r}: {error}") from error
        held = self._open.get(namespace)
        if held is not None and held[1] == (found.st_dev, found.st_ino):
            return held[0]
        self._drop(namespace)
        try:
            sock, identity = _netlink_in(namespace)
            ip = IPRoute(use_socket=sock)
        except (NetlinkError, OSError) as error:
            raise LabError(f"namespace {namespace!r}: {error}") from error
        self._open[namespace] = (ip, identity)
        return ip

    def _drop(self, namespace: str) -> None:
        held = self._open.pop(namespace, None)
        if held is not None:
            held[0].close()

    def close(self) -> None:
        for namespace in list(self._open):
            self._drop(namespace)

    def __enter__(self) -> "_Sockets":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def require_lab_tools() -> None:
    """LabError naming what is missing when this machine cannot run a netlab: root, ip, nft,
    network namespaces, the kernel's SRv6 endpoint processing, or eBPF programs for routes."""
    if os.geteuid() != 0:
        raise LabError("the netlab needs root")
    _run(["ip", "-V"])
    _run(["nft", "--version"])
    name = "cnlcheck"
    destroy(name)
    try:
        netns.create(f"{name}-probe")
        _run(["ip", "netns", "exec", f"{name}-probe", "sysctl", "-qw", *SYSCTLS])
        fd = bpf.load_program(encaps.headend_program(encaps.encapsulation("fc00::1", ["fc00::2"])))
        os.close(fd)
    except (OSError, bpf.BpfError) as error:
        raise LabError(f"this kernel cannot run the netlab: {error}") from error
    finally:
        destroy(name)


def _netlink_in(namespace: str) -> tuple[socket.socket, tuple[int, int]]:
    """A route netlink socket of `namespace`, made by this thread while it is in the
    namespace (setns(2)), then back in its own: no process is forked, so a brain's threads
    are left alone. Its IPRoute uses this one socket from whichever thread calls it. With
    it, the namespace's identity (device and inode)."""
    target = os.open(f"{netns.NETNS_RUN_DIR}/{namespace}", os.O_RDONLY)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        found = os.fstat(target)
        netns.setns(target, flags=0)
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_ROUTE)
        finally:
            netns.setns(own, flags=0)
    finally:
        os.close(target)
        os.close(own)
    return sock, (found.st_dev, found.st_ino)
