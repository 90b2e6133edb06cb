#!/usr/bin/env bash
# Create .venv and install wiki2bert with its pretraining, test and bench extras (idempotent; the test suite runs
# every bench/ script in its --smoke mode).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# torch first and pinned: an unpinned torch (also pulled in by deepspeed/transformers) brings GBs of CUDA packages.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[pretrain,test,bench]"
# DeepSpeed JIT-builds its CPU communication op on first use (~40 s); build it here, once, so that no timed test
# is the one that builds it (a build killed half-way leaves a lock that hangs every later DeepSpeed run). Importing
# pretrain first puts it where pretrain looks for it: .venv/torch_extensions/ninja-<the ninja on PATH>
# (TORCH_EXTENSIONS_DIR, unless set), not the ~/.cache/torch_extensions that all environments share.
.venv/bin/python -c "import pretrain
from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
ShareMemCommBuilder().load(verbose=False)" \
  2>&1 | { grep -v "Setting accelerator to CPU" || true; }
