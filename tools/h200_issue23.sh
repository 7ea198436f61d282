#!/bin/bash
# Issue 23 on one H200 (run from the project root on the GPU machine, $OUT set):
#   bash tools/h200_issue23.sh   the engine lockstep with the indexer group offloaded
#                                (tests/test_engine_indexer_offload_gpu.py; log under $OUT)
# ISSUE23_S bounds the pytest run (seconds, default 140) so a hang still leaves its log.
set -u -o pipefail
. "$(dirname "$0")/h200_setup.sh"
# -s: the tests print each run's figures (stores, restores, restore bytes, ms per step)
timeout "${ISSUE23_S:-140}" python3 -m pytest -v -s -m gpu \
  tests/test_engine_indexer_offload_gpu.py -x 2>&1 | tee "$OUT/issue23_indexer_offload.log" \
  | grep -E "PASS|FAIL|Error|error|indexer offload|restore bytes|passed|failed|skipped"
exit "${PIPESTATUS[0]}"
