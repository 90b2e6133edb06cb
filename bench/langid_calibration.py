"""Calibrating the filter's language score (`min_language_score`, py3langid's probability) per language on text of
known language: each dump's articles, as the filter gives them to the identifier (the first `langid_chars`
characters of the sentences), scored for the dump's language and for every other language given.

For each language L: its own articles (how many py3langid identifies as L, and the quantiles of their probability
of L), the articles of the other dumps identified as L (its neighbours' false positives), and the threshold that
keeps 99% of L's own articles with the share of those false positives it still lets through. FineWeb-2 set its
per-language GlotLID thresholds from such distributions; ours is on py3langid's scale, so it is measured here.

    .venv/bin/python bench/langid_calibration.py --dump hu=../shared/data/wiki/huwiki-...xml.bz2 \\
        --dump en=../shared/data/wiki/enwiki-10k.xml.bz2 [--dump fi=PATH ...]
    .venv/bin/python bench/langid_calibration.py --smoke   # generated hu, fi, el and ru sample dumps
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.stages.filter.rules import identifier  # noqa: E402
from pipeline.stages.filter.stage import FilterConfig  # noqa: E402
from pipeline.text_files import iter_documents  # noqa: E402

KEEP = 0.99  # the share of a language's own articles the threshold keeps


def pipeline(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    if done.returncode:
        sys.exit(f"pipeline {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def articles(lang: str, dump: Path, work: Path) -> list[str]:
    """The dump's articles as the filter gives them to the identifier."""
    work.mkdir(parents=True)
    pipeline("run", "--lang", lang, "--dump", str(dump), "--to", "sentences", "--workdir", str(work), "--quiet",
             cwd=work)
    chars = FilterConfig().langid_chars
    return [" ".join(sentences)[:chars] for part in sorted((work / lang / "sentences").glob("part-*.txt"))
            for sentences in iter_documents(part)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", action="append", default=[], help="LANG=PATH, one per language")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    identify, known = identifier("py3langid")
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    model = LanguageIdentifier.from_model_file(MODEL_FILE)
    calibrated = LanguageIdentifier(model.nb_ptc, model.nb_pc, model.nb_classes, model.tk_nextmove, model.tk_output,
                                    norm_probs=True, tk_row=model.tk_row)
    with tempfile.TemporaryDirectory(prefix="langid-calibration-") as tmp:
        work = Path(tmp)
        dumps = dict(item.split("=", 1) for item in args.dump)
        if args.smoke:
            dumps = {lang: pipeline("sample-dump", str(work / f"dump-{lang}"), "--lang", lang, "--pages", "60",
                                    "--quiet", cwd=work) for lang in ("hu", "fi", "el", "ru")}
        if not dumps:
            sys.exit("error: --dump: give LANG=PATH for two languages or more (or --smoke)")
        texts = {lang: articles(lang, Path(path), work / lang) for lang, path in dumps.items()}
    for lang in texts:
        if lang not in known:
            print(f"{lang}: py3langid does not know it: no language check, nothing to calibrate")
            continue
        own = [(identify(t, False)[0], dict(calibrated.rank(t))[lang]) for t in texts[lang]]
        scores = np.sort([score for label, score in own if label == lang])
        threshold = float(np.quantile(scores, 1 - KEEP)) if len(scores) else float("nan")
        others = [t for other, ts in texts.items() if other != lang for t in ts]
        false = np.array([calibrated.classify(t)[1] for t in others if identify(t, False)[0] == lang])
        let_through = int((false >= threshold).sum()) if len(false) else 0
        quantiles = ", ".join(f"{q:.0%} {np.quantile(scores, q):.3f}" for q in (0.01, 0.05, 0.5)) if len(scores) \
            else "none"
        print(f"{lang}: {len(scores)} of {len(own)} own articles identified as {lang} (their probability: "
              f"{quantiles}); {len(false)} of {len(others)} other articles identified as {lang}; threshold keeping "
              f"{KEEP:.0%} of its own {threshold:.3f}, letting {let_through} of those through")


if __name__ == "__main__":
    main()
