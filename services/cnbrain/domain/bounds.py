"""The bounds of every number and name a tenant or operator sends, in one place.

Each bound is chosen from the domain, well beyond any real site, link or job, and small
enough that the brain's unit conversions (cores to millicores, GiB to MiB, Gbps to Mbps)
and sums over a whole map stay within the database's 64-bit integer columns, and every
cost or energy estimate stays a finite float:

- one site: at most 10^7 cores, 10^9 GiB of memory, 10^10 GiB of storage and 10^6
  accelerators of each model; a map has at most 10^5 sites;
- one link: at most 10^6 Gbps and 10^5 ms;
- one request: at most what one site can hold, 10^6 Gbps, 10^5 hours (about 11 years);
- a tenant's quota: at most what a whole map can hold;
- prices at most 10^6 CNY per unit-hour, weights at most 10^6.

Names (ids, labels, link ends, accelerator models) are at most `MAX_NAME_LENGTH` characters
and carry no control characters (U+0000 to U+001F, U+007F); `control_free` checks that.
Every number is finite: the models refuse infinity and NaN.
"""

import re
from typing import Annotated, Final

from pydantic import AfterValidator, StringConstraints

MAX_SITES: Final = 100_000
"""Sites of one map."""

MAX_CPU_CORES: Final = 10**7
"""CPU cores of one site, and of one request."""

MAX_MEMORY_GIB: Final = 10**9
"""Memory of one site, and of one request (GiB)."""

MAX_STORAGE_GIB: Final = 10**10
"""Storage of one site, and of one request (GiB)."""

MAX_ACCELERATORS: Final = 10**6
"""Accelerators of one model at one site, and of one request."""

MAX_NODES: Final = 10**5
"""Nodes of one request's gang, and of one node pool."""

MAX_NODE_POOLS: Final = 64
"""Node pools of one site."""

MAX_DEVICES_PER_NODE: Final = 64
"""Accelerators on one node of a node pool."""

MAX_BANDWIDTH_GBPS: Final = 10**6
"""Bandwidth of one link, and the bandwidth a request reserves on each link of its path."""

MAX_LATENCY_MS: Final = 10**5
"""Latency of one link, and a request's latency bound (ms)."""

MAX_DURATION_HOURS: Final = 10**5
"""How long a request holds its resources."""

MAX_WINDOW_S: Final = MAX_DURATION_HOURS * 3600
"""The length of a reservation's window (seconds): at most a request's longest duration."""

MAX_EPOCH_S: Final = 32_503_680_000
"""The latest epoch second a window may reach (3000-01-01 UTC): any stored time fits."""

MAX_PRICE_CNY: Final = 10**6
"""A unit price (CNY per core-, GiB-, accelerator- or Gbps-hour)."""

MAX_WEIGHT: Final = 10**6
"""An objective weight, or a multiplier of the weight matrix; also a province's demand weight."""

MAX_PUE: Final = 10
"""Power usage effectiveness of a site."""

MAX_CARBON_G_PER_KWH: Final = 10**4
"""Carbon intensity of a site's electricity."""

MAX_QUOTA_CPU_CORES: Final = MAX_SITES * MAX_CPU_CORES
MAX_QUOTA_MEMORY_GIB: Final = MAX_SITES * MAX_MEMORY_GIB
MAX_QUOTA_ACCELERATORS: Final = MAX_SITES * MAX_ACCELERATORS
MAX_QUOTA_BANDWIDTH_GBPS: Final = MAX_SITES * MAX_BANDWIDTH_GBPS
MAX_QUOTA_ACTIVE_REQUESTS: Final = 10**9
"""A tenant's quota: at most what a whole map holds (active requests: a 32-bit column)."""

MAX_NAME_LENGTH: Final = 128
"""An id, a name, a label's key or value, a link end (a link's id joins two ends)."""

MAX_TEXT_LENGTH: Final = 4096
"""A job environment variable's value."""

MAX_LINK_REASON: Final = 500
"""The reason of an operator's report of a link's state (its column's length)."""

MAX_LABELS: Final = 64
"""Labels of a site, or labels a request asks for."""

MAX_ENVIRONMENT: Final = 256
"""Environment variables of a job."""

MAX_REGIONS: Final = 256
"""Entries of a request's allow or deny list."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_control_characters(text: str) -> bool:
    """Whether `text` holds a control character (U+0000 to U+001F, U+007F)."""
    return _CONTROL.search(text) is not None


def control_free(text: str) -> str:
    """`text` itself; raises ValueError when it holds a control character."""
    found = _CONTROL.search(text)
    if found is not None:
        raise ValueError(
            f"must not contain control characters (found U+{ord(found.group()):04X} "
            f"at position {found.start()})"
        )
    return text


Name = Annotated[str, StringConstraints(max_length=MAX_NAME_LENGTH), AfterValidator(control_free)]
"""A name: at most MAX_NAME_LENGTH characters, no control characters (may be empty)."""

Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_LENGTH), AfterValidator(control_free)]
"""A longer text: at most MAX_TEXT_LENGTH characters, no control characters."""

MAX_VOLUME_GB: Final = 10**7
"""Data one flow moves (GB, 10^9 bytes): 10 PB, beyond any dataset staged for one job."""

MAX_FLOWS: Final = 16
"""Staging or delivery flows of one request."""
