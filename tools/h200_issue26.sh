#!/bin/bash
# Issue 26 on one H200 (run from the project root on the GPU machine, $OUT set).
#   bash tools/h200_issue26.sh tests   GPU tests of the V3.2 geometry (fused scan, lockstep)
#   bash tools/h200_issue26.sh bench   the equal-HBM bench (JSON + PNG + log under $OUT)
#   bash tools/h200_issue26.sh traces  issue 24: simulate --executor cuda and the TP harness
#                                      (2 ranks on this GPU, shared backing) record traces
#   bash tools/h200_issue26.sh suite   python -m pytest -m gpu -q (the whole GPU suite)
#   bash tools/h200_issue26.sh kernels the attention and scan kernels A/B (engine-kernels)
#   bash tools/h200_issue26.sh resolver random / request / interleaved placement, B=100,256
set -u -o pipefail
. "$(dirname "$0")/h200_setup.sh"
export HISPARSE_MOONCAKE=$PWD/build/gpudata/conversation_trace.jsonl
for what in "$@"; do
  case "$what" in
    tests) python3 -m pytest -v -s -m gpu tests/test_engine_attention.py tests/test_engine_v32.py \
             tests/test_engine.py -x 2>&1 \
             | tee "$OUT/issue26_v32_tests.log" | grep -E "PASS|FAIL|Error|error|v32 |passed|failed" || exit 1 ;;
    bench) timeout "${BENCH_S:-400}" python3 -m hisparse bench equal-hbm \
             --json "$OUT/issue26_equal_hbm.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/issue26_equal_hbm.log" ;;
    traces)
      python3 -m hisparse simulate --executor cuda --trace "$OUT/issue24_sim_cuda_trace.jsonl" \
        > "$OUT/issue24_sim_cuda.txt" 2>&1; tail -4 "$OUT/issue24_sim_cuda.txt"
      python3 -c "import json, os; from hisparse.tp import TpOptions, launch
r = launch(TpOptions(ranks=2, backing='shared', executor='cuda', gpus=1,
                     trace=os.environ['OUT'] + '/issue24_tp_gpu_trace.jsonl'),
           transport='pipe', timeout_s=60)
print(json.dumps([{k: v for k, v in x.items() if k != 'memory'} for x in r]))" \
        > "$OUT/issue24_tp_gpu.txt" 2>&1; tail -c 1500 "$OUT/issue24_tp_gpu.txt"
      ls -la "$OUT" ;;
    kernels) python3 -m hisparse bench engine-kernels --json "$OUT/issue26_kernels.json" \
               ${KERNEL_ARGS:-} 2>&1 | tee "$OUT/issue26_kernels.log" | tail -30 ;;
    resolver) python3 -m hisparse bench resolver --batches 100,256 --miss-rates 0.2 \
                --placements random,request,interleaved --no-torch --reps 30 \
                --json "$OUT/issue26_placement.json" 2>&1 | tee "$OUT/issue26_placement.log" | tail -20 ;;
    suite) python3 -m pytest -m gpu -q 2>&1 | tee "$OUT/issue26_gpu_suite.log" | tail -25 ;;
    *) echo "unknown step $what"; exit 2 ;;
  esac
done
