"""Energy: the board's trace, accounting, reports, meters, prediction, carbon."""
