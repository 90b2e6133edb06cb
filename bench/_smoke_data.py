"""Small generated inputs for the bench scripts' --smoke runs (no network, nothing from ../shared/data): a sample
dump run through the pipeline, and from it a stand-in for ../shared/data in that directory's layout. Not a bench
script itself (tests/test_bench_smoke.py runs bench/[!_]*.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference"  # NVIDIA's scripts, where CI and the dev machines keep them
ARTICLES = 60  # ~100 KB of text, a few thousand HDF5 instances at seq 128
VOCAB_SIZE = 1000  # sentencepiece pieces that ARTICLES articles (or half of them) support
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
