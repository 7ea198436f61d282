#!/bin/bash
# Issue 23 on one H200 (run from the project root on the GPU machine, $OUT set):
#   bash tools/h200_issue23.sh   the engine lockstep with the indexer group offloaded
#                                (tests/test_engine_indexer_offload_gpu.py; log under $OUT)
# ISSUE23_S bounds the pytest run (seconds, default 140) so a hang still leaves its log.
set -u -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# hisparse itself, editable as here (spec/ and executor/ import as hisparse.spec, .executor)
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null || exit 1
export PYTHONUNBUFFERED=1
[ -f "$OUT/nvidia-smi.txt" ] || nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
# -s: the tests print each run's figures (stores, restores, restore bytes, ms per step)
timeout "${ISSUE23_S:-140}" python3 -m pytest -v -s -m gpu \
  tests/test_engine_indexer_offload_gpu.py -x 2>&1 | tee "$OUT/issue23_indexer_offload.log" \
  | grep -E "PASS|FAIL|Error|error|indexer offload|restore bytes|passed|failed|skipped"
exit "${PIPESTATUS[0]}"
