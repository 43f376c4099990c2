"""`cnbrain bench map`: how long a map takes to load and to place its first request, and the
peak memory of the process."""

import resource
import time
from dataclasses import asdict, dataclass

from cnbrain.bench.workload import random_requests
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_document
from cnbrain.placement.engine import PlacementEngine


@dataclass(frozen=True, slots=True)
class ScaleFigures:
    map: str
    sites: int
    links: int
    document_s: float
    check_s: float
    engine_s: float
    first_decision_ms: float
    next_decision_ms: float
    first_status: str
    peak_rss_mib: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def bench_map(spec: str, *, seed: int) -> ScaleFigures:
    t0 = time.perf_counter()
    document = load_document(spec)
    t1 = time.perf_counter()
    cmap = ComputeNetworkMap.from_document(document)
    t2 = time.perf_counter()
    engine = PlacementEngine(cmap)
    t3 = time.perf_counter()
    first, second = random_requests(cmap, count=2, seed=seed)
    decision = engine.place(first)
    t4 = time.perf_counter()
    engine.place(second)
    t5 = time.perf_counter()
    return ScaleFigures(
        map=spec,
        sites=len(cmap.sites),
        links=len(cmap.links),
        document_s=t1 - t0,
        check_s=t2 - t1,
        engine_s=t3 - t2,
        first_decision_ms=(t4 - t3) * 1000,
        next_decision_ms=(t5 - t4) * 1000,
        first_status=decision.status.value,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
