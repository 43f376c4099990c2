"""The national brain: the regions' view of the country, the backbone, cross-region placement."""
