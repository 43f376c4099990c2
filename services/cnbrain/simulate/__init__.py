"""The what-if simulator: replays job traces on a map with the placement engine, on a
simulated clock, and compares policies."""
