"""The board: serial link and framing, ports, the emulator, firmware, flashing, profiling."""
