"""What brains share to decide together: ownership, wire forms, the two-phase ledger service."""
