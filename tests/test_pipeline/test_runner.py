"""The stage runner: skipping done stages, re-running on config/input change, killed runs, status, bad stages.yaml."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from wiki2bert_core.config import changeable
from wiki2bert_core.errors import ConfigError
from pipeline.config import load_pipeline_config
from wiki2bert_core.errors import DataError
from pipeline.runner import MANIFEST, corrupt_stages, run_stages, status_rows
from pipeline.stages import Stage, StageCounts

CALLS: list[str] = []


@dataclasses.dataclass(frozen=True)
class MakeConfig:
    words: int = 3
    word: str = "alma"
    verbose: bool = changeable(False)


@dataclasses.dataclass(frozen=True)
class UpperConfig:
    fail: bool = False
    sleep_s: float = 0.0


def make_words(config: MakeConfig, ctx) -> StageCounts:
    CALLS.append("toy_make")
    (ctx.out_dir / "words.txt").write_text((config.word + "\n") * config.words, encoding="utf-8")
    return StageCounts({"words": config.words})


def upper_words(config: UpperConfig, ctx) -> StageCounts:
    CALLS.append("toy_upper")
    if config.fail:
        raise DataError("words.txt: bad input")
    text = (ctx.inputs["toy_make"] / "words.txt").read_text(encoding="utf-8")
    (ctx.out_dir / "upper.txt").write_text(text.upper(), encoding="utf-8")
    time.sleep(config.sleep_s)
    return StageCounts({"lines": text.count("\n")})


TOY_STAGES = {
    "toy_make": Stage("toy_make", MakeConfig, make_words),
    "toy_upper": Stage("toy_upper", UpperConfig, upper_words, inputs=("toy_make",)),
}


@pytest.fixture(autouse=True)
def toy_stages(monkeypatch):
    for name, stage in TOY_STAGES.items():
        monkeypatch.setitem(sys.modules, f"pipeline.stages.{name}", types.SimpleNamespace(STAGE=stage))
    CALLS.clear()


def write_yaml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "stages.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


TOY_YAML = """
    stages: [toy_make, toy_upper]
    defaults:
      toy_make: {words: 3}
    languages:
      default: {}
      hu:
        toy_make: {word: körte}
"""


def run(tmp_path, overrides=(), lang="hu"):
    pcfg = load_pipeline_config(write_yaml(tmp_path, TOY_YAML), lang, list(overrides))
    run_stages(pcfg, tmp_path / "data" / lang, pcfg.stage_order)
    return pcfg


def test_runs_in_order_writes_manifest_and_applies_language_profile(tmp_path):
    run(tmp_path)
    assert CALLS == ["toy_make", "toy_upper"]
    out = tmp_path / "data" / "hu"
    assert (out / "toy_upper" / "upper.txt").read_text(encoding="utf-8") == "KÖRTE\n" * 3
    manifest = json.loads((out / "toy_make" / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["config"] == {"words": 3, "word": "körte", "verbose": False}
    assert manifest["counts"] == {"words": 3}
    assert manifest["outputs"]["words.txt"]["size"] == len("körte\n".encode()) * 3
    upper = json.loads((out / "toy_upper" / MANIFEST).read_text(encoding="utf-8"))
    assert set(upper["inputs"]) == {"toy_make"}


def test_other_language_uses_default_profile(tmp_path):
    run(tmp_path, lang="fi")
    assert (tmp_path / "data" / "fi" / "toy_make" / "words.txt").read_text() == "alma\n" * 3


def test_second_run_skips_done_stages(tmp_path):
    run(tmp_path)
    CALLS.clear()
    run(tmp_path)
    assert CALLS == []


def test_skipped_stage_removes_what_a_killed_forced_attempt_left(tmp_path):
    run(tmp_path)
    lang_dir = tmp_path / "data" / "hu"
    leftovers = [lang_dir / ".toy_upper.tmp" / "upper.txt", lang_dir / ".toy_upper.scratch" / "part",
                 lang_dir / ".toy_upper.old-4242" / "upper.txt", lang_dir / ".cache" / "toy_upper" / "half.bin.tmp"]
    for path in leftovers:  # as a `run --force` killed while the previous output was still complete leaves them
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    CALLS.clear()
    run(tmp_path)
    assert CALLS == []
    assert not any(path.exists() for path in leftovers)
    assert not [p.name for p in lang_dir.glob(".toy_upper.*")]


def test_config_change_reruns_stage_and_everything_after(tmp_path):
    run(tmp_path)
    CALLS.clear()
    run(tmp_path, ["toy_make.words=5"])
    assert CALLS == ["toy_make", "toy_upper"]
    assert (tmp_path / "data/hu/toy_upper/upper.txt").read_text().count("\n") == 5


def test_runtime_field_change_does_not_rerun(tmp_path):
    run(tmp_path)
    CALLS.clear()
    run(tmp_path, ["toy_make.verbose=true"])
    assert CALLS == []


def test_downstream_config_change_reruns_only_downstream(tmp_path):
    run(tmp_path)
    CALLS.clear()
    run(tmp_path, ["toy_upper.sleep_s=0.01"])
    assert CALLS == ["toy_upper"]


def test_a_new_output_format_shows_the_stage_stale_and_reruns_it(tmp_path, monkeypatch):
    """A stage whose code now makes other outputs (its output_format raised) is stale in status (and so are the stages
    after it) and re-runs; a manifest from before output_format was recorded counts as format 1."""
    pcfg = run(tmp_path)
    lang_dir = tmp_path / "data" / "hu"
    manifest = json.loads((lang_dir / "toy_make" / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["output_format"] == 1
    del manifest["output_format"]
    (lang_dir / "toy_make" / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["done", "done"]
    newer = dataclasses.replace(TOY_STAGES["toy_make"], output_format=2)
    monkeypatch.setitem(sys.modules, "pipeline.stages.toy_make", types.SimpleNamespace(STAGE=newer))
    rows = status_rows(pcfg, lang_dir)
    assert [(r["state"], r["reason"]) for r in rows] == [("stale", "output format changed (now 2)"),
                                                         ("stale", "input toy_make changed")]
    CALLS.clear()
    run(tmp_path)
    assert CALLS == ["toy_make"]  # the toy's new format writes the same bytes: toy_upper's input is unchanged
    assert json.loads((lang_dir / "toy_make" / MANIFEST).read_text(encoding="utf-8"))["output_format"] == 2
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["done", "done"]


def test_failed_stage_leaves_nothing_complete_and_status_says_failed(tmp_path):
    run(tmp_path)
    with pytest.raises(DataError):
        run(tmp_path, ["toy_make.words=4", "toy_upper.fail=true"])
    lang_dir = tmp_path / "data" / "hu"
    assert not (lang_dir / ".toy_upper.tmp").exists()
    pcfg = load_pipeline_config(tmp_path / "stages.yaml", "hu", ["toy_make.words=4", "toy_upper.fail=true"])
    states = {r["stage"]: r["state"] for r in status_rows(pcfg, lang_dir)}
    # the old toy_upper output is still there but no longer matches its input
    assert states == {"toy_make": "done", "toy_upper": "stale"}
    (lang_dir / "toy_upper").rename(lang_dir / "gone")
    states = {r["stage"]: (r["state"], r["reason"]) for r in status_rows(pcfg, lang_dir)}
    assert states["toy_upper"] == ("failed", "DataError: words.txt: bad input")


def test_status_reports_missing_done_and_changed_output(tmp_path):
    pcfg = load_pipeline_config(write_yaml(tmp_path, TOY_YAML), "hu")
    lang_dir = tmp_path / "data" / "hu"
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["missing", "missing"]
    run_stages(pcfg, lang_dir, pcfg.stage_order)
    rows = status_rows(pcfg, lang_dir)
    assert [r["state"] for r in rows] == ["done", "done"]
    assert rows[0]["counts"] == "words=3"
    (lang_dir / "toy_make" / "words.txt").write_text("x\n")
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["stale", "stale"]


def test_stage_whose_input_is_missing_is_refused(tmp_path):
    pcfg = load_pipeline_config(write_yaml(tmp_path, TOY_YAML), "hu")
    with pytest.raises(DataError, match="toy_upper needs toy_make, which is missing"):
        run_stages(pcfg, tmp_path / "data" / "hu", ["toy_upper"])


KILL_SCRIPT = """
import sys, types
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_runner
from pipeline.config import load_pipeline_config
from pipeline.runner import run_stages
for name, stage in test_runner.TOY_STAGES.items():
    sys.modules["pipeline.stages." + name] = types.SimpleNamespace(STAGE=stage)
pcfg = load_pipeline_config({yaml!r}, "hu", sys.argv[1:])
run_stages(pcfg, Path({lang_dir!r}), pcfg.stage_order)
"""


def test_killed_run_leaves_no_complete_looking_dir_and_rerun_completes(tmp_path):
    yaml_path = write_yaml(tmp_path, TOY_YAML)
    lang_dir = tmp_path / "data" / "hu"
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.format(tests=str(Path(__file__).parent), yaml=str(yaml_path), lang_dir=str(lang_dir)))
    proc = subprocess.Popen([sys.executable, str(script), "toy_upper.sleep_s=30"], cwd=tmp_path)
    deadline = time.time() + 30
    while not (lang_dir / ".toy_upper.tmp" / "upper.txt").exists():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (lang_dir / "toy_make" / MANIFEST).exists()
    assert not (lang_dir / "toy_upper").exists()
    pcfg = load_pipeline_config(yaml_path, "hu", ["toy_upper.sleep_s=30"])
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["done", "missing"]
    subprocess.run([sys.executable, str(script), "toy_upper.sleep_s=0"], cwd=tmp_path, check=True)
    assert (lang_dir / "toy_upper" / "upper.txt").read_text() == "KÖRTE\n" * 3
    assert not (lang_dir / ".toy_upper.tmp").exists()


@pytest.mark.parametrize("body, message", [
    ("stages: [toy_make]\ndefaults: {toy_make: {wrods: 3}}\nlanguages: {default: {}}\n",
     "defaults.toy_make.wrods: unknown key"),
    ("stages: [toy_make]\ndefaults: {toy_make: {words: three}}\nlanguages: {default: {}}\n",
     "defaults.toy_make.words: expected an integer, got str 'three'"),
    ("stages: [toy_make, nosuch]\nlanguages: {default: {}}\n", "stages: unknown stage 'nosuch'"),
    ("stages: [toy_make]\nlanguages: {default: {}, hu: {nosuch: {}}}\n", "languages.hu.nosuch: unknown stage"),
    ("stages: [toy_make]\nlanguages: {hu: {}}\n", "a 'default' profile is required"),
    ("stages: [toy_make]\nlanguages: {default: {}, 'Hu Nope': {}}\n", "languages.Hu Nope: not a language code"),
    ("stages: [toy_make]\nlanguags: {default: {}}\n", "languags: unknown key"),
    ("stages: [toy_make\n", "invalid YAML"),
])
def test_bad_stages_yaml_names_file_and_key(tmp_path, body, message):
    path = tmp_path / "stages.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(path, "hu")
    assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_bad_overrides(tmp_path):
    path = write_yaml(tmp_path, TOY_YAML)
    with pytest.raises(ConfigError, match="--set nosuch.x=1: unknown stage"):
        load_pipeline_config(path, "hu", ["nosuch.x=1"])
    with pytest.raises(ConfigError, match="expected STAGE.KEY=VALUE"):
        load_pipeline_config(path, "hu", ["toy_make"])
    with pytest.raises(ConfigError, match="toy_make.words: expected an integer"):
        load_pipeline_config(path, "hu", ["toy_make.words=1.5"])
    with pytest.raises(ConfigError, match="not a Wikipedia language code"):
        load_pipeline_config(path, "HU!")


def test_cli_exit_codes_on_bad_config(tmp_path):
    write_yaml(tmp_path, "stages: [download]\ndefaults: {download: {nosuch_key: 1}}\nlanguages: {default: {}}\n")
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--workdir", str(tmp_path)],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "stages.yaml" in lines[0] and "nosuch_key" in lines[0]


def test_bundled_stages_yaml_loads_for_every_profile():
    from pipeline.config import DEFAULT_CONFIG_PATH
    for lang in ("hu", "en", "fi"):
        pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, lang)
        assert pcfg.stage_order == ["download", "extract", "corpus", "sentences", "filter", "dedup", "vocab",
                                    "shard", "hdf5"]
        assert pcfg.idle == {"corpus": "no --corpus"}  # a run without --corpus: the Wikipedia pipeline as it was


@pytest.mark.slow
def test_status_judges_against_the_config_its_own_flags_give(tmp_path):
    """status has no memory of earlier commands: the same --dump/--set as the run give "done", others "stale"."""
    from pipeline.tools.sample_dump import write_sample_dump

    dump = write_sample_dump(tmp_path / "dump", 60, 0)
    cli = [sys.executable, "-m", "pipeline.cli"]
    work = ["--lang", "hu", "--workdir", str(tmp_path / "data")]
    subprocess.run(cli + ["run", *work, "--dump", str(dump), "--to", "extract", "--quiet",
                          "--set", "extract.articles_per_part=10"], check=True, cwd=tmp_path)

    def states(*extra):
        out = subprocess.run(cli + ["status", *work, *extra], check=True, capture_output=True, text=True,
                             cwd=tmp_path).stdout
        return {line.split()[0]: line.split()[1] for line in out.splitlines()[1:]}

    same = states("--dump", str(dump), "--set", "extract.articles_per_part=10")
    assert same["extract"] == "done" and same["download"] == "done"
    assert states("--dump", str(dump), "--set", "extract.articles_per_part=20")["extract"] == "stale"
    assert states("--dump", str(dump))["extract"] == "stale"  # not the last run's --set
    assert states("--set", "extract.articles_per_part=10")["download"] == "stale"  # not the last run's --dump


def test_output_rewritten_in_place_at_the_same_size_is_noticed(tmp_path):
    pcfg = run(tmp_path)
    lang_dir = tmp_path / "data" / "hu"
    words = lang_dir / "toy_make" / "words.txt"
    stat = words.stat()
    words.write_text(words.read_text().replace("körte", "körtE"))  # same size, new mtime: the cheap check sees it
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["stale", "stale"]
    words.write_text(words.read_text().replace("körtE", "körte"))
    os.utime(words, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["done", "done"]

    words.write_text(words.read_text().replace("körte", "körtE"))
    os.utime(words, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # bit rot: same size, same mtime
    assert [r["state"] for r in status_rows(pcfg, lang_dir)] == ["done", "done"]
    corrupt = corrupt_stages(lang_dir, pcfg.stage_order)
    assert corrupt == {lang_dir / "toy_make": f"{words}: sha256 differs from its manifest"}
    rows = status_rows(pcfg, lang_dir, corrupt)
    assert [(r["state"], r["reason"]) for r in rows] == [("stale", corrupt[lang_dir / "toy_make"]), ("stale", "input toy_make changed")]
    CALLS.clear()
    run_stages(pcfg, lang_dir, pcfg.stage_order, verify=True)
    assert CALLS == ["toy_make"]  # the same bytes again: toy_upper's input did not change
    assert words.read_text() == "körte\n" * 3 and corrupt_stages(lang_dir, pcfg.stage_order) == {}


def test_status_verify_exits_1_naming_the_changed_file(tmp_path):
    write_yaml(tmp_path, "stages: [download]\nlanguages: {default: {}}\n")
    from pipeline.tools.sample_dump import write_sample_dump
    dump = write_sample_dump(tmp_path / "dump", 20, 0)
    cli = [sys.executable, "-m", "pipeline.cli"]
    work = ["--lang", "hu", "--workdir", str(tmp_path / "data")]
    subprocess.run(cli + ["run", *work, "--dump", str(dump), "--quiet"], check=True, cwd=tmp_path)
    info = tmp_path / "data" / "hu" / "download" / "dump.json"
    stat = info.stat()
    info.write_bytes(info.read_bytes().replace(b"huwiki", b"HUWIKI"))
    os.utime(info, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert subprocess.run(cli + ["status", *work], cwd=tmp_path, capture_output=True).returncode == 0
    result = subprocess.run(cli + ["status", *work, "--verify"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"error: 1 stage(s) changed since they finished: {info}: sha256 differs from "
                                     "its manifest; `pipeline run --verify` runs them again")


@pytest.mark.parametrize("options, message", [
    (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler: only with --executor dask"),
    (["--executor", "spark"], "--executor spark: unknown executor (local or dask)"),
])
def test_executor_options_are_checked_in_one_line(tmp_path, options, message):
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--workdir", str(tmp_path),
                             *options], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {message}"


def test_half_written_files_in_a_stage_cache_go_with_the_next_attempt(tmp_path):
    cache = tmp_path / "data" / "hu" / ".cache" / "toy_make"
    (cache / "sub").mkdir(parents=True)
    for name in ("kept.part", "sub/result.hdf5.tmp", "result.done.json.tmp"):
        (cache / name).write_text("x")
    run(tmp_path)
    assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) == ["kept.part"]


@dataclasses.dataclass(frozen=True)
class _ToyFilterConfig:
    drop: str = ""  # a count the toy filter leaves out of its result: "total:KEY" or "source:KEY"


def toy_filter(config: _ToyFilterConfig, ctx) -> StageCounts:
    (ctx.out_dir / "part-00000.txt").write_text("alma\n", encoding="utf-8")
    totals = {"documents_in": 2, "documents_kept": 1, "documents_written": 1}
    source = {"documents_kept": 1, "documents_written": 1}
    scope, _, key = config.drop.partition(":")
    (totals if scope == "total" else source).pop(key, None)
    return StageCounts(totals, sources={"wikipedia": source})


@pytest.mark.parametrize("drop", ["", "total:documents_written", "source:documents_kept"])
def test_a_stage_that_stops_returning_a_count_the_funnel_reads_fails_its_run(tmp_path, monkeypatch, drop):
    """The funnel's counts are checked as each stage returns them: a filter whose result lacks one (nothing renamed,
    only left out) fails its run naming the stage and the count, and leaves no done stage behind; with every count
    its run is done and `pipeline status`'s reader finds them."""
    from pipeline.funnel import Funnel
    from pipeline.runner import read_manifest

    monkeypatch.setitem(sys.modules, "pipeline.stages.filter",
                        types.SimpleNamespace(STAGE=Stage("filter", _ToyFilterConfig, toy_filter)))
    config = write_yaml(tmp_path, "stages: [filter]\nlanguages:\n  default: {}\n")
    pcfg = load_pipeline_config(config, "hu", [f"filter.drop={drop}"] if drop else [])
    lang_dir = tmp_path / "data" / "hu"
    if not drop:
        run_stages(pcfg, lang_dir, ["filter"])
        funnel = Funnel({"filter": read_manifest(lang_dir / "filter")})
        assert funnel.document_steps() == [("documents kept", {"wikipedia": 1}, 1)]
        return
    key = drop.partition(":")[2]
    named = key if drop.startswith("total") else f"sources.wikipedia.{key}"
    with pytest.raises(RuntimeError, match=rf"^stage filter returned no {named}, which the funnel reads"):
        run_stages(pcfg, lang_dir, ["filter"])
    assert status_rows(pcfg, lang_dir)[0]["state"] == "failed"


def test_every_count_the_funnel_reads_is_checked():
    """Each figure of FIGURES, left out of an otherwise complete result of its stage, is named by check_counts
    (a one-language run's per-source figures, the mix's per-language ones)."""
    from pipeline.funnel import FIGURES, check_counts

    for several_languages in (False, True):
        for stage in sorted({f.stage for f in FIGURES}):
            figures = [f for f in FIGURES if f.stage == stage]
            totals = {f.key: 1 for f in figures if f.total}
            sources = {f.key: 1 for f in figures if f.per_source}
            languages = {f.key: 1 for f in figures if f.per_language}

            def counts(without: str = "", scope: str = "") -> StageCounts:
                return StageCounts({k: v for k, v in totals.items() if (scope, k) != ("total", without)},
                                   sources={"web": {k: v for k, v in sources.items()
                                                    if (scope, k) != ("source", without)}},
                                   languages={"hu": {k: v for k, v in languages.items()
                                                     if (scope, k) != ("language", without)}})

            check_counts(stage, counts(), several_languages)
            for figure in figures:
                checked = [("total", figure.total), ("source", figure.per_source and not several_languages),
                           ("language", figure.per_language and several_languages)]
                for scope, _ in filter(lambda c: c[1], checked):
                    with pytest.raises(RuntimeError, match=rf"stage {stage} returned no \S*{figure.key}\b"):
                        check_counts(stage, counts(figure.key, scope), several_languages)


def test_inputs_are_read_by_language_in_either_kind_of_run(tmp_path):
    """An input label reads as its manifest writes it (`dedup`, `hu/dedup`); a stage reads its inputs by language
    the same way in a one-language run ({its language: the one directory}) and in the mix of several, with the
    config each ran with."""
    from pipeline.stages import InputLabel, StageContext

    for text, label in (("dedup", InputLabel("dedup")), ("hu/dedup", InputLabel("dedup", "hu")),
                        ("zh-min-nan/filter", InputLabel("filter", "zh-min-nan"))):
        assert InputLabel.parse(text) == label and str(label) == text
    one = StageContext(lang="hu", out_dir=tmp_path, inputs={"dedup": tmp_path / "d", "filter": tmp_path / "f"},
                       cache_dir=tmp_path / "c", input_configs={InputLabel("filter"): {"chars_per_word": 2.0}})
    assert not one.several_languages and one.by_language("dedup") == {"hu": tmp_path / "d"}
    assert one.config_by_language("filter") == {"hu": {"chars_per_word": 2.0}}
    mix = StageContext(lang="fi+hu", out_dir=tmp_path, inputs={"vocab": tmp_path / "v"}, cache_dir=tmp_path / "c",
                       language_inputs={InputLabel(stage, lang): tmp_path / lang / stage
                                        for lang in ("fi", "hu") for stage in ("dedup", "filter")},
                       input_configs={InputLabel("filter", "fi"): {"chars_per_word": None}})
    assert mix.several_languages and mix.by_language("dedup") == {"fi": tmp_path / "fi" / "dedup",
                                                                  "hu": tmp_path / "hu" / "dedup"}
    assert mix.config_by_language("filter") == {"fi": {"chars_per_word": None}, "hu": {}}
    assert mix.by_language("vocab") == {}


def test_keep_final_drops_what_every_reader_has_read_and_remakes_it_when_needed(tmp_path):
    """--keep final: toy_make's file goes once toy_upper is done (its manifest stays, marked dropped, so the run
    still resumes and verifies); a toy_upper that must re-run gets toy_make made again first, with the same bytes."""
    path = write_yaml(tmp_path, TOY_YAML)
    lang_dir = tmp_path / "data" / "hu"

    def run_final(overrides=()):
        pcfg = load_pipeline_config(path, "hu", list(overrides))
        run_stages(pcfg, lang_dir, pcfg.stage_order, keep="final", verify=True)
        return pcfg

    pcfg = run_final()
    assert sorted(p.name for p in (lang_dir / "toy_make").iterdir()) == [MANIFEST]
    made = json.loads((lang_dir / "toy_make" / MANIFEST).read_text(encoding="utf-8"))
    assert made["dropped"] == {"bytes": len("körte\n".encode()) * 3, "files": 1}
    assert (lang_dir / "toy_upper" / "upper.txt").read_text(encoding="utf-8") == "KÖRTE\n" * 3
    rows = {row["stage"]: row for row in status_rows(pcfg, lang_dir)}
    assert rows["toy_make"]["state"] == "dropped" and "--keep final" in rows["toy_make"]["reason"]
    assert rows["toy_upper"]["state"] == "done"
    assert corrupt_stages(lang_dir, ["toy_make", "toy_upper"]) == {}

    CALLS.clear()
    run_final()
    assert CALLS == []  # resumes: nothing to do
    run(tmp_path)  # --keep all later: still nothing to do, the dropped stage stays dropped
    assert CALLS == []

    run_final(["toy_upper.sleep_s=0.01"])
    assert CALLS == ["toy_make", "toy_upper"]
    remade = json.loads((lang_dir / "toy_make" / MANIFEST).read_text(encoding="utf-8"))
    assert remade["outputs"]["words.txt"]["sha256"] == made["outputs"]["words.txt"]["sha256"]
    assert "dropped" in remade and not (lang_dir / "toy_make" / "words.txt").exists()


def test_keep_takes_all_or_final(tmp_path):
    write_yaml(tmp_path, TOY_YAML)
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--keep", "some",
                             "--workdir", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip() == "error: --keep some: all or final"


def test_a_running_stage_finds_no_list_of_its_inputs_files_held_in_memory(tmp_path, monkeypatch):
    """The runner holds each judged stage's manifest without its list of files (held()): a stage of 10^5 parts
    listed them in ~100 MB of objects, kept while every later stage ran. What the main process has allocated when a
    stage starts is the same after an input of 2 files as after one of 4,000."""
    import pathlib
    import tracemalloc

    def make_files(config: MakeConfig, ctx) -> StageCounts:
        for i in range(config.words):
            (ctx.out_dir / f"part-{i:05d}.txt").write_text(config.word, encoding="utf-8")
        (ctx.out_dir / "words.txt").write_text(config.word + "\n", encoding="utf-8")
        return StageCounts({"words": config.words})

    allocated = []

    def measure(config: UpperConfig, ctx) -> StageCounts:
        if tracemalloc.is_tracing():  # but the table of interned strings, whose size pathlib's parsing leaves larger
            held_now = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, pathlib.__file__)])
            allocated.append(sum(stat.size for stat in held_now.statistics("filename")))
        return upper_words(config, ctx)

    monkeypatch.setitem(sys.modules, "pipeline.stages.toy_make",
                        types.SimpleNamespace(STAGE=Stage("toy_make", MakeConfig, make_files)))
    monkeypatch.setitem(sys.modules, "pipeline.stages.toy_upper", types.SimpleNamespace(
        STAGE=Stage("toy_upper", UpperConfig, measure, inputs=("toy_make",))))
    for files in (2, 4000):
        (tmp_path / str(files)).mkdir()
        pcfg = run(tmp_path / str(files), [f"toy_make.words={files}"])
        lang_dir = tmp_path / str(files) / "data" / "hu"
        tracemalloc.start()
        try:
            run_stages(pcfg, lang_dir, ["toy_upper"], force=True)
        finally:
            tracemalloc.stop()
        assert json.loads((lang_dir / "toy_make" / MANIFEST).read_text(encoding="utf-8"))["counts"]["words"] == files
    assert len(allocated) == 2 and allocated[1] - allocated[0] < 300_000, allocated  # listed: 3.4 MB
