#!/bin/bash
# Issue 28 (the GPU half of P/D import) on one H200: run from the project root on the GPU
# machine, $OUT set. About 4 minutes: the tests first, then a bench of a few seconds.
#   bash tools/h200_issue28.sh tests   the GPU import test (both targets bit for bit against
#                                      the reference, write_host_block refusals, simulate
#                                      --pd-share 0.5 on cuda), then the CUDA executor's tests
#   bash tools/h200_issue28.sh bench   staging in VRAM -> pinned host blocks vs bulk D2H (JSON)
# TESTS_S / BENCH_S bound each step (seconds); HISPARSE_GPU_EXAMPLES, if set, lowers the
# Hypothesis budget of tests/test_executor_cuda.py (150 there; the whole GPU suite took
# 60-90 s on this machine before). A failing step does not stop the next: one run, both
# records.
set -u -o pipefail
. "$(dirname "$0")/h200_setup.sh"
status=0
for what in "$@"; do
  case "$what" in
    tests) timeout "${TESTS_S:-200}" python3 -m pytest -v -m gpu -p no:cacheprovider \
             tests/test_pdimport_gpu.py tests/test_executor_cuda.py -x 2>&1 \
             | tee "$OUT/issue28_gpu_tests.log" \
             | grep -E "PASS|FAIL|SKIP|Error|error|passed|failed" || status=1 ;;
    bench) timeout "${BENCH_S:-90}" python3 -m hisparse bench pd-staging \
             --json "$OUT/issue28_pd_staging.json" ${BENCH_ARGS:-} 2>&1 \
             | tee "$OUT/issue28_pd_staging.log" || status=1 ;;
    *) echo "unknown step $what"; exit 2 ;;
  esac
done
exit $status
