"""What a training step costs in time and energy (costs) and what it holds in RAM, flash and aux
storage (memory)."""
