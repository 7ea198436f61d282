"""An engine's decode loop on HiSparse: a small DeepSeek-V3.2-shaped sparse-MLA decoder.

Importing this package needs neither torch nor a GPU: the shapes (``config``), the
workload (``workload``) and the scheduler side (``schedule``, and ``offload``: the
indexer group's OffloadingConnector) are plain Python. The model, its caches and the
decode engine (``model``, ``kvrow``, ``cache``, ``engine``, ``lockstep``, ``offload_gpu``)
import torch and run on an NVIDIA GPU.
"""

from hisparse.engine.config import EngineConfigError, EngineShape, ModelShape

__all__ = ["EngineConfigError", "EngineShape", "ModelShape"]
