"""Executors that drive the HiSparse protocol against real memory.

Installed as ``hisparse.executor``.

Placeholder: the CPU and CUDA executors land in later changes.
"""
