"""Generic KV connectors that compose with HiSparse: an engine-neutral
OffloadingConnector for any prefix-cacheable GPU group (here the indexer keys), a
MultiConnector with vLLM's composition semantics, and the adapter that makes
HiSparseConnector one of its children. HiSparse code never touches indexer bytes."""
