"""kernelmill: PyTorch programs in, verified GPU-kernel training corpora out."""

__version__ = "0.1.0"
