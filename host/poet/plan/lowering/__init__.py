"""A plan as the bytes the board loads: lower (graph to model blob, plan to schedule), modelblob and
schedule (the two formats, docs/spec.md)."""
