#!/usr/bin/env bash
# The book's prepared accelerator session: one command of about nine minutes on one CUDA GPU.
#   1. python -m svmuon.bench gpu (a few minutes): Muon, OrthogonalMuon and ManifoldMuon(Stiefel) against the
#      matmul roofline and torch.optim.Muon -> $OUT/gpu-cuda-<date>.json
#   2. the GPT study at --size gpu for the rest of the time, resuming from experiments/partial/gpt-gpu-*.json
#      (every finished run is saved; --time-budget starts a run only if it would end in time) -> $OUT/gpt/
# What comes back is committed: the benchmark to benchmarks/results/, the GPT files to experiments/partial/
# (to experiments/results/ once every arm is complete, which takes several such sessions).
# Usage (repository root): OUT=/some/folder [SESSION_S=540] bash benchmarks/on-gpu.sh
# SESSION_S is the whole session's wall-clock budget; the first GPT run always starts (its length is unknown
# until one has run), so leave the length of one run under the command's hard limit.
set -euo pipefail
: "${OUT:?set OUT to the folder the results go to}"
export PYTHONUNBUFFERED=1 PYTHONPATH="lib${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
start=$(date +%s)
total=${SESSION_S:-540}
mkdir -p "$OUT/gpt"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  "$PY" -m svmuon.bench gpu --output "$OUT/gpu-cuda-$(date -u +%Y%m%d).json" || echo "bench gpu failed ($?)"
  cp experiments/partial/gpt-gpu-*.json "$OUT/gpt/" 2>/dev/null || true
  left=$(( total - ($(date +%s) - start) ))
  if (( left > 60 )); then
    "$PY" -m svmuon.experiments gpt --size gpu --output-dir "$OUT/gpt" --time-budget "$left"
  else
    echo "no time left for the GPT study ($left s)"
  fi
} 2>&1 | tee "$OUT/session.log"
