"""Training graphs: a PyTorch model's training step traced, instrumented, checked, read and written."""
