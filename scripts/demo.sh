#!/usr/bin/env bash
# The main job: the whole chain on a generated sample dump mixed with a generated web corpus (no network), small
# settings so it runs in minutes on 2 CPU cores: dump + web pages (weight 2) -> every pipeline stage -> verify -> pretrain phase 1 + 2 (tiny preset) -> export -> fill-mask
# -> held-out evaluation of the export, plots of the run, the data report; then several languages: Finnish- and
# Greek-like dumps beside the Hungarian one (its stages reused), one vocabulary, shards mixed by size^alpha, a short
# phase 1 with its own mixture and held-out accuracy per language.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
work=data/sample
run=runs/sample

dump=$(pipeline sample-dump "$work/dump")
web=$(pipeline sample-corpus "$work/web" --docs 200)
settings=(--lang hu --dump "$dump" --corpus "web=$web:2" --workdir "$work" --set vocab.vocab_size=4000
          --set shard.num_shards=4)
pipeline run "${settings[@]}" --workers 2
pipeline status "${settings[@]}"
pipeline verify "$work/hu/hdf5"

variant() { ls -d "$work"/hu/hdf5/*_seq_len_"$1"_*; }
pretrain phase1 --data "$(variant 128)" --out "$run" --preset tiny \
  --set steps=300 --set global_batch=32 --set micro_batch=32 --set lr=2e-2 --set warmup=0.1 --set checkpoint_every=100 --set log_every=20 --set eval_every=100 --set eval_samples=2000
pretrain phase2 --data "$(variant 512)" --out "$run" --preset tiny \
  --set steps=30 --set global_batch=16 --set micro_batch=8 --set lr=2e-3 --set checkpoint_every=30 --set log_every=5 --set eval_every=10 --set eval_samples=500
pretrain export "$run/phase2" --out "$run/hf"
python - "$run/hf" <<'PY'
import sys
from pretrain.tools.export import fill_mask
text = "A katona fiatal és [MASK]."
print(f"fill-mask on {text!r}:")
for token, score in fill_mask(sys.argv[1], text, top_k=5):
    print(f"  {token:15s} {score:.3f}")
PY

plots=$(pretrain plot "$run")
report=$(pipeline report --lang hu --workdir "$work")
figures=$(pretrain eval "$run/hf" --data "$(variant 128)" --samples 2000)
figure() { echo "$figures" | awk -v key="$1" '$1 == key {print $2}'; }
echo "held-out MLM accuracy of the exported model ($run/hf, test split of the seq_len 128 variant, up to 2,000 instances): $(figure eval_mlm_accuracy) (baseline, always the most frequent masked token: $(figure eval_mlm_unigram_baseline))"
echo "plots:"
echo "$plots" | sed 's/^/  /'
echo "data report: $report"

fi_dump=$(pipeline sample-dump "$work/dump-fi" --lang fi --pages 150)
el_dump=$(pipeline sample-dump "$work/dump-el" --lang el --pages 60)
languages=(--lang hu,fi,el --dump "hu=$dump" --dump "fi=$fi_dump" --dump "el=$el_dump" --corpus "hu=web=$web:2"
           --workdir "$work" --set vocab.vocab_size=4000 --set shard.num_shards=4)
pipeline run "${languages[@]}" --workers 2
pipeline status "${languages[@]}" | tail -4
mixed=$(ls -d "$work"/el+fi+hu/hdf5/*_seq_len_128_*)
pretrain phase1 --data "$mixed" --out "$run-languages" --preset tiny --set language_alpha=0.5 \
  --set steps=300 --set global_batch=32 --set micro_batch=32 --set lr=1e-2 --set warmup=0.1 --set log_every=20 --set eval_every=100 \
  --set eval_samples=1500
pretrain eval "$run-languages/phase1" --data "$mixed" --samples 1500 | grep -E '^eval_mlm_(accuracy|unigram_baseline)_'
echo "plots: $(pretrain plot "$run-languages" | grep languages.png)"
