"""Score plugins: one objective-term estimate per module (normalised; 0 is best)."""
