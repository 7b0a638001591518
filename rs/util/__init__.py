"""Small utilities the stages share: locks, checksums, disk space, sizes, progress, the run's ledger."""
