"""Benchmark of the hdf5 stage: against NVIDIA's create_pretraining_data.py per core, peak memory against shard
size, and input tokens/s per core (seq 128, seq 512, both; dupe_factor 5) with scaling from 1 to 2 workers.

Text: ../shared/data/hu/ as documents (the Bible's chapters, LibreOffice help in runs of 20 paragraphs), 6.9 MB.
- nvidia: NVIDIA's script, run unmodified from ../shared/reference/nvidia-bert/ (its file_utils.py imports
  boto3/requests for downloads it never makes here: empty stand-ins go on its PYTHONPATH when those are not
  installed), and `pipeline hdf5`, alternately, on the same text with the same uncased vocabulary
  (bert-base-uncased-vocab.txt, lowercasing), seq 128, max_pred 20, dupe_factor 5, one process and one core
  each. CPU time (user + sys of the process) is the per-core figure: the machine may be shared.
- memory: the default stage (both variants, 1 worker) on one shard of each size in --shard-mb, built by
  repeating the text, with TurkuNLP's Hungarian vocabulary; peak RSS of the process (ru_maxrss).
- throughput: the stage on the text in 2 shards; the Rust tokenizer alone as the baseline.

    .venv/bin/python bench/hdf5.py [--only nvidia|memory|throughput] [--rounds 3] [--shard-mb 25,100,200]
        [--data ../shared/data] [--smoke]

--smoke: the script end to end in seconds, on a generated stand-in for ../shared/data (bench/_smoke_data.py; its
vocabulary serves as both vocabularies), one round, one 1 MB shard; NVIDIA's script still from
../shared/reference, skipped when absent.
"""
from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
TEXTS = [Path("hu") / "karoli_1908_verses.txt", Path("hu") / "libreoffice-help-hu.hu.txt"]
VOCAB = Path("vocab") / "wikibert-hu-cased-vocab.txt"
UNCASED_VOCAB = Path("vocab") / "bert-base-uncased-vocab.txt"
NVIDIA = Path("reference") / "nvidia-bert" / "create_pretraining_data.py"  # under the data dir's parent


def hu_documents() -> list[list[str]]:
    docs, doc = [], []
    for line in (DATA / TEXTS[0]).read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            if doc:
                docs.append(doc)
            doc = []
        elif line.strip():
            doc.append(line.strip())
    if doc:
        docs.append(doc)
    paragraphs = [line.strip() for line in (DATA / TEXTS[1]).read_text(encoding="utf-8").splitlines()
                  if line.strip()]
    docs += [paragraphs[i:i + 20] for i in range(0, len(paragraphs), 20)]
    return docs


def write_shards(docs: list[list[str]], directory: Path, shards: int, repeat: int = 1) -> None:
    from pipeline.text_files import write_document

    directory.mkdir(parents=True)
    files = [open(directory / f"training_{i:04d}.txt", "w", encoding="utf-8") for i in range(shards)]
    for r in range(repeat):
        for i, doc in enumerate(docs):
            write_document(files[(i + r) % shards], doc)
    for f in files:
        f.close()


def run_stage(shard_dir: str, out: str, variants: list[tuple[int, int]], workers: int, vocab: str, queue) -> None:
    from pipeline.stages.hdf5.stage import Hdf5Config, Variant, run_standalone

    config = Hdf5Config(variants=[Variant(seq, preds) for seq, preds in variants], dupe_factor=5)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    counts = run_standalone(config, Path(shard_dir), Path(vocab), Path(out), workers=workers, force=True, quiet=True)
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    queue.put((counts["input_tokens"], counts["instances"], seconds, cpu, peak_kib / 1024))


def _cpu_seconds() -> float:
    """CPU time of this process and its finished workers: unlike wall time, not inflated by other users' load."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def tokenizer_alone(shard_dir: str, vocab: str, queue) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from pipeline.text_files import iter_documents
    from wiki2bert_core.wordpiece import load_tokenizer

    tokenizer = load_tokenizer(Path(vocab))
    sentences = [s for path in sorted(Path(shard_dir).glob("*.txt")) for doc in iter_documents(path) for s in doc]
    started, cpu_started = time.perf_counter(), time.process_time()
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(sentences, add_special_tokens=False))
    queue.put((tokens, time.perf_counter() - started, time.process_time() - cpu_started))


def in_fresh_process(fn, *args):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=fn, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def timed_command(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, float, float]:
    """Run a command to its end (its output to `log`); its wall seconds, CPU seconds (user + sys) and peak RSS in
    MiB."""
    started = time.perf_counter()
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(command)}\n{log.read_text(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def nvidia_comparison(docs: list[list[str]], tmp: Path, rounds: int) -> None:
    """Each round runs both sides on the text, and on a 3-document text to measure their start-up (interpreter,
    imports, reading the vocabulary), which the second ratio leaves out."""
    import h5py

    script = DATA.parent / NVIDIA
    if not script.is_file():
        print(f"nvidia: skipped, {script} not found")
        return
    texts = {}
    for name, subset in (("text", docs), ("start-up", docs[:3])):
        write_shards(subset, tmp / f"nvidia-{name}", shards=1)
        texts[name] = tmp / f"nvidia-{name}" / "training_0000.txt"
    stubs = _download_module_stand_ins(tmp / "stand-ins")
    # Both sides run as installed programs do, from cached bytecode (written under tmp at the first run, the
    # start-up one: a PYTHONDONTWRITEBYTECODE environment would otherwise recompile every module at every run).
    one_core = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                "PYTHONPYCACHEPREFIX": str(tmp / "pycache"), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1", "USE_TORCH": "0", "USE_TF": "0"}  # USE_*: file_utils.py imports torch otherwise
    vocab = str(DATA / UNCASED_VOCAB)

    def theirs(text: Path) -> list[str]:
        return [sys.executable, str(script), "--vocab_file", vocab, "--input_file", str(text),
                "--output_file", str(tmp / "nvidia.hdf5"), "--max_seq_length", "128", "--max_predictions_per_seq",
                "20", "--dupe_factor", "5", "--masked_lm_prob", "0.15", "--short_seq_prob", "0.1",
                "--do_lower_case", "--random_seed", "12345"]

    def ours(text: Path) -> list[str]:
        return [sys.executable, "-m", "pipeline.cli", "hdf5", "--input", str(text), "--vocab", vocab, "--lowercase",
                "--out", str(tmp / "ours"), "--force", "--quiet", "--workers", "1",
                "--set", "hdf5.variants=[{max_seq_length: 128, max_predictions_per_seq: 20}]"]

    sides = {"NVIDIA create_pretraining_data": (theirs, script.parent, {
                 **one_core, "PYTHONPATH": os.pathsep.join(filter(None, [str(script.parent), stubs]))}),
             "wiki2bert pipeline hdf5": (ours, ROOT, {**one_core, "PYTHONPATH": str(ROOT)})}
    print(f"nvidia: {texts['text'].stat().st_size / 1e6:.1f} MB of Hungarian text, {len(docs):,} documents, "
          "bert-base-uncased vocabulary, seq 128, max_pred 20, dupe_factor 5, one process each, alternating")
    print(f"{'round':>5} {'run':<30} {'wall s':>7} {'CPU s':>7} {'start-up CPU s':>14} {'peak RSS MiB':>12} "
          f"{'instances':>10} {'load':>5}")
    for command, cwd, env in sides.values():  # untimed: writes the bytecode cache
        timed_command(command(texts["start-up"]), cwd, env, tmp / "log")
    ratios, work_ratios, wall_ratios = [], [], []
    for round_ in range(1, rounds + 1):
        results = []
        for name, (command, cwd, env) in sides.items():
            load = os.getloadavg()[0]
            _, start_cpu, _ = timed_command(command(texts["start-up"]), cwd, env, tmp / "log")
            wall, cpu, peak = timed_command(command(texts["text"]), cwd, env, tmp / "log")
            if command is theirs:
                with h5py.File(tmp / "nvidia.hdf5", "r") as f:
                    instances = len(f["input_ids"])
            else:
                instances = sum(len(h5py.File(p, "r")["input_ids"]) for p in (tmp / "ours").rglob("*.hdf5"))
            results.append((wall, cpu, start_cpu))
            print(f"{round_:>5} {name:<30} {wall:>7.2f} {cpu:>7.2f} {start_cpu:>14.2f} {peak:>12.0f} "
                  f"{instances:>10,} {load:>5.1f}")
        (their_wall, their_cpu, their_start), (our_wall, our_cpu, our_start) = results
        ratios.append(their_cpu / our_cpu)
        our_work = our_cpu - our_start  # can be ~0 on a tiny text (--smoke)
        work_ratios.append((their_cpu - their_start) / our_work if our_work > 0 else float("nan"))
        wall_ratios.append(their_wall / our_wall)

    def summary(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}x (rounds: {', '.join(f'{r:.1f}' for r in values)})"

    print(f"wiki2bert vs NVIDIA per core, median of {rounds} rounds: CPU time {summary(ratios)}; CPU time past "
          f"start-up {summary(work_ratios)}; wall time {summary(wall_ratios)}")
    print_statistics({"NVIDIA": tmp / "nvidia.hdf5", "wiki2bert": tmp / "ours"}, Path(vocab))


def print_statistics(outputs: dict[str, Path], vocab: Path) -> None:
    """`pipeline verify`'s statistics of each side's files, and where their random tokens come from."""
    import h5py
    import numpy as np

    from pipeline.tools.verify import verify_path
    from wiki2bert_core.hdf5_format import read_rows
    from wiki2bert_core.wordpiece import SPECIAL_TOKENS, is_placeholder, read_vocab

    vocab_ids = read_vocab(vocab)
    special = np.array([vocab_ids[t] for t in SPECIAL_TOKENS])
    placeholders = np.array([i for t, i in vocab_ids.items() if is_placeholder(t)])
    columns = {}
    for name, path in outputs.items():
        report = verify_path(path, vocab)
        (s,) = report.stats.values()
        random_tokens = []
        for file in report.files:
            with h5py.File(file, "r") as f:
                rows = read_rows(f)
            positions = rows["masked_lm_positions"].astype(np.int64)
            used = positions != 0
            now = np.take_along_axis(rows["input_ids"], positions, axis=1)[used]
            was = rows["masked_lm_ids"][used]
            random_tokens.append(now[(now != vocab_ids["[MASK]"]) & (now != was)])
        random_tokens = np.concatenate(random_tokens)
        columns[name] = [f"{s.instances:,}", f"{s.real_tokens / s.instances:.1f}", f"{s.short / s.instances:.3f}",
                         f"{s.masked / s.eligible:.4f}", f"{s.full_predictions / s.instances:.3f}",
                         f"{s.masked_as_mask / s.masked:.3f} / {s.masked_same / s.masked:.3f} / "
                         f"{s.masked_other / s.masked:.3f}",
                         f"{np.isin(random_tokens, special).sum():,} / {np.isin(random_tokens, placeholders).sum():,}"
                         f" of {len(random_tokens):,}",
                         f"{s.random_next / s.instances:.3f}"]
    labels = ["instances", "mean real length", "short (padded) rows", "masked share of eligible tokens",
              "rows at the cap of max_pred", "[MASK] / same / random", "random tokens: special / [unusedN]",
              "NSP random next"]
    print(f"statistics (`pipeline verify` on both outputs): {' | '.join(outputs)}")
    for i, label in enumerate(labels):
        print(f"  {label:<36} " + " | ".join(column[i] for column in columns.values()))


def _download_module_stand_ins(directory: Path) -> str:
    """Empty modules for what NVIDIA's file_utils.py imports only to download models (boto3, requests,
    botocore), when they are not installed; returns the directory to put on PYTHONPATH ("" if none needed)."""
    missing = [m for m in ("boto3", "requests", "botocore") if importlib.util.find_spec(m) is None]
    if not missing:
        return ""
    for module in missing:
        (directory / module).mkdir(parents=True)
        (directory / module / "__init__.py").write_text("")
    if "botocore" in missing:
        (directory / "botocore" / "exceptions.py").write_text("class ClientError(Exception):\n    pass\n")
    return str(directory)


def memory_runs(docs: list[list[str]], tmp: Path, sizes_mb: list[int]) -> None:
    """Peak RSS of the default stage (both variants, 1 worker) against the size of its one shard."""
    size = sum(len(s.encode("utf-8")) + 1 for d in docs for s in d) + len(docs)
    print("memory: default stage (seq 128 + seq 512), 1 worker, one shard, TurkuNLP Hungarian vocabulary")
    print(f"{'shard MB':>8} {'tokens':>12} {'instances':>10} {'wall s':>7} {'CPU s':>7} {'peak RSS MiB':>12}")
    for mb in sizes_mb:
        shard_dir = tmp / f"shard-{mb}"
        write_shards(docs, shard_dir, shards=1, repeat=max(1, round(mb * 1e6 / size)))
        actual = (shard_dir / "training_0000.txt").stat().st_size / 1e6
        tokens, instances, seconds, cpu, peak = in_fresh_process(run_stage, str(shard_dir), str(tmp / "out"),
                                                                 [(128, 20), (512, 80)], 1, str(DATA / VOCAB))
        print(f"{actual:>8.0f} {tokens:>12,} {instances:>10,} {seconds:>7.1f} {cpu:>7.1f} {peak:>12.0f}")
        shutil.rmtree(shard_dir)
        shutil.rmtree(tmp / "out")


def main() -> None:
    global DATA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["nvidia", "memory", "throughput"], help="run one part only")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of NVIDIA's script and ours")
    parser.add_argument("--shard-mb", default="25,100,200", help="shard sizes (MB) for the memory runs")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data dir (hu/, vocab/)")
    parser.add_argument("--smoke", action="store_true", help="generated data, one round, one 1 MB shard")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hdf5-") as tmp:
        tmp = Path(tmp)
        if args.smoke:
            from _smoke_data import shared_data

            args.data, args.rounds, args.shard_mb = shared_data(tmp / "smoke"), 1, "1"
        DATA = args.data.resolve()
        needed = [DATA / p for p in TEXTS + [VOCAB, UNCASED_VOCAB]]
        if not all(p.is_file() for p in needed):
            print(f"skipped: needs {', '.join(str(p) for p in needed)}")
            return
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
              "(shared machine: wall figures vary with the other users' load; CPU time much less)")
        docs = hu_documents()
        if args.only in (None, "nvidia"):
            nvidia_comparison(docs, tmp, args.rounds)
        if args.only in (None, "memory"):
            memory_runs(docs, tmp, [int(x) for x in args.shard_mb.split(",")])
        if args.only in (None, "throughput"):
            small_corpus_runs(docs, tmp)


def small_corpus_runs(docs: list[list[str]], tmp: Path) -> None:
    write_shards(docs, tmp / "two", shards=2)
    vocab = str(DATA / VOCAB)
    tokens, seconds, cpu = in_fresh_process(tokenizer_alone, str(tmp / "two"), vocab)
    base = tokens / cpu
    print(f"throughput: {sum(len(d) for d in docs):,} lines in {len(docs):,} documents, {tokens:,} tokens, "
          "2 shards, TurkuNLP Hungarian vocabulary")
    print(f"baseline, Rust tokenizer alone (encode_batch, 1 thread): {tokens / seconds:,.0f} tokens/s wall, "
          f"{base:,.0f} tokens per CPU-second")
    print("tokens/s/core = input tokens / wall seconds / workers; tokens/CPU-s = per CPU-second of all processes")
    print(f"{'run':<24} {'workers':>7} {'instances':>10} {'wall s':>7} {'tokens/s/core':>14} "
          f"{'tokens/CPU-s':>13} {'vs tokenizer':>12} {'peak RSS MiB':>12}")
    rates = {}
    for label, variants, workers in [("seq 128 (max_pred 20)", [(128, 20)], 1),
                                     ("seq 512 (max_pred 80)", [(512, 80)], 1),
                                     ("seq 128 (max_pred 20)", [(128, 20)], 2),
                                     ("both (default stage)", [(128, 20), (512, 80)], 1),
                                     ("both (default stage)", [(128, 20), (512, 80)], 2)]:
        tokens, instances, seconds, cpu, peak = in_fresh_process(run_stage, str(tmp / "two"),
                                                                 str(tmp / "out"), variants, workers, vocab)
        rates[(label, workers)] = tokens / seconds
        print(f"{label:<24} {workers:>7} {instances:>10,} {seconds:>7.2f} {tokens / seconds / workers:>14,.0f} "
              f"{tokens / cpu:>13,.0f} {tokens / cpu / base:>12.2f} {peak:>12.0f}")
    speedup = rates[("both (default stage)", 2)] / rates[("both (default stage)", 1)]
    print(f"scaling 1 -> 2 workers: {speedup:.2f}x (ideal 2.00x on 2 idle cores)")
    shutil.rmtree(tmp / "out")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
