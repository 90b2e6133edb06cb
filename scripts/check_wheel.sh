#!/usr/bin/env bash
# A plain install works: build the wheel, install it (not editable) into a fresh virtualenv with the base
# dependencies and torch, and run the commands from a directory outside the repository, so that nothing is imported
# from the source tree and no ./stages.yaml is found. One line per check; exit 1 at the first failure (its output
# follows). CI runs it after the test suite (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset PYTHONPATH  # the installed packages only

# check NAME COMMAND...: runs COMMAND with stdout in $tmp/out (for the next step) and stderr in $tmp/err
check() {
  local name=$1 began=$SECONDS
  shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "ok    $name ($((SECONDS - began)) s)"
  else
    echo "FAIL  $name (exit $?): $*"
    tail -n 30 "$tmp/out" "$tmp/err"
    exit 1
  fi
}

# Built from a copy of the files git tracks or would (a build/ left by an earlier in-tree build would add its files
# to the wheel, and could hide a missing one).
copy_source() {
  mkdir "$tmp/src"
  comm -23 <(git ls-files --cached --others --exclude-standard | sort) <(git ls-files --deleted | sort) \
    | tar -cf - -T - | tar -xf - -C "$tmp/src"
}
check "virtualenv created" "$PYTHON" -m venv "$tmp/venv"
check "source copied" copy_source
check "wheel built" "$tmp/venv/bin/python" -m pip wheel -q --no-deps --disable-pip-version-check -w "$tmp/dist" "$tmp/src"
wheel=$(ls "$tmp"/dist/wiki2bert-*.whl)
# torch pinned in the same resolve (the CPU wheel; unpinned it brings GBs of CUDA packages); the base dependencies
# are all the checks need (pretrain reads its recipes with torch, without DeepSpeed).
check "$(basename "$wheel") installed (not editable)" \
  "$tmp/venv/bin/python" -m pip install -q --no-compile --disable-pip-version-check "torch==2.13.0" "$wheel"

export PATH="$tmp/venv/bin:$PATH"
mkdir "$tmp/work"
cd "$tmp/work"
check "packages imported from site-packages" python -c '
import sysconfig, wiki2bert_core, pipeline, pretrain
site = sysconfig.get_path("purelib")
outside = [m.__file__ for m in (wiki2bert_core, pipeline, pretrain) if not m.__file__.startswith(site)]
assert not outside, f"imported from outside {site}: {outside}"'
check "pipeline config --lang hu (the bundled stages.yaml)" pipeline config --lang hu
check "pipeline sample-dump" pipeline sample-dump dump --pages 100 --quiet
dump=$(cat "$tmp/out")
check "pipeline run (sample dump, every stage)" \
  pipeline run --lang hu --dump "$dump" --workdir data --set vocab.vocab_size=2000 --set shard.num_shards=2 --quiet
check "pipeline verify" pipeline verify data/hu/hdf5
check "pretrain config --phase phase2 (the bundled recipes)" pretrain config --phase phase2
check "pretrain config --set arch=modernbert --phase phase2 (its bundled recipe)" \
  pretrain config --set arch=modernbert --phase phase2
check "pretrain estimate (the bundled phase1 recipe)" pretrain estimate --preset tiny --gpus 1

echo "wheel check passed in $((SECONDS - start)) s"
