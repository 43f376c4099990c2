"""UDP traffic between the netlab's namespaces: a receiver at a job's address in its site's
namespace and a sender in a users' host, each `tests.dataplane.udp_peer` run with `ip netns
exec`; and a decision's traffic with the hop counters it moved (`traffic`)."""

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnbrain.dataplane import linux
from cnbrain.dataplane.plan import LabPlan, job_address
from cnbrain.domain.decision import Decision
from tests.dataplane.paths import grown

ROOT = Path(__file__).resolve().parents[2]
PORT = 9000


@dataclass(frozen=True, slots=True)
class Received:
    packets: int
    bytes: int
    steady_bytes: int
    """Bytes that arrived `steady_s` or more after the first datagram."""
    span_s: float
    """From the first datagram to the last."""


def _peer(namespace: str, *args: object) -> list[str]:
    return [
        "ip",
        "netns",
        "exec",
        namespace,
        sys.executable,
        "-m",
        "tests.dataplane.udp_peer",
        *(str(a) for a in args),
    ]


class Receiver:
    """Counts the datagrams that reach `address` in `namespace` (see `udp_peer.receive`)."""

    def __init__(
        self, namespace: str, address: str, *, steady_s: float = 0.0, wait_s: float = 5.0
    ) -> None:
        self._process = subprocess.Popen(
            _peer(namespace, "receive", address, PORT, steady_s, wait_s),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            _, err = self._process.communicate(timeout=10)
            raise RuntimeError(f"the receiver in {namespace} did not start: {err}")

    def result(self) -> Received:
        out, err = self._process.communicate(timeout=120)
        if self._process.returncode != 0:
            raise RuntimeError(f"the receiver failed: {err}")
        return Received(**json.loads(out))


def send(namespace: str, address: str, *, count: int, size: int = 200) -> int:
    """Send `count` datagrams of `size` bytes to `address` from `namespace`, 0.5 ms apart;
    how many the socket took."""
    return _sender(namespace, address, count=count, size=size, seconds=0.0)


def blast(namespace: str, address: str, *, seconds: float, size: int = 1200) -> int:
    """Send datagrams of `size` bytes as fast as one process can for `seconds`; the bytes
    offered."""
    return size * _sender(namespace, address, count=0, size=size, seconds=seconds)


def _sender(namespace: str, address: str, *, count: int, size: int, seconds: float) -> int:
    done = subprocess.run(
        _peer(namespace, "send", address, PORT, count, size, seconds),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    return int(done.stdout.strip())


def settle() -> None:
    """Let the packets in flight land before counters are read."""
    time.sleep(0.3)


def job_of(lab: LabPlan, decision: Decision) -> str:
    """The address of the decision's job on its site in `lab`."""
    site = lab.host_of[str(decision.site)]
    assert site.sid is not None
    return job_address(site.sid, decision.request_id)


def traffic(lab: LabPlan, decision: Decision, users: str, count: int) -> tuple[int, dict[Any, int]]:
    """Send `count` datagrams from the users' host `users` (a namespace) to the decision's
    job; the datagrams its site got and the hop counters that grew."""
    job = job_of(lab, decision)
    before = linux.hop_counts(lab)
    receiver = Receiver(lab.host_of[str(decision.site)].namespace, job)
    assert send(users, job, count=count) == count
    got = receiver.result().packets
    settle()
    return got, grown(before, linux.hop_counts(lab))
