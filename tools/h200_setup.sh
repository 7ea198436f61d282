# Sourced by tools/h200_issue*.sh on the GPU machine (project root, $OUT set): install the
# carried wheels (.whl/) and hisparse itself, editable, then record the GPU.
ls .whl/*.whl >/dev/null 2>&1 || {
  echo "no wheels in .whl/: run 'sh /work/shared/device/wheels.sh' in the checkout and carry .whl"
  exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
# hisparse itself, editable as here (spec/ and executor/ import as hisparse.spec, .executor)
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null || exit 1
export PYTHONUNBUFFERED=1
[ -f "$OUT/nvidia-smi.txt" ] || nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
