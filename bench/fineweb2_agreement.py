"""The filter's `web` rule set against FineWeb-2's filter steps, document by document, and their speed.

FineWeb-2 (`fineweb-2-pipeline.py` of huggingface/fineweb-2) filters each language with three datatrove filters
built from the language's config: GopherRepetitionFilter (paragraph and line-character rules off; the config's
duplicate-line share and top/duplicate n-gram shares), FineWebQualityFilter (short lines off, character duplicates
0.1, the config's line-punctuation and newline ratios) and GopherQualityFilter (the config's word lengths, alpha
share and stop words, at least 2 of them). This bench builds them the same way from the config of
`../shared/reference/fineweb2/<name>.yml` and runs them in the datatrove environment (never a project dependency:
`python -m venv DIR && DIR/bin/pip install datatrove spacy`, then `--datatrove-python DIR/bin/python`); language
identification is left aside on both sides (`filter.langid=none` for ours).

The texts: a generated web corpus (`pipeline sample-corpus`, Hungarian), and with `--dump` the articles a
Wikipedia dump's extract stage gives, each a page. Ours runs the corpus, sentences and filter stages of `pipeline
run --lang L` with `filter.thresholds_from` the same config; a document is kept if a piece of it is written.
Printed: per-document agreement, each class of disagreement with the measures that decided it, and documents per
CPU-second of the filter step (ours: the filter stage, one worker, reading, measuring, deciding and writing;
datatrove's: the three filters' `filter` calls on documents already read).

    .venv/bin/python bench/fineweb2_agreement.py --datatrove-python DIR/bin/python [--docs 2000] \\
        [--dump ../shared/data/wiki/huwiki-20240920-pages-articles-multistream.xml.bz2] [--lang hu]
    .venv/bin/python bench/fineweb2_agreement.py --smoke   # 200 pages, ours only (datatrove where given), a config
                                                          # it writes with FineWeb-2's hun_Latn figures
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.stages.filter.thresholds import FINEWEB2_NAMES  # noqa: E402
from wiki2bert_core.files import MANIFEST  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference" / "fineweb2"

SMOKE_CONFIG = {  # FineWeb-2's hun_Latn figures (configs/hun_Latn.yml of huggingface/fineweb-2 at d0defb2)
    "dup_line_frac": 0.322, "top_n_grams": [[2, 0.226], [3, 0.198], [4, 0.172]],
    "dup_n_grams": [[5, 0.169], [6, 0.159], [7, 0.148], [8, 0.136], [9, 0.124], [10, 0.112]],
    "line_punct_thr": 0.067, "new_line_ratio": 0.231, "min_avg_word_length": 3, "max_avg_word_length": 15,
    "max_non_alpha_words_ratio": 0.766,
    "stopwords": ["a", "az", "és", "is", "egy", "volt", "hogy", "nem", "meg", "de", "magyar", "első", "el", "között"]}

DATATROVE_FILTERS = r"""
import json, sys, time, yaml
from datatrove.data import Document
from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
config_path, name, pages = sys.argv[1:4]
c = yaml.safe_load(open(config_path))
steps = [
    GopherRepetitionFilter(language=name, dup_para_frac=0, dup_line_char_frac=0, dup_para_char_frac=0,
                           dup_line_frac=c["dup_line_frac"], top_n_grams=c["top_n_grams"],
                           dup_n_grams=c["dup_n_grams"]),
    FineWebQualityFilter(language=name, short_line_thr=999, char_duplicates_ratio=0.1,
                         line_punct_thr=c["line_punct_thr"], new_line_ratio=c["new_line_ratio"]),
    GopherQualityFilter(language=name, max_avg_word_length=c["max_avg_word_length"],
                        min_avg_word_length=c["min_avg_word_length"], stop_words=c["stopwords"],
                        max_non_alpha_words_ratio=c["max_non_alpha_words_ratio"], min_stop_words=2),
]
docs = [Document(text=d["text"], id=d["id"]) for d in map(json.loads, open(pages, encoding="utf-8"))]
steps[0].filter(docs[0])  # loads the word tokenizer
verdicts = {}
started = time.process_time()
for doc in docs:
    reason = "kept"
    for step in steps:
        result = step.filter(doc)
        if result is not True:
            reason = result[1] if isinstance(result, tuple) else type(step).__name__
            break
    verdicts[doc.id] = reason
print(json.dumps({"cpu_s": time.process_time() - started, "verdicts": verdicts}))
"""


def pipeline(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    if done.returncode:
        sys.exit(f"pipeline {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def pages(work: Path, docs: int, dump: Path | None, lang: str) -> Path:
    """One JSONL file of pages {"id", "text"}: the generated corpus's and the dump's articles."""
    pipeline("sample-corpus", str(work / "sample"), "--docs", str(docs), "--quiet", cwd=work)
    out = work / "pages" / "pages.jsonl"
    out.parent.mkdir()
    with open(out, "w", encoding="utf-8") as f:
        for path in sorted((work / "sample" / "pages").glob("*.jsonl")):
            for line in open(path, encoding="utf-8"):
                page = json.loads(line)
                f.write(json.dumps({"id": f"web {page['id']}", "text": page["text"]}, ensure_ascii=False) + "\n")
        if dump is not None:
            pipeline("run", "--lang", lang, "--dump", str(dump), "--to", "extract", "--workdir", str(work / "wd"),
                     "--quiet", cwd=work)
            for path in sorted((work / "wd" / lang / "extract").glob("part-*.jsonl")):
                for line in open(path, encoding="utf-8"):
                    article = json.loads(line)
                    if article["text"].strip():
                        f.write(json.dumps({"id": f"dump {article['id']}", "text": article["text"]},
                                           ensure_ascii=False) + "\n")
    return out


def ours(work: Path, pages_file: Path, lang: str, config: Path) -> tuple[dict[str, str], float, dict]:
    """(page id -> kept or our reason, CPU seconds of the filter stage, page id -> its measures)."""
    import logging

    import numpy as np

    from pipeline.config import load_pipeline_config
    from pipeline.runner import run_stage
    from pipeline.stages import InputLabel
    from pipeline.stages.filter.rules import REASONS, decide
    from pipeline.text_files import iter_records

    settings = ["--set", "filter.langid=none", "--set", f"filter.thresholds_from={config}"]
    pipeline("run", "--lang", lang, "--corpus", f"web={pages_file}", "--to", "sentences", "--workdir",
             str(work / "ours"), "--quiet", *settings, cwd=work)
    pcfg = load_pipeline_config(ROOT / "stages.yaml", lang, [s for s in settings if s != "--set"] + [
        f"corpus.sources.web.path={pages_file}"])
    sentences_manifest = json.loads((work / "ours" / lang / "sentences" / MANIFEST).read_text())
    started = time.process_time()
    run_stage(pcfg, work / "ours" / lang, "filter", {InputLabel("sentences"): sentences_manifest}, 1, True,
              logging.getLogger("bench"))
    cpu = time.process_time() - started
    filter_dir = work / "ours" / lang / "filter"
    in_ids = [r.extra.get("record_id", r.id) for part in sorted((work / "ours" / lang / "sentences").glob(
        "part-*.txt")) for r in iter_records(part)]
    kept = {r.extra.get("record_id", r.id) for part in sorted(filter_dir.glob("part-*.txt"))
            for r in iter_records(part)}
    verdicts, measures = {}, {}
    for part in sorted((work / "ours" / lang / "sentences").glob("part-*.txt")):
        ids = [r.extra.get("record_id", r.id) for r in iter_records(part)]
        scores = np.load(filter_dir / "scores" / f"{part.stem}.npz")
        rules = pcfg.stage_configs["filter"].rule_sets["web"]
        values = {n[2:]: scores[n] for n in scores.files if n.startswith("m:")}
        codes = decide(values, rules, "split", False)
        for i, doc_id in enumerate(ids):
            verdicts[doc_id] = "kept" if doc_id in kept else REASONS[codes[i] - 1] if codes[i] else "cut away"
            measures[doc_id] = {k: round(float(v[i]), 3) for k, v in values.items()}
    assert set(verdicts) == set(in_ids)
    return verdicts, cpu, measures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datatrove-python")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--lang", default="hu")
    parser.add_argument("--examples", type=int, default=3)
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="the folder of FineWeb-2's configs")
    args = parser.parse_args()
    name = FINEWEB2_NAMES[args.lang]
    with tempfile.TemporaryDirectory(prefix="fw2-agreement-") as tmp:
        work = Path(tmp)
        config = args.reference / f"{name}.yml"
        if args.smoke:
            args.docs, args.dump, args.lang, name = 200, None, "hu", "hun_Latn"
            config = work / "hun_Latn.yml"
            config.write_text(json.dumps(SMOKE_CONFIG, ensure_ascii=False), encoding="utf-8")  # JSON is YAML
        elif not config.is_file():
            sys.exit(f"error: {config}: FineWeb-2's config of {args.lang} is not there (../shared/reference/fineweb2)")
        if not (args.smoke or args.datatrove_python):
            sys.exit("error: --datatrove-python: needed but with --smoke (the module docstring says how to make it)")
        pages_file = pages(work, args.docs, args.dump, args.lang)
        texts = {d["id"]: d["text"] for d in map(json.loads, open(pages_file, encoding="utf-8"))}
        theirs = None
        if args.datatrove_python:
            done = subprocess.run([args.datatrove_python, "-c", DATATROVE_FILTERS, str(config), name,
                                   str(pages_file)], capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"datatrove failed:\n{done.stderr[-3000:]}")
            theirs = json.loads(done.stdout.strip().splitlines()[-1])
        mine, cpu, measures = ours(work, pages_file, args.lang, config)
    if theirs is None:
        print(f"ours: {len(mine)} documents, kept {sum(v == 'kept' for v in mine.values())}, "
              f"{len(mine) / cpu:,.0f} documents per CPU-second (filter stage {cpu:.2f} s)")
        return
    ids = [i for i in texts if i in mine]
    for corpus in ("web", "dump"):
        chosen = [i for i in ids if i.startswith(corpus)]
        if not chosen:
            continue
        agree = sum((mine[i] == "kept") == (theirs["verdicts"][i] == "kept") for i in chosen)
        print(f"{corpus}: {len(chosen)} documents, agreement {agree / len(chosen):.2%} "
              f"(ours kept {sum(mine[i] == 'kept' for i in chosen)}, "
              f"datatrove kept {sum(theirs['verdicts'][i] == 'kept' for i in chosen)})")
        classes = Counter((mine[i], theirs["verdicts"][i]) for i in chosen
                          if (mine[i] == "kept") != (theirs["verdicts"][i] == "kept"))
        for (our_reason, their_reason), n in classes.most_common():
            print(f"  ours {our_reason} / datatrove {their_reason}: {n}")
            for i in [i for i in chosen if (mine[i], theirs["verdicts"][i]) == (our_reason, their_reason)][
                    :args.examples]:
                print(f"    {i}: {texts[i][:100]!r}\n      {measures[i]}")
    ratio = len(ids) / cpu / (len(texts) / theirs["cpu_s"])
    print(f"documents per CPU-second: ours {len(ids) / cpu:,.0f} (filter stage {cpu:.2f} s), datatrove "
          f"{len(texts) / theirs['cpu_s']:,.0f} ({theirs['cpu_s']:.2f} s): {ratio:.2f}x")


if __name__ == "__main__":
    main()
