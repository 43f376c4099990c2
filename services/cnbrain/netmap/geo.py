"""Great-circle distance and the fibre latency derived from it."""

import math

EARTH_RADIUS_KM = 6371.0
FIBRE_ROUTE_FACTOR = 1.5
"""Fibre routes are longer than the great circle; 1.5 is a common planning factor."""
FIBRE_US_PER_KM = 5.0
"""Propagation delay in fibre: light travels at about 2/3 c, 5 microseconds per km."""


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance in km between two WGS84 points given in degrees."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def fibre_latency_ms(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """One-way propagation latency in ms over a fibre route between two points."""
    km = great_circle_km(lat1, lon1, lat2, lon2) * FIBRE_ROUTE_FACTOR
    return km * FIBRE_US_PER_KM / 1000.0
