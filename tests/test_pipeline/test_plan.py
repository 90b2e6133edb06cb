"""`pipeline plan`: samples of the inputs (a multistream dump by its index, corpora by row groups or heads), the
peak disk of a run with --keep all and final, and a plan from samples against the real run it predicts."""
from __future__ import annotations

import bz2
import gzip
import json
import re
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.tools import measure as measure_module
from pipeline.tools import sample_dump as sample
from pipeline.tools.plan import STAGES, peak_disk, plan, run_sample, sample_corpus
from pipeline.tools.plan import sample_dump as sample_of_dump
from pipeline.tools.sample_corpus import write_sample_corpus

SETTINGS = ["--set", "vocab.vocab_size=1000", "--set", "shard.num_shards=4"]


def multistream(tmp_path: Path, articles: int = 120) -> tuple[Path, list]:
    pages = sample.generate_pages(articles, seed=2)
    dump = tmp_path / "dump" / sample.DUMP_NAME
    dump.parent.mkdir()
    sample.write_multistream(pages, dump, dump.parent / sample.INDEX_NAME, pages_per_stream=10)
    return dump, pages


def test_the_dump_sample_is_a_multistream_dump_of_evenly_spaced_streams(tmp_path):
    dump, pages = multistream(tmp_path)
    out, kept = sample_of_dump(dump, 0.25, tmp_path / "sample")
    assert out.name == dump.name and (out.parent / sample.INDEX_NAME).is_file()
    xml = bz2.decompress(out.read_bytes()).decode("utf-8")
    assert xml.startswith("<mediawiki") and xml.rstrip().endswith("</mediawiki>")
    ids = [int(i) for i in re.findall(r"<page>\s*<title>[^<]*</title>\s*<ns>-?\d+</ns>\s*<id>(\d+)</id>", xml)]
    streams = -(-len(pages) // 10)
    assert len(ids) == 10 * round(streams * 0.25)  # whole streams of 10 pages
    assert ids[0] == 1 and ids[-1] < len(pages) and ids[10] > 20  # spread over the dump, not its head
    index = bz2.decompress((out.parent / sample.INDEX_NAME).read_bytes()).decode("utf-8").splitlines()
    assert [int(line.split(":")[1]) for line in index] == ids
    data = out.read_bytes()
    for line in index[::10]:  # each offset starts the stream that holds its page
        offset, page_id, _ = line.split(":", 2)
        decompressor = bz2.BZ2Decompressor()
        assert f"<id>{page_id}</id>" in decompressor.decompress(data[int(offset):]).decode("utf-8")
    assert 0.15 < kept / dump.stat().st_size < 0.35


def test_corpus_samples_take_evenly_spaced_row_groups_and_the_heads_of_other_files(tmp_path):
    pages_dir = write_sample_corpus(tmp_path / "web", docs=640, files=2, fmt="parquet")  # 10 row groups of 64
    target, sampled, total = sample_corpus("web", str(pages_dir), 0.3, tmp_path / "sample")
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in target.glob("*.parquet"))
    assert rows == 3 * 64 and sorted(f.name for f in target.iterdir()) == ["web-00000.parquet", "web-00001.parquet"]
    assert 0.2 < sampled / total < 0.4

    lines = [json.dumps({"text": f"document {i} " + "szó " * 50}) + "\n" for i in range(400)]
    with gzip.open(tmp_path / "news.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(lines)
    target, sampled, total = sample_corpus("news", str(tmp_path / "news.jsonl.gz"), 0.5, tmp_path / "sample")
    head = (target / "news.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    assert head == lines[:len(head)] and 0 < len(head) < len(lines)
    assert sampled <= total == (tmp_path / "news.jsonl.gz").stat().st_size


def test_peak_disk_with_keep_all_and_final():
    costs = {"extract": {"disk_bytes": 100, "output_bytes": 100, "transient_bytes": 50},
             "sentences": {"disk_bytes": 80, "output_bytes": 80, "transient_bytes": 0},
             "filter": {"disk_bytes": 60, "output_bytes": 60, "transient_bytes": 200}}
    assert peak_disk(costs, "all") == 100 + 80 + 60 + 200
    # final: extract's files go once sentences is done, sentences' once filter is
    assert peak_disk(costs, "final") == 80 + 60 + 200


def test_plan_refuses_what_it_cannot_sample(tmp_path):
    runner = CliRunner()
    single = tmp_path / "huwiki-pages-articles.xml.bz2"
    single.write_bytes(bz2.compress(b"<mediawiki></mediawiki>"))
    result = runner.invoke(app, ["plan", "--lang", "hu", "--dump", str(single), "--cores", "4"])
    assert "pipeline plan samples a multistream dump by its index" in str(result.exception)
    result = runner.invoke(app, ["plan", "--lang", "hu", "--dump", "https://example.org/d.xml.bz2", "--cores", "4"])
    assert "pipeline plan samples a local dump file" in str(result.exception)
    result = runner.invoke(app, ["plan", "--lang", "hu,fi", "--corpus", f"hu={single}", "--cores", "4"])
    assert "predicts one language's run at a time" in str(result.exception)


@pytest.mark.slow
def test_a_plan_from_samples_predicts_the_real_run(tmp_path):
    """Samples of about 10% and 35% of a 0.8 MB dump + corpus predict the whole run: the run's peak disk within
    10%, each stage's disk within 25% (a sample of a few row groups and streams is lumpy at this size: a generated
    long article is a tenth of a row group's text), and CPU within 50% of the measured (the machine is shared:
    measured CPU itself varies by a third between runs here). The wall time predicted on 2 cores is checked only
    against the measured CPU (between all of it shared by the 2 cores and none shared, 50% either way): on the
    shared 2-core test machine the measured wall was 4-5 times the CPU, whatever the prediction. The vocabulary
    trains on fewer sentences than the run has (`vocab.input_sentence_size`), as a large corpus's does, but more than
    either sample has."""
    dump = sample.write_sample_dump(tmp_path / "dump", 600, 0)
    pages_dir = write_sample_corpus(tmp_path / "web", docs=600, files=3, fmt="parquet")
    corpora = {"web": {"path": str(pages_dir), "format": "auto", "text_field": "text", "weight": None}}
    settings = [*SETTINGS, "--set", "vocab.input_sentence_size=30000"]
    with open(tmp_path / "plan.log", "w", encoding="utf-8") as log:
        predicted = plan("hu", settings, dump, corpora, 2, 0.3, tmp_path / "plan", log)
        flags = ["--lang", "hu", "--dump", str(dump), "--corpus", f"web={pages_dir}", *settings]
        measured = run_sample(flags, STAGES, tmp_path / "real", log)
    stages = predicted["stages"]
    assert measured["vocab"].counts["sentences"] > 30000  # over the cap: the plan ran the vocab stage a third time,
    capped = json.loads((tmp_path / "plan" / "sample-1" / "work" / "hu" / "vocab" / "_manifest.json").read_text())
    assert capped["config"]["input_sentence_size"] < 30000  # the larger sample capped at the smaller's sentences
    real = {name: {"disk_bytes": m.disk_bytes, "output_bytes": m.output_bytes, "transient_bytes": m.transient_bytes}
            for name, m in measured.items()}
    assert abs(predicted["disk_bytes"] / peak_disk(real, "all") - 1) < 0.10
    for name, m in measured.items():
        assert abs(stages[name]["disk_bytes"] / max(1, m.disk_bytes) - 1) < 0.25, name
    cpu = sum(m.cpu_s for m in measured.values())
    assert abs(sum(s["cpu_s"] for s in stages.values()) / cpu - 1) < 0.5
    wall = sum(s["wall_s"] for s in stages.values())  # on 2 cores: between all CPU shared by them and none shared
    assert cpu / 2 / 1.5 < wall < cpu * 1.5


def test_a_vocab_stage_over_its_sentence_cap_is_predicted_from_what_it_reads_and_what_it_trains_on():
    """Figures made by a + s * read + t * trained (and memory by what is trained on) are predicted exactly: under
    the cap as a line through the samples, over it with the third run telling s from t."""
    from pipeline.tools.plan import StageSample, predict

    fixed, read, trained, rss, rss_per = 2.0, 1e-6, 6e-6, 150 << 20, 200

    def vocab(sentences: int, cap: int, train_cap: int | None = None):
        taken = min(sentences, train_cap or cap or sentences)
        cpu = fixed + read * sentences + trained * taken
        return StageSample(cpu, cpu, cpu / 2, rss + rss_per * taken, 0, 300_000, 300_000, 0,
                           {"sentences": sentences}, {"method": "sentencepiece", "input_sentence_size": cap})

    def shard(x: float):
        return StageSample(1 + 10 * x, 1 + 10 * x, 1 + 10 * x, rss, 0, int(1e9 * x), int(1e9 * x), 0, {}, {})

    whole, x1, x2 = 30_000_000, 0.02, 0.08  # samples of 600,000 and 2,400,000 sentences
    # no cap, a cap above the input, below it, between the samples, below both
    for cap in (0, 100_000_000, 10_000_000, 1_000_000, 300_000):
        samples = [(x, {"vocab": vocab(int(whole * x), cap), "shard": shard(x)}) for x in (x1, x2)]
        capped = vocab(int(whole * x2), cap, train_cap=int(whole * x1)) if whole * x1 < cap < whole else None
        stages = predict(samples, 2, capped)
        taken = min(whole, cap or whole)
        assert stages["vocab"]["cpu_s"] == pytest.approx(fixed + read * whole + trained * taken, rel=1e-3), cap
        assert stages["vocab"]["main_rss_bytes"] == pytest.approx(rss + rss_per * taken, rel=1e-3), cap
        assert stages["shard"]["cpu_s"] == pytest.approx(11.0)


def test_the_plan_names_the_serial_steps_and_both_peaks():
    from pipeline.tools.plan import format_plan

    def stage(wall, cpu, serial, growth=1.0):
        return {"wall_s": wall, "cpu_s": cpu, "serial_cpu_s": serial, "disk_bytes": 2_000_000_000,
                "peak_rss_bytes": 150 << 20, "rss_growth": growth}

    text = format_plan({"stages": {"filter": stage(100.0, 1500.0, 10.0), "vocab": stage(900.0, 1000.0, 800.0, 1.3)},
                        "disk_bytes": 5_000_000_000, "disk_bytes_keep_final": 3_000_000_000,
                        "input_bytes": 10**9, "cores": 16, "samples": [0.0125, 0.05]})
    assert "total: 16.7min wall on 16 cores, 41.7min CPU; peak disk 5.0 GB (--keep all), 3.0 GB (--keep final)" in text
    assert "serial (one core while the others wait): vocab 13.3min (80% of the wall time), filter 10.0s" in text
    assert "vocab" in text.splitlines()[2] and "memory grew x1.30 between the samples" in text.splitlines()[2]


def test_the_measured_directory_is_walked_at_most_a_fiftieth_of_the_time(tmp_path, monkeypatch):
    """Walked every 0.5 s (pipeline/tools/measure.py), a 1 GB run's work directory (30,000 files) took 13% of a core from the run measured."""
    walks = []

    def slow_walk(path):
        walks.append(path)
        time.sleep(0.05)
        return 0

    monkeypatch.setattr(measure_module, "directory_bytes", slow_walk)
    cost = measure_module.measure([sys.executable, "-c", "import time; time.sleep(2)"], watch=tmp_path)
    assert cost.returncode == 0 and cost.wall_s >= 2
    assert len(walks) <= 3  # before, one at the start (the next 2.5 s on), after: 6 at one walk each 0.5 s


def test_a_forked_workers_private_memory_leaves_out_what_it_shares_with_its_parent():
    """A worker forked from a main process counts the main's pages in its RSS, though they are in memory once: the
    rehearsal's 'flat memory per worker' is read on the private part."""
    code = ("import os, time\n"
            "shared = bytearray(200 * 2**20)\n"
            "if os.fork() == 0:\n"
            "    own = bytearray(50 * 2**20)\n"
            "    time.sleep(1.5)\n"
            "    os._exit(0)\n"
            "os.wait()\n")
    cost = measure_module.measure([sys.executable, "-c", code])
    assert cost.returncode == 0
    assert cost.worker_rss >= 250 * 2**20
    assert 50 * 2**20 <= cost.worker_private < 100 * 2**20
