"""Filter plugins: one hard constraint per module."""
