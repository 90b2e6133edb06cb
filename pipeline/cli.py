"""`pipeline` command line: run, stage, status (and the commands other modules register here)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from wiki2bert_core.errors import ConfigError, DataError, run_cli
from wiki2bert_core.utf8_paths import utf8_names, utf8_path, utf8_text
from pipeline.config import default_config_path, load_pipeline_config, origin
from wiki2bert_core.log import setup_logging
from pipeline.workdir import exit_nonzero_after_signal, lock_work_dir

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn a Wikipedia dump into BERT pretraining data.")

LangOpt = typer.Option(..., "--lang", callback=utf8_text,
                       help="Wikipedia language code (hu, en, fi, ...), or several separated by commas (hu,fi,et): "
                       "one model's data, its vocabulary and shards in <workdir>/<codes sorted, joined by +>/ "
                       "(docs/pipeline.md, Several languages)")
WorkdirOpt = typer.Option(Path("data"), "--workdir", callback=utf8_path,
                          help="Work directory; stage outputs go to <workdir>/<lang>/<stage>/")
ConfigOpt = typer.Option(None, "--config", callback=utf8_path,
                         help="stages.yaml to use (default: ./stages.yaml, else the bundled one)")
DumpOpt = typer.Option(None, "--dump", callback=utf8_path,
                       help="Dump to use: local path, file:// or http(s):// URL (default: resolve from Wikimedia); "
                       "with several languages LANG=PATH, one for each language that has one")
CorpusOpt = typer.Option(None, "--corpus", callback=utf8_path,
                         help="A text corpus beside (or, without --dump, instead of) the dump: [NAME=]PATH[:WEIGHT], "
                         "PATH a file, directory or glob of .jsonl(.gz/.zst), .parquet or .txt (repeatable; "
                         "docs/pipeline.md, Sources); with several languages LANG=[NAME=]PATH[:WEIGHT]")
TokenizerOpt = typer.Option(None, "--tokenizer", callback=utf8_path,
                            help="Adopt this tokenizer instead of learning one: a Hugging Face tokenizer folder, a "
                            "tokenizer.json, a SentencePiece .model or a vocab.txt (vocab.tokenizer; docs/pipeline.md, "
                            "Bring your own tokenizer)")
SetOpt = typer.Option(None, "--set", callback=utf8_text,
                      help="Override a parameter: STAGE.KEY=VALUE (repeatable); with several languages "
                      "LANG:STAGE.KEY=VALUE sets it for one language")
WorkersOpt = typer.Option(1, "--workers", min=1, help="Worker processes for parallel stages")
ForceOpt = typer.Option(False, "--force", help="Re-run stages even when their outputs are up to date")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bars; only warnings and errors on stderr")
ExecutorOpt = typer.Option("local", "--executor", help="Where parallel stages run: local (a process pool of "
                           "--workers) or dask (Dask distributed, docs/cluster.md)")
SchedulerOpt = typer.Option(None, "--scheduler", help="--executor dask: a running scheduler (tcp://HOST:PORT); "
                            "default: a LocalCluster of --workers processes")
VerifyOpt = typer.Option(False, "--verify", help="Check every finished stage's files against the sha256 in its "
                         "manifest (reads them all); a stage whose bytes changed counts as stale")


@app.command()
def run(lang: str = LangOpt, dump: Optional[list[str]] = DumpOpt, corpus: Optional[list[str]] = CorpusOpt,
        tokenizer: Optional[Path] = TokenizerOpt, workdir: Path = WorkdirOpt,
        from_stage: Optional[str] = typer.Option(None, "--from", help="First stage to run"),
        to_stage: Optional[str] = typer.Option(None, "--to", help="Last stage to run"),
        set_: Optional[list[str]] = SetOpt, workers: int = WorkersOpt, force: bool = ForceOpt,
        quiet: bool = QuietOpt, config: Optional[Path] = ConfigOpt, verify: bool = VerifyOpt,
        executor: str = ExecutorOpt, scheduler: Optional[str] = SchedulerOpt,
        keep: str = typer.Option("all", "--keep", help="all: keep every stage's files; final: remove a stage's "
                                 "files once every stage that reads them is done (the manifest stays: the run "
                                 "still resumes, and a dropped stage is made again when a stage that reads it must "
                                 "re-run), keeping the vocabulary and the HDF5 files (docs/pipeline.md, Disk)")
        ) -> None:
    """Run the stages of stages.yaml in order, skipping those already done."""
    from pipeline.runner import KEEP_CHOICES

    if keep not in KEEP_CHOICES:
        raise ConfigError(f"--keep {keep}: all or final")
    workdir = _executor_workdir(executor, scheduler, workdir)
    pcfg, log = _prepare(lang, dump, corpus, tokenizer, workdir, set_, quiet, config)
    order = _stage_order(pcfg)
    start = _index(order, from_stage, "--from") if from_stage else 0
    end = _index(order, to_stage, "--to") if to_stage else len(order) - 1
    if start > end:
        raise ConfigError(f"--from {from_stage} comes after --to {to_stage} in {pcfg.path}")
    _run(pcfg, workdir, order[start:end + 1], executor, scheduler, workers=workers, force=force, quiet=quiet,
         log=log, verify=verify, keep=keep)


@app.command()
def stage(name: str = typer.Argument(..., help="Stage to run"), lang: str = LangOpt,
          dump: Optional[list[str]] = DumpOpt, corpus: Optional[list[str]] = CorpusOpt,
          tokenizer: Optional[Path] = TokenizerOpt, workdir: Path = WorkdirOpt,
          set_: Optional[list[str]] = SetOpt, workers: int = WorkersOpt, force: bool = ForceOpt,
          quiet: bool = QuietOpt, config: Optional[Path] = ConfigOpt, verify: bool = VerifyOpt,
          executor: str = ExecutorOpt, scheduler: Optional[str] = SchedulerOpt) -> None:
    """Run one stage (its inputs must be done); with several languages, a language's stage runs for each."""
    workdir = _executor_workdir(executor, scheduler, workdir)
    pcfg, log = _prepare(lang, dump, corpus, tokenizer, workdir, set_, quiet, config)
    _index(_stage_order(pcfg), name, "stage")
    idle = [config.idle.get(name) for config in (pcfg.languages or {pcfg.lang: pcfg}).values()]
    if all(idle) and not (pcfg.languages and name in pcfg.stage_order):  # the mix's own stages have work
        raise ConfigError(f"stage {name}: nothing to do with these flags ({idle[0]})")
    _run(pcfg, workdir, [name], executor, scheduler, workers=workers, force=force, quiet=quiet, log=log,
         verify=verify)


@app.command()
def status(lang: str = LangOpt, dump: Optional[list[str]] = DumpOpt, corpus: Optional[list[str]] = CorpusOpt,
           tokenizer: Optional[Path] = TokenizerOpt, workdir: Path = WorkdirOpt, set_: Optional[list[str]] = SetOpt,
           config: Optional[Path] = ConfigOpt, verify: bool = VerifyOpt) -> None:
    """Print each stage's state (done / stale / missing / failed / off: no work with these flags) against the
    config that the same --dump, --corpus, --tokenizer, --set and --config would run, with outputs, key counts and
    duration, then each source's documents, kept tokens, weight and training share (several languages: each
    language's stages, then the mix's and each language's share); with --verify, exit 1 when a finished stage's
    files no longer match their sha256."""
    from pipeline.funnel import Funnel, language_table, source_table
    from pipeline.runner import DONE, DROPPED, corrupt_stages, read_manifest, status_rows

    pcfg = _load(lang, dump, corpus, tokenizer, set_, config)
    corrupt = {}
    for name, (config_, lang_dir, stages) in _stage_dirs(pcfg, workdir).items():
        if verify:
            corrupt.update(corrupt_stages(lang_dir, [n for n in stages if n not in config_.idle]))
        rows = [row for row in status_rows(config_, lang_dir, corrupt) if row["stage"] in stages]
        if pcfg.languages:
            typer.echo(f"{name} ({lang_dir}):")
        _echo_table(rows, ["stage", "state", "outputs", "counts", "duration"],
                    lambda r: f"  ({r['reason']})" if r["state"] in ("stale", "failed", "off", "dropped") else "")
        funnel = Funnel({r["stage"]: read_manifest(lang_dir / r["stage"]) for r in rows
                         if r["state"] in (DONE, DROPPED)})
        for table in (source_table(funnel.source_rows()), language_table(funnel)):
            if table:
                typer.echo("")
                _echo_table(table, list(table[0]))
        if pcfg.languages:
            typer.echo("")
    if corrupt:
        raise DataError(f"{len(corrupt)} stage(s) changed since they finished: {'; '.join(corrupt.values())}; "
                            "`pipeline run --verify` runs them again")


@app.command("config")
def show_config(lang: str = LangOpt, dump: Optional[list[str]] = DumpOpt, corpus: Optional[list[str]] = CorpusOpt,
                tokenizer: Optional[Path] = TokenizerOpt, set_: Optional[list[str]] = SetOpt,
                config: Optional[Path] = ConfigOpt) -> None:
    """Print every parameter's effective value for these flags (as `run` would use it) and what it means; runtime
    parameters (retries, timeouts) do not change a stage's output, so a stage done with other values stays done.
    With several languages: each language's own stages as LANG:STAGE.KEY (as --set takes them), then the mix's."""
    from wiki2bert_core.config import config_lines, config_to_dict

    pcfg = _load(lang, dump, corpus, tokenizer, set_, config)
    for config_, _, stages in _stage_dirs(pcfg, Path(".")).values():
        prefix = f"{config_.lang}:" if pcfg.languages and config_ is not pcfg else ""
        for name in stages:
            stage_config = config_.stage_configs[name]
            for line in config_lines(type(stage_config), config_to_dict(stage_config), f"{prefix}{name}.",
                                     "runtime: does not change the output"):
                if name == "filter":  # which layer set each threshold: a FineWeb-2 config, the profile, defaults
                    key = line.partition(":")[0][len(f"{prefix}{name}."):]
                    line += f"  [from {origin(config_.origins.get(name, {}), key)}]"
                typer.echo(line)


@app.command()
def hdf5(input_: Path = typer.Option(..., "--input", callback=utf8_path,
                                     help="Sentence-per-line text, a blank line after each document: a file, "
                                     "or a directory of *.txt files or of training_*/test_* shards"),
         vocab: Path = typer.Option(..., "--vocab", callback=utf8_path,
                                    help="vocab.txt, or any tokenizer --tokenizer takes: a Hugging Face "
                                    "tokenizer folder, a tokenizer.json, a SentencePiece .model"),
         out: Path = typer.Option(..., "--out", callback=utf8_path,
                                  help="Output directory (gets one subdirectory per variant)"),
         lowercase: Optional[bool] = typer.Option(None, "--lowercase/--no-lowercase",
                                                  help="Lowercase the text (uncased vocabularies: bert-base-uncased)"),
         strip_accents: Optional[bool] = typer.Option(None, "--strip-accents/--keep-accents",
                                                      help="Strip accents (default: when lowercasing, as BERT's "
                                                      "uncased models do)"),
         set_: Optional[list[str]] = typer.Option(None, "--set", callback=utf8_text,
                                                  help="Override a parameter: hdf5.KEY=VALUE"),
         workers: int = WorkersOpt, force: bool = typer.Option(False, "--force", help="Replace --out if it exists"),
         quiet: bool = QuietOpt) -> None:
    """Run the hdf5 stage on your own text and vocabulary (as NVIDIA's create_pretraining_data.py users do)."""
    from wiki2bert_core.config import layered
    from pipeline.config import parse_override
    from pipeline.text_files import check_text_shape
    from pipeline.stages.hdf5.stage import STAGE, run_standalone

    layers = []
    for item in set_ or []:
        _, key, value = parse_override(item, {"hdf5": STAGE})
        layers.append(({key: value}, f"--set {item}: hdf5"))
    config = layered(STAGE.config_cls, layers)
    log = setup_logging(None, quiet=quiet)
    texts = utf8_names(sorted(input_.glob("*.txt"))) if input_.is_dir() else [input_] if input_.is_file() else []
    check_text_shape(input_, texts, max(v.max_seq_length for v in config.variants), log)
    run_standalone(config, input_, vocab, out, lowercase=lowercase, strip_accents=strip_accents, workers=workers,
                   force=force, quiet=quiet, log=log)


@app.command()
def verify(path: Path = typer.Argument(..., callback=utf8_path,
                                       help="An HDF5 file, or a directory searched recursively"),
           vocab: Optional[Path] = typer.Option(None, "--vocab", callback=utf8_path,
                                                help="vocab.txt the ids index (default: the vocab.txt next to the "
                                                "data, as the hdf5 stage writes it)")) -> None:
    """Check HDF5 pretraining files (NVIDIA's layout) and print their statistics; exit 1 on any problem."""
    from pipeline.tools.verify import format_report, verify_path

    report = verify_path(path, vocab)
    typer.echo(format_report(report))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def report(lang: str = LangOpt, workdir: Path = WorkdirOpt,
           out: Optional[Path] = typer.Option(None, "--out", callback=utf8_path,
                                              help="Directory for report.html and its PNGs "
                                              "(default: <workdir>/<lang>/report)")) -> None:
    """A one-page HTML report with PNG figures of the data the finished stages made; prints its path. Exit 1 when a
    stage's files (or its inputs) are missing or changed since it finished, or an HDF5 file does not read: the
    page names them and leaves their figures out."""
    from pipeline.tools.report import write_report

    from pipeline.languages import language_list, mix_name

    languages = language_list(lang)
    lang_dir = workdir / (mix_name(languages) if len(languages) > 1 else lang)
    path, not_current, damaged = write_report(lang_dir, out or lang_dir / "report")
    typer.echo(path)
    problems = []
    if not_current:
        problems.append(f"{len(not_current)} stage{'s' if len(not_current) > 1 else ''} not current: "
                        f"{'; '.join(not_current)} (`pipeline run --lang {lang}` makes them again)")
    problems += damaged
    if problems:
        raise DataError(f"{lang_dir}: {'; '.join(problems)}; the report leaves their figures out")


@app.command("plan")
def plan_command(lang: str = LangOpt, dump: Optional[list[str]] = DumpOpt, corpus: Optional[list[str]] = CorpusOpt,
                 tokenizer: Optional[Path] = TokenizerOpt, set_: Optional[list[str]] = SetOpt,
                 config: Optional[Path] = ConfigOpt,
                 cores: int = typer.Option(..., "--cores", min=1, help="Cores the run will have (its --workers)"),
                 sample_mb: float = typer.Option(50.0, "--sample-mb", min=0.001, help="MB of input (as stored) "
                                                 "in the larger sample; the smaller is a quarter of it"),
                 workdir: Optional[Path] = typer.Option(None, "--workdir", callback=utf8_path, help="Where the "
                                                        "samples run (default: a temporary directory, removed after)"),
                 as_json: bool = typer.Option(False, "--json", help="Print the prediction as JSON")) -> None:
    """Predict a run's wall time on --cores cores, CPU time, disk and memory per process, stage by stage, from two
    samples of its inputs run through every stage (docs/pipeline.md, Plan a run)."""
    import dataclasses
    import json
    import tempfile

    from pipeline.tools.plan import format_plan, plan

    pcfg = _load(lang, dump, corpus, tokenizer, set_, config)
    if pcfg.languages:
        raise ConfigError(f"--lang {lang}: pipeline plan predicts one language's run at a time")
    source = pcfg.stage_configs["download"].source if "download" not in pcfg.idle else None
    if "download" not in pcfg.idle and (source is None or "://" in source or not Path(source).is_file()):
        raise ConfigError(f"--dump {source or '(none)'}: pipeline plan samples a local dump file; download it first")
    corpora = {} if "corpus" in pcfg.idle else {
        name: {**dataclasses.asdict(src), "weight": pcfg.stage_configs["shard"].weights.get(name)}
        for name, src in pcfg.stage_configs["corpus"].sources.items()}
    flags = [item for s in set_ or [] for item in ("--set", s)] + (["--config", str(config)] if config else []) + \
        (["--tokenizer", str(tokenizer)] if tokenizer else [])
    with tempfile.TemporaryDirectory(prefix="wiki2bert-plan-") as temporary:
        where = (workdir or Path(temporary)).resolve()
        where.mkdir(parents=True, exist_ok=True)
        with open(where / "plan.log", "a", encoding="utf-8") as log:
            result = plan(lang, flags, Path(source) if source else None, corpora, cores, sample_mb, where, log)
    typer.echo(json.dumps(result, indent=2) if as_json else format_plan(result))


@app.command("sample-dump")
def sample_dump(out_dir: Path = typer.Argument(..., callback=utf8_path, help="Directory for the dump and its index"),
                pages: int = typer.Option(400, "--pages", min=1, help="Articles (plus redirects, stubs, talk pages, ...)"),
                seed: int = typer.Option(0, "--seed", help="Same seed, same bytes"),
                lang: str = typer.Option("hu", "--lang", help="hu (Hungarian-like), fi (Finnish-like), ru "
                                         "(Russian-like, Cyrillic) or el (Greek-like): for a generated run of "
                                         "several languages"),
                mb: Optional[float] = typer.Option(None, "--mb", min=0.001, help="Instead of --pages: about this "
                                                   "many MB of XML (Hungarian only)"),
                workers: int = typer.Option(1, "--workers", min=1, help="Processes making the Hungarian dump's "
                                            "blocks of 10,000 articles (the same bytes whatever their number)"),
                quiet: bool = QuietOpt) -> None:
    """Write the generated Hungarian-like (or Finnish-, Russian-, Greek-like) sample dump (multistream + index, no
    network) and print its path. Any size: Hungarian pages are generated and written a block at a time (memory
    does not grow with --pages)."""
    from pipeline.tools.sample_dump import SAMPLE_LANGUAGES, articles_for_mb, write_sample_dump

    if lang not in SAMPLE_LANGUAGES:
        raise ConfigError(f"--lang {lang}: the sample dump is in {', '.join(SAMPLE_LANGUAGES)}")
    if mb is not None and lang != "hu":
        raise ConfigError(f"--mb: only with --lang hu (give --lang {lang} a --pages)")
    pages = articles_for_mb(mb) if mb is not None else pages
    typer.echo(write_sample_dump(out_dir, pages, seed, quiet=quiet, language=lang, workers=workers))


@app.command("sample-corpus")
def sample_corpus(out_dir: Path = typer.Argument(..., callback=utf8_path,
                                                 help="Directory for the pages (OUT_DIR/pages) and truth.json: "
                                                 "new, empty or an earlier sample's (replaced whole)"),
                  docs: int = typer.Option(300, "--docs", min=1, help="Pages (each kind in every 100)"),
                  files: int = typer.Option(2, "--files", min=1, help="Files the pages are spread over"),
                  fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet (row groups of 64 pages)"),
                  seed: int = typer.Option(0, "--seed", help="Same seed, same bytes"),
                  mb: Optional[float] = typer.Option(None, "--mb", min=0.001, help="Instead of --docs: about this "
                                                     "many MB of page text"),
                  workers: int = typer.Option(1, "--workers", min=1, help="Processes making the pages, in blocks "
                                              "of 10,000 (the same bytes whatever their number)"),
                  quiet: bool = QuietOpt) -> None:
    """Write the generated web-like corpus (Hungarian-like pages with boilerplate, copies, spam, code, other
    languages, long articles) into OUT_DIR/pages and truth.json saying which page is which beside it; print the
    pages directory (for --corpus)."""
    from pipeline.tools.sample_corpus import pages_for_mb, write_sample_corpus

    if fmt not in ("jsonl", "parquet"):
        raise ConfigError(f"--format {fmt}: jsonl or parquet")
    docs = pages_for_mb(mb) if mb is not None else docs
    typer.echo(write_sample_corpus(out_dir, docs, seed, files, fmt, quiet=quiet, workers=workers))


def _load(lang: str, dumps: list[str] | None, corpora: list[str] | None, tokenizer: Path | None,
          overrides: list[str] | None, config: Path | None):
    """The config --lang and the other flags give: one language's, or the mix's of several (pipeline/languages.py)."""
    from pipeline.languages import language_list, load_languages_config
    from pipeline.sources import flag_values

    path = config or default_config_path()
    languages = language_list(lang)
    if len(languages) > 1:
        return load_languages_config(path, languages, overrides or [], dumps or [], corpora or [], tokenizer)
    if len(dumps or []) > 1:
        raise ConfigError(f"--dump {dumps[1]}: a second --dump (one language reads one dump)")
    dump = dumps[0].removeprefix(f"{lang}=") if dumps else None
    return load_pipeline_config(path, lang, overrides or [], flag_values(dump, corpora, tokenizer))


def _stage_dirs(pcfg, workdir: Path) -> dict[str, tuple]:
    """{name: (config, directory, its stages)} of what a command runs: the one language's, or each language's own
    stages and the mix's."""
    if not pcfg.languages:
        return {pcfg.lang: (pcfg, workdir / pcfg.lang, pcfg.stage_order)}
    own = {lang: (config, workdir / lang, [n for n in config.stage_order if n not in pcfg.stage_order])
           for lang, config in pcfg.languages.items()}
    return {**own, pcfg.lang: (pcfg, workdir / pcfg.lang, pcfg.stage_order)}


def _stage_order(pcfg) -> list[str]:
    """Every stage of the run in order (several languages: the languages' own, then the mix's)."""
    return next(iter(pcfg.languages.values())).stage_order if pcfg.languages else pcfg.stage_order


def _prepare(lang, dumps, corpora, tokenizer, workdir, overrides, quiet, config):
    """The config (and its local dumps' languages checked), each directory the run writes locked, and the log
    (in the one language's directory, or the mix's); a language without a profile of its own is said once."""
    from pipeline.languages import check_local_dumps

    pcfg = _load(lang, dumps, corpora, tokenizer, overrides, config)
    check_local_dumps(pcfg)
    for _, lang_dir, _ in _stage_dirs(pcfg, workdir).values():
        lock_work_dir(lang_dir)
    log = setup_logging(workdir / pcfg.lang / "pipeline.log", quiet=quiet)
    for config_ in (pcfg.languages or {pcfg.lang: pcfg}).values():
        _say_generic_web_thresholds(config_, log)
        if config_.profile != config_.lang:
            log.warning("%s: no profile in %s; the `default` profile applies (the rule splitter, no stop words, "
                        "the default filter and vocabulary settings)", config_.lang, config_.path)
    return pcfg, log


def _say_generic_web_thresholds(pcfg, log) -> None:
    """Warns when a corpus is read with the web rule set's generic thresholds: the language has no FineWeb-2
    figures in its profile and filter.thresholds_from names no config."""
    from pipeline.sources import corpora

    origins = pcfg.origins.get("filter", {})
    if "filter" not in pcfg.stage_configs or not corpora(pcfg.stage_configs) or any(
            key.startswith("rule_sets.web.") and not where.endswith(": defaults.filter")
            for key, where in origins.items()):
        return
    log.warning("%s: no FineWeb-2 thresholds for this language (none in its stages.yaml profile, no "
                "filter.thresholds_from): the web rule set uses generic ones (datatrove's defaults); set "
                "filter.thresholds_from to FineWeb-2's config of the language", pcfg.lang)


def _run(pcfg, workdir: Path, names: list[str], executor: str, scheduler: str | None, **options) -> None:
    """The stages `names` of one language, or of several (pipeline/languages.py), on the executor."""
    from pipeline.languages import run_languages
    from pipeline.runner import run_stages

    with _open_executor(executor, scheduler, options["workers"], workdir / pcfg.lang) as ex:
        if pcfg.languages:
            run_languages(pcfg, workdir, names, executor=ex, **options)
        else:
            run_stages(pcfg, workdir / pcfg.lang, names, executor=ex, **options)


def _executor_workdir(executor: str, scheduler: str | None, workdir: Path) -> Path:
    """Check --executor/--scheduler; Dask workers get absolute paths (their working directory is not ours)."""
    if executor not in ("local", "dask"):
        raise ConfigError(f"--executor {executor}: unknown executor (local or dask)")
    if scheduler is not None and executor != "dask":
        raise ConfigError("--scheduler: only with --executor dask")
    return workdir.resolve() if executor == "dask" else workdir


@contextlib.contextmanager
def _open_executor(executor: str, scheduler: str | None, workers: int, lang_dir: Path):
    """The executor --executor names: a Dask cluster's, or None for local (each stage context makes its
    LocalExecutor: pipeline/stages/__init__.py)."""
    from pipeline.executors.dask_cluster import dask_executor, remove_leftover_semaphores

    remove_leftover_semaphores(lang_dir)  # a killed --executor dask run's, whichever executor runs now
    if executor == "local":
        yield None
        return
    with dask_executor(scheduler, workers, lang_dir) as ex:
        yield ex


def _echo_table(rows: list[dict], columns: list[str], suffix=lambda row: "") -> None:
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    typer.echo("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    for r in rows:
        typer.echo("  ".join(r[c].ljust(widths[c]) for c in columns).rstrip() + suffix(r))


def _index(order: list[str], name: str, flag: str) -> int:
    if name not in order:
        raise ConfigError(f"{flag} {name}: unknown stage (stages: {', '.join(order)})")
    return order.index(name)


def main() -> None:
    with exit_nonzero_after_signal():
        run_cli(app, "interrupted; re-run the same command to continue")


if __name__ == "__main__":
    main()
