"""Benchmark of a run of several languages: `pipeline run --lang hu,fi,el` against the three one-language runs in
sequence (`--lang hu`, `--lang fi`, `--lang el`), each in a fresh work directory, on the same dumps and settings.

The three-language run does each language's own stages as the one-language runs do, then one vocabulary (trained
on a sample by size^alpha of at most the largest language's words), one shard stage (which also counts every
document's WordPiece tokens) and one hdf5 stage over the mixed shards; the one-language runs each train their own
vocabulary and make their own shards and HDF5 files. Goal: no slower, peak memory no higher than the largest
one-language run's. Figures: wall and CPU seconds of each command's process tree (RUSAGE_CHILDREN), peak RSS of its
main process, largest worker and whole tree (bench/scale.py's TreeMonitor, polled every 0.1 s), the machine's load.

Dumps: generated (`pipeline sample-dump --lang hu|fi|el`: Latin, Latin, Greek), hu `--articles`, fi a third of
it, el a tenth; or, with --dev, the development dumps of ../shared/data/wiki (huwiki, fatwiki, the English excerpt).

    .venv/bin/python bench/multilingual.py [--articles 3000] [--workers 2] [--dev] [--mix-set shard.num_shards=70]
    .venv/bin/python bench/multilingual.py --smoke   # 60 articles, a small vocabulary, seconds
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import ROOT, measure  # noqa: E402  (bench/scale.py: a command's time and peak memory)

DEV = ROOT.parent / "shared" / "data" / "wiki"
DEV_DUMPS = {"hu": "huwiki-20240920-pages-articles-multistream.xml.bz2",
             "fat": "fatwiki-20240920-pages-articles-multistream.xml.bz2", "en": "enwiki-10k.xml.bz2"}
SHARE = {"hu": 1, "fi": 1 / 3, "el": 1 / 10}  # each generated language's articles, as a share of --articles


def dumps(args, directory: Path) -> dict[str, Path]:
    if args.dev:
        shared = next((d for d in (DEV, ROOT.parent.parent / "shared" / "data" / "wiki") if d.is_dir()), DEV)
        missing = [name for name in DEV_DUMPS.values() if not (shared / name).is_file()]
        if missing:
            raise SystemExit(f"error: {shared / missing[0]}: not found (--dev reads the development dumps)")
        return {lang: shared / name for lang, name in DEV_DUMPS.items()}
    from pipeline.tools.sample_dump import write_sample_dump

    return {lang: write_sample_dump(directory / lang, max(10, round(args.articles * share)), 1, language=lang)
            for lang, share in SHARE.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", type=int, default=3000, help="articles of the generated hu dump")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--dev", action="store_true", help="the development dumps instead of generated ones")
    parser.add_argument("--mix-set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                        help="a setting of the run of several languages only, e.g. shard.num_shards=70")
    parser.add_argument("--smoke", action="store_true", help="a small run: the script works, figures mean little")
    args = parser.parse_args()
    if args.smoke:
        args.articles, args.vocab_size, args.dev = 60, 2000, False
    settings = ["--set", f"vocab.vocab_size={args.vocab_size}", "--workers", str(args.workers), "--quiet"]
    if args.smoke:
        settings += ["--set", "hdf5.variants=[{max_seq_length: 128, max_predictions_per_seq: 20}]",
                     "--set", "shard.num_shards=4", "--set", "hdf5.dupe_factor=2"]
    with tempfile.TemporaryDirectory(prefix="bench-multilingual-") as tmp:
        tmp = Path(tmp)
        found = dumps(args, tmp / "dumps")
        pipeline = [sys.executable, "-m", "pipeline.cli", "run"]
        rows = {}
        with open(tmp / "log.txt", "w") as log:
            for lang, dump in found.items():
                rows[f"--lang {lang}"] = measure([*pipeline, "--lang", lang, "--dump", str(dump), "--workdir",
                                                  str(tmp / "one"), *settings], log)
            flags = [f for lang, dump in found.items() for f in ("--dump", f"{lang}={dump}")]
            rows[f"--lang {','.join(found)}"] = measure([*pipeline, "--lang", ",".join(found), *flags, "--workdir",
                                                         str(tmp / "mix"), *settings,
                                                         *(f for kv in args.mix_set for f in ("--set", kv))], log)
    print(f"bench/multilingual.py: {'generated' if not args.dev else 'development'} dumps "
          f"({', '.join(f'{lang} {path.name}' for lang, path in found.items())}), --workers {args.workers}, "
          f"vocab {args.vocab_size}{''.join(f', mix {kv}' for kv in args.mix_set)}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"{'command':<22} {'wall s':>8} {'CPU s':>8} {'main MiB':>9} {'worker MiB':>11} {'tree MiB':>9} {'load':>5}")
    for name, r in rows.items():
        print(f"{name:<22} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['main_mib']:>9} {r['worker_mib']:>11} "
              f"{r['tree_mib']:>9} {r['load']:>5}")
    *ones, mixed = rows.values()
    print(f"several / one-language runs in sequence: wall {mixed['wall_s'] / sum(r['wall_s'] for r in ones):.2f}, "
          f"CPU {mixed['cpu_s'] / sum(r['cpu_s'] for r in ones):.2f}; peak tree RSS / the largest one-language "
          f"run's: {mixed['tree_mib'] / max(r['tree_mib'] for r in ones):.2f}, main process "
          f"{mixed['main_mib'] / max(r['main_mib'] for r in ones):.2f}")


if __name__ == "__main__":
    main()
