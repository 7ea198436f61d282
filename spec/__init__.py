"""Executable protocol machine for HiSparse KV offload (installed as ``hisparse.spec``)."""
