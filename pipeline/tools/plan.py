"""`pipeline plan`: what a run will cost before it starts, predicted from samples of its inputs.

The inputs are sampled, not read whole: the dump by its multistream index (evenly spaced streams of 100 pages,
copied as they are: the sample is a multistream dump of the same kind), each corpus by its read units (evenly
spaced Parquet row groups; the head of each JSON Lines or text file, up to the fraction of its bytes, compressed or
not). Every stage then runs on two samples, SAMPLE_RATIO apart in size, each stage as its own `pipeline stage`
process (pipeline/tools/measure.py), and each figure is fitted as a + b * x against the sampled fraction x of the
inputs and read at x = 1: wall-clock cost is not fitted but built from CPU, as the main process's own CPU (serial:
work no worker shares) plus the workers' CPU shared by N cores. Memory is the larger sample's (per process, it does
not grow with the corpus: docs/performance.md, Rehearsal), but the vocab stage's: sentencepiece holds the sentences
it trains on, up to `vocab.input_sentence_size`, and reads the rest without training on them, so its memory and
CPU are fitted against the sentences read and trained on (`_vocab_at_full`; a third run of the stage when the
whole input is over the cap). The peak disk of the run is each stage's transient peak on top of what the earlier
stages left, with `--keep all` or `--keep final` (`peak_disk`).
"""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import json
import lzma
import os
import sys
from pathlib import Path
from typing import IO, Iterable

from wiki2bert_core.errors import ConfigError, DataError
from pipeline.runner import KEPT_BY_FINAL, MANIFEST
from pipeline.stages import stage_by_name
from pipeline.stages.corpus.readers import COMPRESSIONS
from pipeline.tools.measure import directory_bytes, measure

STAGES = ["download", "extract", "corpus", "sentences", "filter", "dedup", "vocab", "shard", "hdf5"]
SAMPLE_RATIO = 4  # the smaller sample is this many times smaller than the larger (--sample-mb)
SAMPLE_WORKERS = 2  # --workers of the sample runs: the main process's CPU alone then is the serial part
CHUNK_BYTES = 1 << 20  # a JSON Lines or text file's sample is read in pieces of this size


@dataclasses.dataclass(frozen=True)
class StageSample:
    """One stage's figures on one sample."""
    wall_s: float
    cpu_s: float
    main_cpu_s: float
    main_rss: int
    worker_rss: int
    disk_bytes: int  # what the stage left in the work directory (outputs, cache)
    output_bytes: int  # its outputs (what --keep final may remove)
    transient_bytes: int  # its peak above what it left
    counts: dict  # the manifest's counts (vocab: the sentences it read)
    settings: dict  # the stage's settings, as its manifest records them


def peak_disk(costs: dict[str, dict[str, int]], keep: str) -> int:
    """The work directory's peak over a run of the stages of `costs` in order ({stage: {disk_bytes,
    transient_bytes, output_bytes}}): each stage's peak on top of what the stages before it left, less (keep
    "final") the outputs dropped once all their readers among these stages are done."""
    order = list(costs)
    readers = {name: [r for r in order if name in stage_by_name(r).inputs] for name in order}
    live, peak = 0, 0
    for i, name in enumerate(order):
        cost = costs[name]
        peak = max(peak, live + cost["disk_bytes"] + cost["transient_bytes"])
        live += cost["disk_bytes"]
        if keep == "final":
            for done in order[:i + 1]:
                its = readers[done]
                if its and done not in KEPT_BY_FINAL and name in its and all(order.index(r) <= i for r in its):
                    live -= costs[done].get("output_bytes", costs[done]["disk_bytes"])
    return peak


# --- sampling the inputs -----------------------------------------------------------------------------------------

def sample_dump(dump: Path, fraction: float, out_dir: Path) -> tuple[Path, int]:
    """A multistream dump of evenly spaced page streams of `dump` (about `fraction` of its bytes) and its index,
    named as the originals, in out_dir; returns (its path, the page streams' bytes it holds)."""
    index = _index_beside(dump)
    with bz2.open(index, "rt", encoding="utf-8") as f:
        offsets = sorted({int(line.split(":", 1)[0]) for line in f if line.strip()})
    size = dump.stat().st_size
    with open(dump, "rb") as f:
        f.seek(offsets[-1])
        tail = _closing_stream(f.read())  # the last page stream, then the closing one
    ends = offsets[1:] + [size - len(tail[1])]
    streams = list(zip(offsets, ends))
    chosen = _evenly(len(streams), fraction)
    out_dir.mkdir(parents=True, exist_ok=True)
    out, out_index = out_dir / dump.name, out_dir / index.name
    kept = 0
    with open(dump, "rb") as src, open(out, "wb") as f, bz2.open(out_index, "wt", encoding="utf-8") as idx, \
            bz2.open(index, "rt", encoding="utf-8") as lines:
        f.write(src.read(offsets[0]))  # the siteinfo stream
        new_offset = {}
        for number in chosen:
            start, end = streams[number]
            src.seek(start)
            new_offset[start] = f.tell()
            f.write(src.read(end - start))
            kept += end - start
        f.write(tail[1])
        for line in lines:
            offset = int(line.split(":", 1)[0])
            if offset in new_offset:
                idx.write(f"{new_offset[offset]}:{line.split(':', 1)[1]}")
    return out, kept


def _index_beside(dump: Path) -> Path:
    name = dump.name
    if "multistream" in name and name.endswith(".xml.bz2"):
        index = dump.with_name(name.replace(".xml.bz2", "-index.txt.bz2"))
        if index.is_file():
            return index
    raise ConfigError(f"--dump {dump}: pipeline plan samples a multistream dump by its index "
                      f"(<name>-multistream-index.txt.bz2 beside it); give the multistream dump")


def _closing_stream(data: bytes) -> tuple[bytes, bytes]:
    """(the last page stream, the closing stream) of the bytes from the last page stream's offset to the end."""
    decompressor = bz2.BZ2Decompressor()
    decompressor.decompress(data)
    rest = decompressor.unused_data
    return data[:len(data) - len(rest)], rest


def _evenly(count: int, fraction: float) -> list[int]:
    """About `fraction` of range(count), evenly spaced (at least one)."""
    wanted = max(1, min(count, round(count * fraction)))
    return sorted({int(i * count / wanted) for i in range(wanted)})


def sample_corpus(name: str, pattern: str, fraction: float, out_dir: Path, setting: str = "auto",
                  text_field: str = "text") -> tuple[Path, int, int]:
    """The sample of corpus `name` in out_dir/<name>: evenly spaced row groups of its Parquet files (over all of
    them), the head of each other file (decompressed) up to `fraction` of its bytes; returns (the sample's
    directory, its input bytes sampled, the corpus's input bytes)."""
    from pipeline.stages.corpus.readers import Fields, find_files, read_tasks

    files, root = find_files(pattern)
    tasks, _ = read_tasks(files, root, Fields(text=text_field), setting)
    target = out_dir / name
    groups = [task for task in tasks if task.format == "parquet"]
    chosen: dict[str, list] = {}
    for number in _evenly(len(groups), fraction) if groups else []:
        chosen.setdefault(groups[number].path, []).append(groups[number])
    sampled = sum(task.size for file_tasks in chosen.values() for task in file_tasks)
    for path, file_tasks in chosen.items():
        dest = target / file_tasks[0].name
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_row_groups(Path(path), [group for task in file_tasks for group in task.row_groups], dest)
    for task in tasks:
        if task.format != "parquet":
            dest = target / task.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            sampled += _copy_head(Path(task.path), dest, fraction, task.format)
    return target, sampled, sum(task.size for task in tasks)


def _copy_row_groups(path: Path, groups: list[int], dest: Path) -> None:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    with pq.ParquetWriter(dest, parquet.schema_arrow) as writer:
        for group in groups:
            writer.write_table(parquet.read_row_group(group))


def _copy_head(path: Path, dest: Path, fraction: float, kind: str) -> int:
    """The first lines (text: whole documents) of `path` up to `fraction` of its bytes on disk, written
    uncompressed to `dest` without the compression suffix; the bytes on disk read."""
    budget = max(1, int(path.stat().st_size * fraction))
    name = dest.name
    for suffix in COMPRESSIONS:
        if name.lower().endswith(suffix):
            dest = dest.with_name(name[:-len(suffix)])
    with open(path, "rb") as raw, _decompressed(raw, path) as lines, open(dest, "wb") as out:
        for line in lines:
            out.write(line)
            if raw.tell() >= budget and (kind != "text" or not line.strip()):
                break
        return min(raw.tell(), path.stat().st_size)


def _decompressed(raw: IO[bytes], path: Path) -> IO[bytes]:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)
    if name.endswith((".zst", ".zstd")):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True,
                                                                            closefd=False))
    if name.endswith(".bz2"):
        return bz2.BZ2File(raw)
    if name.endswith(".xz"):
        return lzma.LZMAFile(raw)
    return io.BufferedReader(_Unclosed(raw), CHUNK_BYTES)


class _Unclosed(io.RawIOBase):
    """`raw` read through a buffer whose closing leaves it open."""

    def __init__(self, raw):
        self.raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self.raw.readinto(buffer)


# --- running the samples -----------------------------------------------------------------------------------------

def run_sample(flags: list[str], stages: Iterable[str], workdir: Path, log: IO) -> dict[str, StageSample]:
    """Each stage as its own `pipeline stage` process with `flags` (lang, dump, corpora, settings), measured."""
    results = {}
    cli = [sys.executable, "-m", "pipeline.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    for stage in stages:
        before = directory_bytes(workdir)
        cost = measure([*cli, "stage", stage, *flags, "--workdir", str(workdir), "--workers", str(SAMPLE_WORKERS),
                        "--quiet"], watch=workdir, stdout=log, stderr=log, env=env)
        if cost.returncode != 0:
            log.flush()
            said = [line for line in Path(log.name).read_text(encoding="utf-8").splitlines() if line.strip()]
            raise DataError(f"pipeline plan: stage {stage} failed on the sample (exit {cost.returncode}): "
                            f"{said[-1] if said else 'no output'}")
        after = directory_bytes(workdir)
        manifest = json.loads((workdir / flags[1] / stage / MANIFEST).read_text(encoding="utf-8"))
        results[stage] = StageSample(cost.wall_s, cost.cpu_s, cost.main_cpu_s, cost.main_rss, cost.worker_rss,
                                     max(0, after - before), sum(o["size"] for o in manifest["outputs"].values()),
                                     max(0, cost.disk_peak - after), manifest["counts"], manifest["config"])
    return results


def _at_full(small: tuple[float, float], large: tuple[float, float]) -> float:
    """The line a + b * x through (x, y) of both samples, at x = 1; a is held at least 0 (noise can tip the line)
    and so is b."""
    (x1, y1), (x2, y2) = small, large
    slope = (y2 - y1) / (x2 - x1) if x2 > x1 else y2 / x2
    intercept = y2 - slope * x2
    if intercept < 0:
        intercept, slope = 0.0, y2 / x2
    if slope < 0:
        intercept, slope = y2, 0.0
    return intercept + slope


def sentence_cap(sample: StageSample) -> int | None:
    """The sentences a vocab stage trains on at most (sentencepiece's `input_sentence_size`), None without a cap."""
    settings = sample.settings
    if settings.get("method") != "sentencepiece" or settings.get("tokenizer"):
        return None
    return settings["input_sentence_size"] or None


def _vocab_at_full(little: StageSample, big: StageSample, capped: StageSample | None, x2: float, field: str) -> float:
    """A vocab figure of the whole input: a + s * N + t * min(N, cap), N the whole input's sentences (the larger
    sample's, scaled), s the cost of a sentence read and t of a sentence trained on. The samples' own runs train on
    min(n, cap) of their n; `capped`, the larger sample run again with its cap at the smaller's sentences (made when
    the smaller is under the cap and the whole input over it), tells s from t. Without it, every sentence counts as
    trained on (the whole input is under the cap) or, both samples at the cap, as read only."""
    cap = sentence_cap(big) or float("inf")
    n1, n2 = little.counts["sentences"], big.counts["sentences"]
    t1, t2 = min(n1, cap), min(n2, cap)
    y1, y2 = getattr(little, field), getattr(big, field)
    if n2 <= n1:
        return _at_full((n1, y1), (n2, y2)) if n2 else y2
    if t2 <= t1:
        read, trained = max(0.0, (y2 - y1) / (n2 - n1)), 0.0
    elif capped is None:
        read, trained = 0.0, max(0.0, (y2 - y1) / (t2 - t1))
    else:
        trained = max(0.0, (y2 - getattr(capped, field)) / (t2 - t1))
        read = max(0.0, (y2 - y1 - trained * (t2 - t1)) / (n2 - n1))
    whole = n2 / x2
    fixed = max(0.0, y1 - read * n1 - trained * t1)
    return fixed + read * whole + trained * min(whole, cap)


def _vocab_rss_at_full(little: StageSample, big: StageSample, x2: float) -> int:
    """The vocab stage's main process at the whole input: it grows with the sentences trained on, min(N, cap)."""
    cap = sentence_cap(big) or float("inf")
    t1, t2 = min(little.counts["sentences"], cap), min(big.counts["sentences"], cap)
    if t2 <= t1:
        return big.main_rss
    per_sentence = max(0.0, (big.main_rss - little.main_rss) / (t2 - t1))
    return int(big.main_rss + per_sentence * (min(big.counts["sentences"] / x2, cap) - t2))


def predict(samples: list[tuple[float, dict[str, StageSample]]], cores: int,
            vocab_capped: StageSample | None = None) -> dict[str, dict]:
    """{stage: predicted figures for the whole input on `cores` cores} from the runs on two samples (fraction,
    figures), smaller first; `vocab_capped`: the vocab stage's run on the larger sample with its sentence cap at the
    smaller sample's sentences (`_vocab_at_full`)."""
    (x1, small), (x2, large) = samples
    stages = {}
    for name, big in large.items():
        little = small[name]

        def full(field: str) -> float:
            if name == "vocab" and field in ("cpu_s", "main_cpu_s"):
                return _vocab_at_full(little, big, vocab_capped, x2, field)
            return _at_full((x1, getattr(little, field)), (x2, getattr(big, field)))

        cpu = full("cpu_s")
        serial = min(cpu, full("main_cpu_s"))
        main_rss = _vocab_rss_at_full(little, big, x2) if name == "vocab" else big.main_rss
        stages[name] = {
            "wall_s": round(serial + (cpu - serial) / cores, 1),
            "cpu_s": round(cpu, 1),
            "serial_cpu_s": round(serial, 1),
            "disk_bytes": int(full("disk_bytes")),
            "output_bytes": int(full("output_bytes")),
            "transient_bytes": int(full("transient_bytes")),
            "peak_rss_bytes": max(main_rss, big.worker_rss),
            "main_rss_bytes": main_rss,
            "worker_rss_bytes": big.worker_rss,
            "rss_growth": round(max(big.main_rss, big.worker_rss) / max(1, little.main_rss, little.worker_rss), 2),
        }
    return stages


def plan(lang: str, flags: list[str], dump: Path | None, corpora: dict[str, dict], cores: int, sample_mb: float,
         workdir: Path, log: IO) -> dict:
    """The prediction: {"stages": {...}, "disk_bytes": peak with --keep all, "disk_bytes_keep_final": ...,
    "input_bytes": ..., "samples": [fractions]}. `flags`: the settings flags of the run (--set, --config, ...);
    `corpora`: {name: its CorpusSource fields and its shard weight} of the run."""
    sizes = {"dump": dump.stat().st_size if dump else 0}
    from pipeline.stages.corpus.readers import Fields, find_files, read_tasks

    for name, source in corpora.items():
        files, root = find_files(source["path"])
        tasks, _ = read_tasks(files, root, Fields(text=source.get("text_field", "text")), source.get("format", "auto"))
        sizes[name] = sum(task.size for task in tasks)
    total = sum(sizes.values())
    if total == 0:
        raise ConfigError("pipeline plan: no input to sample (give --dump PATH and/or --corpus)")
    samples = []
    for ratio in (SAMPLE_RATIO, 1):
        fraction = min(1.0, sample_mb * 1e6 / total / ratio)
        base = workdir / f"sample-{ratio}"
        sampled, run_flags = 0, ["--lang", lang, *flags]
        if dump:
            path, kept = sample_dump(dump, fraction, base / "dump")
            sampled += kept
            run_flags += ["--dump", str(path)]
        for name, source in corpora.items():
            path, kept, _ = sample_corpus(name, source["path"], fraction, base / "corpus",
                                          source.get("format", "auto"), source.get("text_field", "text"))
            sampled += kept
            weight = f":{source['weight']}" if source.get("weight") is not None else ""
            run_flags += ["--corpus", f"{name}={path}{weight}"]
        stages = [name for name in STAGES if not (name in ("download", "extract") and not dump)
                  and not (name == "corpus" and not corpora)]
        samples.append((sampled / total, run_sample(run_flags, stages, base / "work", log)))
    (_, small), (x2, large) = samples
    vocab_capped = None
    if "vocab" in large and (cap := sentence_cap(large["vocab"])) and \
            small["vocab"].counts["sentences"] < cap < large["vocab"].counts["sentences"] / x2:
        # the whole input's vocab stage reads more sentences than it trains on: the larger sample's again, trained on
        # the smaller's number of sentences, tells the two costs apart (_vocab_at_full)
        cap_flag = ["--set", f"vocab.input_sentence_size={small['vocab'].counts['sentences']}"]
        vocab_capped = run_sample([*run_flags, *cap_flag], ["vocab"], base / "work", log)["vocab"]
    stages = predict(samples, cores, vocab_capped)
    return {"stages": stages, "disk_bytes": peak_disk(stages, "all"),
            "disk_bytes_keep_final": peak_disk(stages, "final"), "input_bytes": total,
            "cores": cores, "samples": [round(x, 4) for x, _ in samples]}


def format_plan(result: dict) -> str:
    stages = result["stages"]
    cpu = sum(s["cpu_s"] for s in stages.values())
    lines = [f"{'stage':<10} {'wall':>9} {'CPU':>9} {'serial':>8} {'disk':>10} {'RSS/proc':>9}"]
    for name, s in stages.items():
        grows = "  (memory grew x{:.2f} between the samples)".format(s["rss_growth"]) if s["rss_growth"] > 1.1 else ""
        lines.append(f"{name:<10} {_duration(s['wall_s']):>9} {_duration(s['cpu_s']):>9} "
                     f"{s['serial_cpu_s'] / max(cpu, 1e-9):>7.0%} {_size(s['disk_bytes']):>10} "
                     f"{_size(s['peak_rss_bytes']):>9}{grows}")
    wall = sum(s["wall_s"] for s in stages.values())
    serial = sorted(((s["serial_cpu_s"], n) for n, s in stages.items()), reverse=True)
    lines.append(f"total: {_duration(wall)} wall on {result['cores']} cores, {_duration(cpu)} CPU; peak disk "
                 f"{_size(result['disk_bytes'])} (--keep all), {_size(result['disk_bytes_keep_final'])} "
                 f"(--keep final), inputs {_size(result['input_bytes'])}")
    lines.append("serial (one core while the others wait): " + ", ".join(
        f"{n} {_duration(v)} ({v / max(wall, 1e-9):.0%} of the wall time)" for v, n in serial[:4] if v >= 0.5))
    lines.append(f"predicted from samples of {result['samples'][0]:.2%} and {result['samples'][1]:.2%} of the "
                 "inputs (docs/pipeline.md, Plan a run)")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
