"""Graph rewrites made before planning: rewrites decides which a plan needs and records them (the
record replays them onto a fresh trace); static_int8, precision, placement and fuse are the passes."""
