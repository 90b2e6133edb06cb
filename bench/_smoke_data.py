"""Generated inputs for the bench scripts (no network, nothing from ../shared/data): for their --smoke runs a sample
dump run through the pipeline, and from it a stand-in for ../shared/data in that directory's layout; for the
pretraining scripts a variant directory of random ids. Not a bench script itself (tests/test_bench_smoke.py runs
bench/[!_]*.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference"  # NVIDIA's scripts, where CI and the dev machines keep them
ARTICLES = 60  # ~100 KB of text, a few thousand HDF5 instances at seq 128
VOCAB_SIZE = 1000  # sentencepiece pieces that ARTICLES articles (or half of them) support
RANDOM_SEQ_LEN, RANDOM_PREDICTIONS = 128, 20  # write_random_data's sequence length and masked positions a row
# `pipeline run` settings for ARTICLES articles: VOCAB_SIZE, shards of shard.min_documents_per_shard documents
SETTINGS = ["--set", f"vocab.vocab_size={VOCAB_SIZE}", "--set", "shard.num_shards=4"]


def pipeline_run(workdir: Path, to: str, articles: int = ARTICLES) -> Path:
    """`pipeline sample-dump` into workdir/dump, then `pipeline run --to <to>` in workdir (1 worker, SETTINGS);
    returns workdir/hu."""
    from pipeline.tools.sample_dump import DUMP_NAME

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "pipeline.cli"]
    subprocess.run([*cli, "sample-dump", str(workdir / "dump"), "--pages", str(articles), "-q"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*cli, "run", "--lang", "hu", "--dump", str(workdir / "dump" / DUMP_NAME), "--workdir",
                    str(workdir), "--to", to, "--workers", "1", "--quiet", *SETTINGS], check=True, env=env)
    return workdir / "hu"


def shared_data(directory: Path, articles: int = ARTICLES) -> Path:
    """directory/data, the files the bench scripts read from ../shared/data, in their layouts, made from a sample
    dump run to the vocab stage: hu/karoli_1908_verses.txt (per Hungarian document a `## ` heading, then a sentence
    a line), hu/libreoffice-help-hu.hu.txt (a Hungarian paragraph a line), text/sample_text.txt (the English
    articles' paragraphs, one a line), vocab/wikibert-hu-cased-vocab.txt and vocab/bert-base-uncased-vocab.txt
    (both the vocab stage's vocab.txt). directory/reference links to ../shared/reference where that exists, so
    that data/../reference finds NVIDIA's scripts as it does beside the real data."""
    from pipeline.stages.sentences.splitters import split_paragraphs
    from pipeline.text_files import iter_documents
    from pipeline.tools.sample_dump import generate_pages

    lang_dir = pipeline_run(directory / "pipeline", "vocab", articles)
    data = directory / "data"
    for sub in ("hu", "text", "vocab"):
        (data / sub).mkdir(parents=True)
    documents = [doc for part in sorted((lang_dir / "filter").glob("part-*.txt")) for doc in iter_documents(part)]
    (data / "hu" / "karoli_1908_verses.txt").write_text(
        "".join(f"## Cikk {i}\n" + "".join(s + "\n" for s in doc) for i, doc in enumerate(documents)),
        encoding="utf-8")
    english = {page.title for page in generate_pages(articles) if page.kind == "english"}
    paragraphs: dict[bool, list[str]] = {True: [], False: []}
    for part in sorted((lang_dir / "extract").glob("part-*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            paragraphs[record["title"] in english] += split_paragraphs(record["text"])
    (data / "hu" / "libreoffice-help-hu.hu.txt").write_text("".join(p + "\n" for p in paragraphs[False]),
                                                            encoding="utf-8")
    (data / "text" / "sample_text.txt").write_text("".join(p + "\n" for p in paragraphs[True]), encoding="utf-8")
    vocab = (lang_dir / "vocab" / "vocab.txt").read_bytes()
    for name in ("wikibert-hu-cased-vocab.txt", "bert-base-uncased-vocab.txt"):
        (data / "vocab" / name).write_bytes(vocab)
    if REFERENCE.is_dir():
        (directory / "reference").symlink_to(REFERENCE)
    return data


def write_random_data(root: Path, files: int, samples: int, vocab_size: int) -> Path:
    """root/hdf5/seq128, a variant directory with vocab.txt (the special tokens, then w0, w1, ...) and
    training/*.hdf5 in NVIDIA's layout: full rows of random ids, [CLS] A [SEP] B [SEP] split in the middle, 20
    positions a row masked with [MASK] and their ids kept in masked_lm_ids, so that dynamic masking reads the true
    tokens too (throughput does not depend on the ids)."""
    from wiki2bert_core.hdf5_format import (DTYPES, INPUT_IDS, INPUT_MASK, MASKED_LM_IDS, MASKED_LM_POSITIONS,
                                            NEXT_SENTENCE_LABELS, SEGMENT_IDS)
    from wiki2bert_core.wordpiece import SPECIAL_TOKENS

    variant = root / "hdf5" / f"seq{RANDOM_SEQ_LEN}"
    (variant / "training").mkdir(parents=True)
    tokens = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(vocab_size - len(SPECIAL_TOKENS))]
    (variant / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    middle = RANDOM_SEQ_LEN // 2
    maskable = [p for p in range(1, RANDOM_SEQ_LEN - 1) if p != middle]
    rng = np.random.default_rng(0)
    for i in range(files):
        ids = rng.integers(len(SPECIAL_TOKENS), vocab_size, (samples, RANDOM_SEQ_LEN), dtype=np.int32)
        ids[:, 0], ids[:, middle], ids[:, -1] = (tokens.index(t) for t in ("[CLS]", "[SEP]", "[SEP]"))
        positions = np.sort(np.stack([rng.choice(maskable, RANDOM_PREDICTIONS, replace=False)
                                      for _ in range(samples)]), axis=1)
        masked_ids = np.take_along_axis(ids, positions, axis=1)
        ids[np.arange(samples)[:, None], positions] = tokens.index("[MASK]")
        columns = {INPUT_IDS: ids, INPUT_MASK: np.ones((samples, RANDOM_SEQ_LEN)),
                   SEGMENT_IDS: (np.arange(RANDOM_SEQ_LEN) > middle)[None].repeat(samples, 0),
                   MASKED_LM_POSITIONS: positions, MASKED_LM_IDS: masked_ids,
                   NEXT_SENTENCE_LABELS: rng.integers(0, 2, samples)}
        with h5py.File(variant / "training" / f"training_{i:04d}.hdf5", "w") as f:
            for name, values in columns.items():
                f[name] = values.astype(DTYPES[name])
    return variant
