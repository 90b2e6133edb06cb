#!/usr/bin/env bash
# Set up .venv if needed and run the whole test suite (slow tests included) in TEST_WORKERS pytest processes (default
# 2): one process keeps ~1.1 of two cores busy (most tests wait on a subprocess of one thread), two took the suite from
# 36 min 47 s to 24 min 49 s here. Each test file goes to one worker whole (--dist loadfile), so a module's shared
# fixtures (a pipeline run, a tiny pretraining run) are made once, not once per worker; the files go out longest
# first (tests/conftest.py orders them; --no-loadscope-reorder keeps that order instead of xdist's by test count).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The suite starts ~500 Python processes: each one would compile every project module it imports (~0.3 CPU-s) where
# PYTHONDONTWRITEBYTECODE is set (as in some CI images), so the modules are compiled once here; Python still checks
# each cached file against its source.
.venv/bin/python -m compileall -q pipeline pretrain wiki2bert_core tests bench
exec .venv/bin/python -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
