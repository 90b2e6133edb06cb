"""Near-duplicate removal: the `dedup` stage against datatrove's MinHash pipeline, side by side on one generated
web-like corpus, scaled.

The corpus (generated here, seeded): documents of Zipf-distributed words (median ~300), each from one of 300
"sites" whose pages share a boilerplate header and footer; a quarter of them have copies elsewhere in the corpus,
exact ones and near ones with blocks of words replaced (so their word 5-gram Jaccard spreads from ~0.2 to 1; the
bench computes each planted pair's Jaccard, over 64-bit hashes of the 5-grams). It is written twice in the same
order: as the filter stage's parts (2,000 documents each) for ours, and as JSONL files (one per part) for datatrove.

Both run on one core with the same shingles (word 5-grams: datatrove gets a whitespace word tokenizer, and the
text holds only lowercase letters, spaces and sentence punctuation, which both normalise away), 14 bands x 8
rows: datatrove's four steps (signatures, buckets, cluster, filter) with 64-bit xxhash, each step in its own
process (one task per part, 14 bucket tasks, run one at a time); ours as the stage in one process (`--workers 1`),
with `partition_mib` 4 (`--partition-mib`): the default 256 MiB holds ~8 million bucket records, a corpus of
~550,000 documents, in one partition, so at the bench's sizes the partitions would not show.
Printed per scale: documents per CPU-second (of the steps' own work, imports left out) and per wall second for
signatures (datatrove step 1 / our pass 1), clustering (steps 2-3 / passes 2-4) and end to end (with writing
the kept documents), peak RSS (VmHWM of the largest of the processes), and ours's peak RSS per pass's span with
the duplicates removed, and how much clustering's peak grows a duplicate; then, at the smallest scale, per Jaccard
level the share of planted pairs each merged, with the S-curve's prediction, and the pairs the two decide
differently (merged or not) by the pair's Jaccard: outside the band where LSH decides at random (S-curve between
1% and 99%: 0.40 to 0.88) the two must agree. `--corpus DIR...` runs on filter-format directories instead (e.g.
the filter output of runs on a generated corpus at growing sizes): without planted pairs, the pairs either tool
put in one cluster that the other does not are classified by their Jaccard, computed here.
`--sample-corpus` runs on the generated web corpus of `pipeline sample-corpus` (--documents pages x each factor),
each through `pipeline run --lang hu --to filter` first (its web rules and long articles cut into pieces): then,
per scale, the share of its planted copies (truth.json: exact copies, near copies at Jaccard 1.0 down to 0.3)
each tool merged, by the copy's planted level, beside the Jaccard of the two texts the filter left and the
S-curve's prediction for it (`--truth` gives the truth.json of each --corpus directory's sample corpus).
Our stage runs twice at the smallest scale: with min_jaccard 0.6 (the default) and null (datatrove's rule).

Last, what the confirmation by estimated Jaccard costs and gains: `--level-pairs` pairs planted at each word
5-gram Jaccard of 0.3, 0.5, 0.6, 0.7, 0.8, 0.9 and 1.0 (200 uniformly drawn words, a copy with one block of
words replaced), and the share of each level our stage merges with min_jaccard null, 0.6, 0.65 and 0.7.

    .venv/bin/python bench/dedup.py [--documents 10000] [--factors 1,2,4,8] [--level-pairs 1000] \\
        [--datatrove-python PATH]
    .venv/bin/python bench/dedup.py --corpus W1/L/filter W2/L/filter ... [--truth T1 T2 ...] \\
        [--datatrove-python PATH]
    .venv/bin/python bench/dedup.py --sample-corpus [--documents 10000] [--factors 1,2,4,8] [--datatrove-python PATH]
    .venv/bin/python bench/dedup.py --smoke   # 600 documents, 1x and 2x, and a sample corpus of 200 pages, ours
                                              # only; 30 pairs a level

datatrove goes in a virtual environment of its own (it pins numpy and other packages): `python -m venv DIR &&
DIR/bin/pip install datatrove regex tokenizers orjson 'xxhash<4'`, then `--datatrove-python DIR/bin/python`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PART_DOCUMENTS = 2000
BANDS, ROWS, NGRAM = 14, 8, 5
BAND = (0.40, 0.88)  # Jaccard where the 14 x 8 S-curve is between 1% and 99%
LEVELS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
SHINGLE_HASH_POWERS = np.uint64(0x9E3779B97F4A7C15) ** np.arange(NGRAM, dtype=np.uint64)
CONFIRMATIONS = ("null", "0.6", "0.65", "0.7")  # min_jaccard values measured on the planted levels

DATATROVE_STEP = r"""
import json, re, sys, time
from pathlib import Path
from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                              MinhashDedupFilter, MinhashDedupSignature)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers.jsonl import JsonlWriter
from datatrove.utils.hashing import HashConfig
from datatrove.utils.word_tokenizers import WordTokenizer

class Whitespace(WordTokenizer):
    def word_tokenize(self, text): return text.split()
    def sent_tokenize(self, text): return [text]
    def span_tokenize(self, text): return [(0, len(text))]

step, corpus, work, parts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, hash_config=HashConfig(precision=64))
pipelines = {
    "signatures": ([JsonlReader(corpus), MinhashDedupSignature(f"{work}/signatures", config, language=Whitespace())],
                   parts),
    "buckets": ([MinhashDedupBuckets(f"{work}/signatures", f"{work}/buckets", config=config)], 14),
    "cluster": ([MinhashDedupCluster(f"{work}/buckets", f"{work}/remove", config=config, save_cluster_id=True)], 1),
    "filter": ([JsonlReader(corpus), MinhashDedupFilter(f"{work}/remove"), JsonlWriter(f"{work}/kept")], parts),
}
pipeline, tasks = pipelines[step]
wall, cpu = time.perf_counter(), time.process_time()  # workers=1: the tasks run in this process
LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=f"{work}/logs/{step}").run()
peak_kib = int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())[1])
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "rss_mib": peak_kib / 1024}))
"""


# --- the corpus -------------------------------------------------------------------------------------------

def generate(directory: Path, documents: int, seed: int = 0) -> list[tuple[int, int, float]]:
    """Write the corpus (directory/filter, directory/jsonl); return the planted pairs (original's index, copy's
    index, their word 5-gram Jaccard), indices in corpus order. Documents are held as uint16 word arrays (100x,
    a million documents, in ~1 GB and ~13 minutes)."""
    from pipeline.text_files import DocumentRecord, records_path, write_document, write_record

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = ["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(50000)]
    zipf = np.cumsum(1 / np.arange(1, len(vocabulary) + 1))

    def words(n: int) -> np.ndarray:
        return np.searchsorted(zipf, rng.random(n) * zipf[-1]).astype(np.uint16)

    sites = [(words(int(rng.integers(10, 40))), words(int(rng.integers(10, 40)))) for _ in range(300)]
    bodies: list[np.ndarray] = []
    origin: list[int] = []  # the index in `bodies` of the original each document copies (itself if none)
    while len(bodies) < documents:
        header, footer = sites[int(rng.integers(len(sites)))]
        body = np.concatenate([header, words(int(np.clip(rng.lognormal(np.log(300), 0.6), 40, 3000))), footer])
        original = len(bodies)
        bodies.append(body)
        origin.append(original)
        if rng.random() < 0.25:
            for _ in range(min(int(rng.geometric(0.5)), documents - len(bodies))):
                copy = body
                if rng.random() >= 0.2:  # a near copy: 1-3 blocks of up to a fifth of the words replaced
                    for _ in range(int(rng.integers(1, 4))):
                        size = int(rng.integers(0, max(1, len(copy) // 5)))
                        start = int(rng.integers(0, len(copy) - size + 1))
                        copy = np.concatenate([copy[:start], words(size), copy[start + size:]])
                bodies.append(copy)
                origin.append(original)
    order = rng.permutation(len(bodies))
    position = np.empty(len(bodies), dtype=np.int64)
    position[order] = np.arange(len(bodies))
    pairs = [(int(position[origin[i]]), int(position[i]), _jaccard(bodies[origin[i]], bodies[i]))
             for i in range(len(bodies)) if origin[i] != i]

    def text(body: np.ndarray) -> list[str]:
        spelled = list(map(vocabulary.__getitem__, body.tolist()))
        return [" ".join(spelled[i:i + 12]).capitalize() + "." for i in range(0, len(spelled), 12)]

    for sub in ("filter", "jsonl"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    for part, lo in enumerate(range(0, len(bodies), PART_DOCUMENTS)):
        text_path = directory / "filter" / f"part-{part:05d}.txt"
        with open(text_path, "w", encoding="utf-8") as out, \
                open(records_path(text_path), "w", encoding="utf-8") as records, \
                open(directory / "jsonl" / f"part-{part:05d}.jsonl", "w", encoding="utf-8") as jsonl:
            for index in range(lo, min(lo + PART_DOCUMENTS, len(bodies))):
                sentences = text(bodies[order[index]])
                write_document(out, sentences)
                write_record(records, DocumentRecord("web", str(index)))
                jsonl.write(json.dumps({"id": str(index), "text": " ".join(sentences)}) + "\n")
    return pairs


def _shingles(words) -> np.ndarray:
    """The distinct word 5-grams of a document, each as a 64-bit polynomial hash of its words (sorting them as
    10-byte strings took most of the generator's time; a collision among a few hundred is ~1e-15 likely)."""
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(words, dtype=np.uint64), NGRAM)
    return np.unique(windows @ SHINGLE_HASH_POWERS)


def _jaccard(a, b) -> float:
    x, y = _shingles(a), _shingles(b)
    shared = len(np.intersect1d(x, y, assume_unique=True))
    return shared / (len(x) + len(y) - shared)


def plant_levels(directory: Path, pairs: int, seed: int = 1) -> dict[float, list[tuple[int, int, float]]]:
    """Write `pairs` pairs at each Jaccard level as the filter's parts (each document of a pair in a random part
    of 4); return per level (position, position of the copy, measured Jaccard)."""
    from pipeline.text_files import DocumentRecord, records_path, write_document, write_record

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = ["".join(rng.choice(letters, rng.integers(3, 10))) for _ in range(30000)]
    length, shingles = 200, 200 - NGRAM + 1
    documents, planted = [], {}
    for level in LEVELS:
        shared = round(2 * level * shingles / (1 + level))
        block = shingles - shared - (NGRAM - 1)  # a block of b words replaced takes b + 4 shingles away
        for _ in range(pairs):
            base = rng.integers(len(vocabulary), size=length).tolist()
            copy = list(base)
            if level < 1.0:
                start = int(rng.integers(NGRAM - 1, length - block - NGRAM + 2))
                copy[start:start + block] = rng.integers(len(vocabulary), size=block).tolist()
            planted.setdefault(level, []).append((len(documents), len(documents) + 1, _jaccard(base, copy)))
            documents += [base, copy]
    part_of = rng.integers(4, size=len(documents))
    position = np.empty(len(documents), dtype=np.int64)  # in the corpus: part by part
    directory.mkdir(parents=True)
    written = 0
    for part in range(4):
        text_path = directory / f"part-{part:05d}.txt"
        with open(text_path, "w", encoding="utf-8") as out, \
                open(records_path(text_path), "w", encoding="utf-8") as records:
            for n in np.flatnonzero(part_of == part).tolist():
                write_document(out, [" ".join(vocabulary[w] for w in documents[n])])
                write_record(records, DocumentRecord("web", str(n)))
                position[n] = written
                written += 1
    return {level: [(int(position[a]), int(position[b]), j) for a, b, j in pairs_at]
            for level, pairs_at in planted.items()}


# --- ours, in a child process --------------------------------------------------------------------------------

class _PhaseTimes:
    """An executor that records when each pass starts (the passes are its map calls), and the peak RSS so far at
    the start of clustering and of writing, where it starts the peak anew."""
    PEAK_RESETS = ("_partition_pairs", "_write_part")

    def __init__(self):
        from pipeline.executors.local import LocalExecutor

        self.inner = LocalExecutor(1)
        self.name, self.workers = "local", 1
        self.starts: list[tuple[str, float, float]] = []
        self.peaks: dict[str, float] = {}  # pass -> the peak RSS before it started

    def map(self, fn, tasks):
        self.starts.append((fn.__name__, time.perf_counter(), time.process_time()))
        if fn.__name__ in self.PEAK_RESETS:
            self.peaks[fn.__name__] = peak_rss_mib()
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
        return self.inner.map(fn, tasks)


def run_ours_child(corpus: Path, work: Path, min_jaccard: str, partition_mib: int) -> dict:
    import logging

    from pipeline.stages import StageContext
    from pipeline.stages.dedup.stage import DedupConfig, run
    from pipeline.text_files import iter_records

    out = work / "out"
    out.mkdir(parents=True)
    times = _PhaseTimes()
    ctx = StageContext(lang="xx", out_dir=out, inputs={"filter": corpus}, cache_dir=work / "cache", workers=1,
                       quiet=True, log=logging.getLogger("bench"), executor=times)
    wall, cpu = time.perf_counter(), time.process_time()
    run(DedupConfig(min_jaccard=None if min_jaccard == "null" else float(min_jaccard), partition_mib=partition_mib),
        ctx)
    end = (time.perf_counter(), time.process_time())
    starts = {name: (w, c) for name, w, c in reversed(times.starts)}
    marks = [(wall, cpu), starts["_partition_pairs"], starts["_write_part"], end]
    peaks = [times.peaks["_partition_pairs"], times.peaks["_write_part"], peak_rss_mib()]
    phases = {name: {"wall": marks[i + 1][0] - marks[i][0], "cpu": marks[i + 1][1] - marks[i][1], "rss_mib": peaks[i]}
              for i, name in enumerate(("signatures", "clustering", "writing"))}
    position = {_identity(record.identity()): n for n, record in enumerate(
        record for part in sorted(corpus.glob("part-*.txt")) for record in iter_records(part))}
    clusters = {}  # position in the corpus -> position of its cluster's kept copy
    removed_lines = (out / "removed.jsonl").read_text(encoding="utf-8").splitlines()
    for line in removed_lines:
        removed = json.loads(line)
        kept = position[_identity(removed, "kept_")]
        clusters[position[_identity(removed)]] = clusters[kept] = kept
    return {"phases": phases, "rss_mib": max(peaks), "duplicates": len(removed_lines), "cluster_of": clusters}


def _identity(line: dict, prefix: str = "") -> tuple:
    """(source, id, piece or None) of a record's identity or a removed.jsonl line (prefix "kept_": its kept copy)."""
    return line[prefix + "source"], line[prefix + "id"], line.get(prefix + "piece")


def peak_rss_mib() -> float:
    """This process's peak RSS since it started (VmHWM: ru_maxrss would carry the parent's peak over the exec)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def run_ours(corpus: Path, work: Path, partition_mib: int, min_jaccard: str = "0.6") -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", str(corpus), str(work), min_jaccard,
                           str(partition_mib)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        sys.exit(f"our stage failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    result["cluster_of"] = {int(k): v for k, v in result["cluster_of"].items()}
    return result


# --- datatrove, one child process per step -------------------------------------------------------------

def run_datatrove(python: str, corpus: Path, work: Path) -> dict:
    parts = len(list((corpus / "jsonl").glob("*.jsonl")))
    steps = {}
    for step in ("signatures", "buckets", "cluster", "filter"):
        done = subprocess.run([python, "-c", DATATROVE_STEP, step, str(corpus / "jsonl"), str(work), str(parts)],
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"datatrove {step} failed:\n{done.stderr[-3000:]}")
        steps[step] = json.loads(done.stdout.strip().splitlines()[-1])
    phases = {"signatures": steps["signatures"],
              "clustering": {k: steps["buckets"][k] + steps["cluster"][k] for k in ("wall", "cpu")},
              "writing": steps["filter"]}
    return {"phases": phases, "rss_mib": max(s["rss_mib"] for s in steps.values()),
            "cluster_of": _datatrove_clusters(work / "remove", corpus / "jsonl")}


def _datatrove_clusters(directory: Path, jsonl: Path) -> dict[int, int]:
    """Position in the corpus -> cluster id, from the cluster step's `.clusters` files (one per part: (index in
    the part, cluster))."""
    sizes = [sum(1 for _ in open(path, "rb")) for path in sorted(jsonl.glob("*.jsonl"))]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    clusters = {}
    for path in sorted(directory.glob("*.clusters")):
        part = int(path.name.split(".")[0])
        pairs = np.fromfile(path, dtype="<u4").reshape(-1, 2)
        for doc, cluster in pairs.tolist():
            clusters[int(offsets[part]) + doc] = cluster
    return clusters


def export_jsonl(filter_dir: Path, jsonl: Path) -> int:
    """datatrove's input from a filter-format directory: one JSONL file per part, the same documents in the same
    order; returns the number of documents."""
    from pipeline.text_files import iter_documents

    jsonl.mkdir(parents=True)
    count = 0
    for part in sorted(filter_dir.glob("part-*.txt")):
        with open(jsonl / f"{part.stem}.jsonl", "w", encoding="utf-8") as out:
            for sentences in iter_documents(part):
                out.write(json.dumps({"id": str(count), "text": " ".join(sentences)}, ensure_ascii=False) + "\n")
                count += 1
    return count


def disagreements(results: dict, filter_dir: Path, tools: tuple[str, str]) -> tuple[list[tuple[float, bool]], int]:
    """The pairs (a document and its cluster's first one, in either tool) the two tools decide differently:
    (their word 5-gram Jaccard, whether the first tool merged them), and how many pairs there are. Jaccard over
    our tokens (casefolded words, punctuation dropped, numbers 0), as our shingles see them."""
    pairs = set()
    for tool in tools:
        first = {}
        for doc, cluster in sorted(results[tool]["cluster_of"].items()):
            if first.setdefault(cluster, doc) != doc:
                pairs.add((first[cluster], doc))
    decided = {tool: results[tool]["cluster_of"] for tool in tools}
    differ = [(a, b) for a, b in sorted(pairs)
              if (a in decided[tools[0]] and decided[tools[0]][a] == decided[tools[0]].get(b))
              != (a in decided[tools[1]] and decided[tools[1]][a] == decided[tools[1]].get(b))]
    similarity = pair_jaccards(filter_dir, differ)
    found = []
    for (a, b), jaccard in zip(differ, similarity):
        merged_by_first = a in decided[tools[0]] and decided[tools[0]][a] == decided[tools[0]].get(b)
        found.append((jaccard, merged_by_first))
    return found, len(pairs)


def pair_jaccards(filter_dir: Path, pairs: list[tuple[int, int]]) -> list[float]:
    """The word 5-gram Jaccard of each pair of documents (positions in the corpus), over our tokens (casefolded
    words, punctuation dropped, numbers 0), as our shingles see them."""
    from pipeline.stages.dedup.minhash import Shingler
    from pipeline.text_files import iter_documents

    wanted = {doc for pair in pairs for doc in pair}
    texts = {n: " ".join(sentences) for n, sentences in enumerate(
        doc for part in sorted(filter_dir.glob("part-*.txt")) for doc in iter_documents(part)) if n in wanted}
    shingler = Shingler(NGRAM, BANDS, ROWS, 1, False)

    def shingle_set(text: str) -> set:
        tokens = shingler.tokens([text])[0].tolist()
        return {tuple(tokens[i:i + NGRAM]) for i in range(max(1, len(tokens) - NGRAM + 1))}

    sets = {n: shingle_set(text) for n, text in texts.items()}
    return [len(sets[a] & sets[b]) / len(sets[a] | sets[b]) for a, b in pairs]


# --- comparison ----------------------------------------------------------------------------------------

def merged(result: dict, pairs: list[tuple[int, int, float]]) -> np.ndarray:
    cluster_of = result["cluster_of"]
    return np.array([a in cluster_of and cluster_of.get(a) == cluster_of.get(b) for a, b, *_ in pairs], dtype=bool)


def s_curve(j: np.ndarray) -> np.ndarray:
    return 1 - (1 - j ** ROWS) ** BANDS


def print_speed(rows: list[tuple[str, int, str, dict]]) -> None:
    print("\n| corpus | documents | tool | signatures docs/CPU-s | clustering docs/CPU-s | end to end docs/CPU-s "
          "| end to end docs/s (wall) | peak RSS |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, documents, tool, result in rows:
        phases = result["phases"]
        cpu = sum(p["cpu"] for p in phases.values())
        wall = sum(p["wall"] for p in phases.values())
        print(f"| {label} | {documents:,} | {tool} | {documents / phases['signatures']['cpu']:,.0f} | "
              f"{documents / phases['clustering']['cpu']:,.0f} | {documents / cpu:,.0f} | {documents / wall:,.0f} | "
              f"{result['rss_mib']:,.0f} MiB |")
    first = rows[0][0]
    by_tool = {tool: result for label, _, tool, result in rows if label == first}
    if "datatrove" in by_tool:
        ours, theirs = (by_tool[t]["phases"] for t in ("ours", "datatrove"))
        ratio = {name: theirs[name]["cpu"] / ours[name]["cpu"] for name in ours}
        total = sum(p["cpu"] for p in theirs.values()) / sum(p["cpu"] for p in ours.values())
        print(f"\nours / datatrove, documents per CPU-second, {first}: signatures {ratio['signatures']:.2f}x, "
              f"clustering {ratio['clustering']:.2f}x, writing {ratio['writing']:.2f}x, end to end {total:.2f}x")
    for tool in dict.fromkeys(tool for _, _, tool, _ in rows):
        mine = [(label, result["rss_mib"]) for label, _, t, result in rows if t == tool]
        print(f"{tool}: peak RSS {mine[-1][1]:.0f} MiB at {mine[-1][0]} / {mine[0][1]:.0f} MiB at {mine[0][0]} = "
              f"{mine[-1][1] / mine[0][1]:.2f}")
    ours = [(label, result) for label, _, tool, result in rows if tool == "ours"]
    print("ours, peak RSS of each pass's span (signatures: pass 1; clustering: passes 2-4, the main process's "
          "pairs and clusters; writing: pass 5) by duplicates removed: "
          + "; ".join(f"{label} {r['duplicates']:,}: " + ", ".join(f"{name} {p['rss_mib']:.1f}"
                                                                  for name, p in r["phases"].items()) + " MiB"
                      for label, r in ours))
    (first_label, first), (last_label, last) = ours[0], ours[-1]
    if last["duplicates"] > first["duplicates"]:
        growth = (last["phases"]["clustering"]["rss_mib"] - first["phases"]["clustering"]["rss_mib"]) * 2 ** 20
        print(f"ours, clustering's peak RSS from {first_label} to {last_label}: "
              f"{growth / (last['duplicates'] - first['duplicates']):,.0f} bytes a duplicate more")


JACCARD_BINS = [(0.0, 0.3), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.88), (0.88, 1.0),
                (1.0, 1.01)]


def print_planted(label: str, pairs: list[tuple[int, int, float]], results: dict) -> None:
    """Per Jaccard bin the share of planted pairs each tool merged; the pairs they decide differently; merges
    across planted families."""
    jaccards = np.array([j for _, _, j in pairs])
    decisions = {tool: merged(result, pairs) for tool, result in results.items()}
    print(f"\nplanted pairs, {label}: share merged by Jaccard of the pair")
    print("| Jaccard | pairs | S-curve | " + " | ".join(decisions) + " |")
    print("| --- | ---: | ---: |" + " ---: |" * len(decisions))
    for lo, hi in JACCARD_BINS:
        inside = (jaccards >= lo) & (jaccards < hi)
        if inside.any():
            name = "1.0 (exact)" if lo == 1.0 else f"{lo:.2f}-{hi:.2f}"
            print(f"| {name} | {inside.sum():,} | {s_curve(jaccards[inside]).mean():.3f} | "
                  + " | ".join(f"{d[inside].mean():.3f}" for d in decisions.values()) + " |")
    for tool in ("ours", "ours, min_jaccard null"):
        if "datatrove" in decisions:
            differ = decisions[tool] != decisions["datatrove"]
            _print_differences(tool, [(j, bool(mine)) for j, mine, d in zip(jaccards, decisions[tool], differ) if d],
                               len(jaccards), "planted pairs")
    print_strays(pairs, results)


def print_strays(pairs: list[tuple], results: dict) -> None:
    """Per tool, the documents in clusters and those whose cluster's first document is not of their planted family
    (an original and its copies: `pairs` of (original's position, copy's position, ...)): merges no planted
    relation explains."""
    family = {}
    for a, b, *_ in pairs:
        family[b] = family.setdefault(a, a)
    for tool, result in results.items():
        first = {}
        for doc, cluster in sorted(result["cluster_of"].items()):
            first.setdefault(cluster, doc)
        stray = sum(family.get(doc, doc) != family.get(first[cluster], first[cluster])
                    for doc, cluster in result["cluster_of"].items())
        print(f"{tool}: {len(result['cluster_of']):,} documents in clusters, {stray} outside their planted family")


# --- a sample corpus's planted copies (`pipeline sample-corpus`'s truth.json) -------------------------------------

def sample_truth(truth: Path, filter_dir: Path) -> tuple[dict[str, list[tuple[int, int, float, float]]],
                                                         dict[str, int]]:
    """The copies `pipeline sample-corpus` planted, by kind ("exact copy", "near copy 0.9", ...): the pairs whose
    page and original both left the filter whole, (original's position, copy's position, the Jaccard planted, the
    Jaccard of the filtered texts); and per kind the pairs the filter dropped a page of. Pages are found by their
    own id (the records' record_id)."""
    from pipeline.text_files import PIECE, RECORD_ID, iter_records

    position, duplicate_ids = {}, set()
    for n, record in enumerate(r for part in sorted(filter_dir.glob("part-*.txt")) for r in iter_records(part)):
        if PIECE not in record.extra:
            page_id = record.extra.get(RECORD_ID, record.id)
            duplicate_ids |= {page_id} & position.keys()
            position[page_id] = n
    if duplicate_ids:
        sys.exit(f"{filter_dir}: ids of several sources, e.g. {min(duplicate_ids)}: which is the sample corpus's?")
    pages = json.loads(truth.read_text(encoding="utf-8"))["pages"]
    planted, dropped = {}, {}
    for page in pages:
        if "copy_of" not in page:
            continue
        kind = "exact copy" if page["kind"] == "exact_copy" else f"near copy {page['level']:.1f}"
        planted.setdefault(kind, [])
        dropped.setdefault(kind, 0)
        if page["id"] in position and page["copy_of"] in position:
            planted[kind].append((position[page["copy_of"]], position[page["id"]], page.get("jaccard", 1.0)))
        else:
            dropped[kind] += 1
    in_order = sorted(planted, key=lambda kind: (kind == "exact copy", kind), reverse=True)  # near: 1.0 to 0.3
    filtered = iter(pair_jaccards(filter_dir, [pair[:2] for kind in in_order for pair in planted[kind]]))
    return {kind: [(a, b, j, next(filtered)) for a, b, j in planted[kind]] for kind in in_order}, dropped


def print_sample_truth(label: str, planted: dict[str, list[tuple[int, int, float, float]]], dropped: dict[str, int],
                       results: dict) -> None:
    """Per kind of planted copy the share of its pairs each tool merged (recall), beside the S-curve's prediction
    for the Jaccard of the filtered texts; then merges outside the planted families."""
    print(f"\nthe sample corpus's planted copies, {label}: share merged (pairs whose page and original the filter "
          "kept whole)")
    print("| planted | pairs | pairs the filter dropped a page of | Jaccard planted | Jaccard after the filter | "
          "S-curve | " + " | ".join(results) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(results))
    for kind, pairs in planted.items():
        if not pairs:
            print(f"| {kind} | 0 | {dropped[kind]:,} |" + " |" * (3 + len(results)))
            continue
        planted_j, filtered_j = (np.array([p[k] for p in pairs]) for k in (2, 3))
        print(f"| {kind} | {len(pairs):,} | {dropped[kind]:,} | {planted_j.mean():.3f} | {filtered_j.mean():.3f} | "
              f"{s_curve(filtered_j).mean():.3f} | "
              + " | ".join(f"{merged(result, pairs).mean():.3f}" for result in results.values()) + " |")
    print_strays([pair for pairs in planted.values() for pair in pairs], results)


def _print_differences(tool: str, differ: list[tuple[float, bool]], total: int, what: str) -> None:
    """`differ`: (Jaccard, merged by `tool`) of each pair `tool` and datatrove decide differently."""
    jaccards = np.array([j for j, _ in differ])
    outside = (jaccards < BAND[0]) | (jaccards >= BAND[1])
    print(f"{tool} vs datatrove: {outside.sum()} {what} outside Jaccard {BAND[0]}-{BAND[1]} decided differently, "
          f"{(~outside).sum()} inside (of {total:,})")
    for lo, hi in JACCARD_BINS:
        inside = [mine for j, mine in differ if lo <= j < hi]
        if inside:
            print(f"  Jaccard {lo:.2f}-{hi:.2f}: {len(inside)} differ ({sum(inside)} merged by {tool} only, "
                  f"{len(inside) - sum(inside)} by datatrove only)")


def print_levels(work: Path, pairs: int, confirmations: tuple[str, ...], partition_mib: int) -> None:
    planted_levels = plant_levels(work / "levels", pairs)
    merged_at = {mj: run_ours(work / "levels", work / f"levels-{mj}", partition_mib, mj) for mj in confirmations}
    print(f"\nshare of {pairs:,} planted pairs a level merged, by min_jaccard")
    print("| Jaccard (measured) | S-curve | " + " | ".join(f"min_jaccard {mj}" for mj in confirmations) + " |")
    print("| --- | ---: |" + " ---: |" * len(confirmations))
    for pairs_at in planted_levels.values():
        jaccards = np.array([j for _, _, j in pairs_at])
        print(f"| {jaccards.mean():.3f} | {s_curve(jaccards).mean():.3f} | "
              + " | ".join(f"{merged(merged_at[mj], pairs_at).mean():.3f}" for mj in confirmations) + " |")


def sample_corpora(work: Path, pages: int, factors: list[int]) -> list[tuple[str, Path, Path]]:
    """`pipeline sample-corpus` of `pages` x each factor pages, each through `pipeline run --lang hu --to filter`
    (its web rules; long articles cut into pieces): (label, the filter's directory, truth.json) of each."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    corpora = []
    for factor in factors:
        here = work / f"sample-{factor}x"
        pages_dir = subprocess.run([sys.executable, "-m", "pipeline.cli", "sample-corpus", str(here / "corpus"),
                                    "--docs", str(pages * factor), "--files", "4", "-q"], env=env, check=True,
                                   capture_output=True, text=True).stdout.strip()
        subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--workdir", str(here / "run"),
                        "--corpus", f"web={pages_dir}", "--to", "filter", "--quiet"], env=env, check=True, cwd=work)
        corpora.append((f"{factor}x", here / "run" / "hu" / "filter", here / "corpus" / "truth.json"))
    return corpora


def compare(corpora: list[tuple], work: Path, datatrove_python: str | None, partition_mib: int) -> None:
    """Both tools on each corpus, (label, the filter-format directory or the documents of a corpus to generate,
    truth.json or None); print their speed and memory, then how they decide: on the first corpus the planted
    pairs of a generated corpus, or the pairs the two decide differently; on every corpus with a truth.json the
    share of its planted copies merged."""
    rows, first, truths = [], None, []
    for n, (label, corpus, truth) in enumerate(corpora):
        here = work / f"{n}-{label}"
        if isinstance(corpus, Path):
            filter_dir, pairs = corpus, None
            documents = export_jsonl(corpus, here / "jsonl")
        else:
            filter_dir, pairs = here / "filter", generate(here, corpus)
            documents = sum(1 for path in (here / "jsonl").glob("*.jsonl") for _ in open(path, "rb"))
        results = {"ours": run_ours(filter_dir, here / "ours", partition_mib)}
        if datatrove_python:
            results["datatrove"] = run_datatrove(datatrove_python, here, here / "datatrove")
        rows += [(label, documents, tool, result) for tool, result in results.items()]
        if first is None:
            results["ours, min_jaccard null"] = run_ours(filter_dir, here / "ours-null", partition_mib, "null")
            first = (label, filter_dir, pairs, results)
        if truth:
            truths.append((label, *sample_truth(truth, filter_dir), results))
    print_speed(rows)
    label, filter_dir, pairs, results = first
    if pairs is not None:
        print_planted(label, pairs, results)
    elif "datatrove" in results:
        print(f"\npairs either tool put in one cluster (a document and its cluster's first), {label}:")
        for tool in ("ours", "ours, min_jaccard null"):
            _print_differences(tool, *disagreements(results, filter_dir, (tool, "datatrove")), "pairs")
    for truth in truths:
        print_sample_truth(*truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10000, help="documents (pages) at 1x")
    parser.add_argument("--factors", default="1,2,4,8")
    parser.add_argument("--corpus", type=Path, nargs="+", help="filter-format directories to run on instead of "
                        "generated corpora (e.g. <workdir>/<lang>/filter of runs on growing corpora)")
    parser.add_argument("--truth", type=Path, nargs="+", help="with --corpus: the truth.json of the sample corpus "
                        "each one's run read (`pipeline sample-corpus`), in the same order")
    parser.add_argument("--sample-corpus", action="store_true", help="the corpora are `pipeline sample-corpus` of "
                        "--documents pages x each factor, through `pipeline run --to filter`, with their truth")
    parser.add_argument("--datatrove-python", default=os.environ.get("DATATROVE_PYTHON"),
                        help="the python of a virtual environment with datatrove (default: $DATATROVE_PYTHON)")
    parser.add_argument("--level-pairs", type=int, default=1000, help="pairs planted at each Jaccard level")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--partition-mib", type=int, default=4,
                        help="our dedup.partition_mib: small, so that the corpora span several partitions")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_ours_child(Path(args.child[0]), Path(args.child[1]), args.child[2],
                                        int(args.child[3]))))
        return
    if args.truth and len(args.truth) != len(args.corpus or []):
        parser.error("--truth needs one truth.json per --corpus directory")
    if args.smoke:
        args.documents, args.factors, args.datatrove_python, args.level_pairs = 600, "1,2", None, 30
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dedup-bench-"))
    factors = [int(f) for f in args.factors.split(",")]
    if args.corpus:
        source = ", ".join(map(str, args.corpus))
        corpora = [(c.parent.parent.name, c, t) for c, t in zip(args.corpus, args.truth or [None] * len(args.corpus))]
    elif args.sample_corpus:
        source = f"the sample corpus of {args.documents:,} pages at 1x, through the filter"
        corpora = sample_corpora(work, args.documents, factors)
    else:
        source = f"{args.documents:,} generated documents at 1x"
        corpora = [(f"{f}x", args.documents * f, None) for f in factors]
    print(f"# {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {source}; our partition_mib "
          f"{args.partition_mib}; datatrove: {args.datatrove_python or 'not run'}", flush=True)
    compare(corpora, work, args.datatrove_python, args.partition_mib)
    if args.smoke:  # the sample corpus's path too
        compare(sample_corpora(work, 200, [1]), work / "sample", None, args.partition_mib)
    print_levels(work, args.level_pairs, CONFIRMATIONS[:2] if args.smoke else CONFIRMATIONS, args.partition_mib)


if __name__ == "__main__":
    main()
