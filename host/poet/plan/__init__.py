"""Planning a training step, grouped by job:

- `cost/`: what a step costs (costs: time and energy per op from a board's profile) and holds
  (memory: the one memory model the planner, simulator, lowering and runtime share);
- `transform/`: the graph rewrites a plan may need before it is solved (rewrites decides them and
  records what it decided; static_int8, precision, placement and fuse are the passes);
- `strategies/`: every strategy, one module each, under one signature (the POET MILP among them);
- `solver/`: the machinery strategies share (milp: HiGHS and the other solvers; bound: the
  relaxations; race: the second core; clock: every time limit; resident_sets: the resident-set walk);
- `lowering/`: a plan as the bytes the board loads (lower, modelblob, schedule);
- here: the plan's types, the simulator that scores every plan, and the orchestration (pipeline:
  plan one step; request: what `--ram`, `--deadline`... ask, printed and written; sweep).
"""
