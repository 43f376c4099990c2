"""cnbrain: a hierarchical compute-network brain.

The engine turns a compute-network map and a tenant's request into a decision: a site, a
three-segment network path, a reservation of compute and bandwidth, and an explanation.
"""

__version__ = "0.1.0"
