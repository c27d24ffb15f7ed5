"""Zoo models beyond the digits pair, each in plain torch.nn (no torchvision: poet must not depend on it)."""
