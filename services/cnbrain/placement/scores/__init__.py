"""Score plugins: one objective term per module (normalised; 0 is best)."""
