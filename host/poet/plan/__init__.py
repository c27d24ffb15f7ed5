"""Planning: op costs, the memory model, the strategies and the MILP, the simulator, precision, lowering to bytes."""
