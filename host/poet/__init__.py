"""poet: train neural networks on boards too small to train them."""

__version__ = "0.1.0"
