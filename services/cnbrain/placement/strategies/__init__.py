"""Placement strategies behind one interface: the Top-N solver, the exact model, baselines."""
