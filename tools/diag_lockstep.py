"""Which engine pair differs at the V3.2 geometry (diagnostic; prints one line each)."""
import dataclasses
import sys

import torch

from hisparse.engine.config import EngineShape, ModelShape
from hisparse.engine.geometry import v32_model
from hisparse.engine.lockstep import Lockstep, hisparse_engine, resident_engine
from hisparse.engine.model import Model
from hisparse.engine.workload import mooncake_requests

shape = EngineShape(slots=8, max_context=32768, top_k=2048, num_speculative_tokens=1)
v = v32_model(8, "v3.2")
variants = {
    "v32-fp8": v,
    "v32-bf16keys": dataclasses.replace(v, index_fp8=False),
    "v32-fp8-4layers-2leaders": dataclasses.replace(v, layers=4, index_leaders=(0, 0, 2, 2)),
    "default-8leaders": ModelShape(layers=8, index_leaders=tuple(range(8))),
    "v32-fp8-noqrank": dataclasses.replace(v, q_rank=0),
}
for name in sys.argv[1:] or list(variants):
    ms = variants[name]
    model = Model(ms, torch.device("cuda:0"))
    reqs = mooncake_requests(shape, vocab=ms.vocab, count=16, abort_every=5, max_new=(24, 48))
    hs, s1 = hisparse_engine(model, shape, gpu_blocks=1600, host_blocks=8000, graph=True)
    he, s2 = hisparse_engine(model, shape, gpu_blocks=1600, host_blocks=8000, graph=False)
    rg = resident_engine(model, shape, graph=True)
    re_ = resident_engine(model, shape, graph=False)
    rep = Lockstep([hs, he, rg, re_], [s1, s2, None, None], reqs).run(40)
    print(f"{name}: identical={rep.identical} first={rep.first_mismatch_step} "
          f"by_engine(he,rg,re)={rep.mismatches_by_engine} maxdiff={rep.max_abs_logit_diff} "
          f"misses={rep.misses} spills={rep.spills}", flush=True)
    del model, hs, he, rg, re_, s1, s2
    torch.cuda.empty_cache()
