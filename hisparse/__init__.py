"""HiSparse: sparse-attention KV offload protocol, its TLA+ model and its executors."""

__version__ = "0.1.0"
