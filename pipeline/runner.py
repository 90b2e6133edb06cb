"""Runs stages in order, each into a temporary directory renamed into place with a `_manifest.json`.

A stage is done when its manifest matches its current config hash and the fingerprints of its
inputs; a done stage is skipped, and a changed stage re-runs along with everything whose inputs change.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import platform
import time
from importlib import metadata
from pathlib import Path

from wiki2bert_core.config import config_to_dict, hashed_values
from pipeline.config import PipelineConfig
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import (MANIFEST, atomic_write, read_json, remove_tree, replace_dir, sha256_file,
                                  write_json)
from wiki2bert_core.log import progress
from pipeline.executors.local import Executor
from pipeline.funnel import check_counts
from pipeline.stages import InputLabel, StageContext, stage_by_name
from pipeline.workdir import raise_if_interrupted

DONE, STALE, MISSING, FAILED = "done", "stale", "missing", "failed"
OFF = "off"  # no work with these flags (pipeline/sources.py): not run, and not read by the stages after it
# done, but its output files were removed once every stage that reads them was done (`pipeline run --keep final`):
# the stages after it stay done, and one that must run again has it re-made first
DROPPED = "dropped"
KEEP_CHOICES = ("all", "final")
# what --keep final keeps besides the stages nothing reads: the vocabulary (pretraining and fine-tuning use its
# tokenizer files)
KEPT_BY_FINAL = ("vocab",)


@dataclasses.dataclass(frozen=True)
class StageState:
    name: str
    state: str
    reason: str
    manifest: dict | None  # as held(): without its list of files


def held(manifest: dict) -> dict:
    """A manifest as the runner holds it while later stages are judged and run: the count, bytes and fingerprint of
    its outputs in place of their list (the list of a stage of 10^5 parts takes ~100 MB as Python objects). A
    manifest without what a fingerprint needs (edited by hand) gets None: no stage's recorded input matches it."""
    outputs = manifest.get("outputs", {})
    whole = all(key in manifest for key in ("stage", "config_hash", "outputs"))
    return {**{key: value for key, value in manifest.items() if key != "outputs"}, "output_files": len(outputs),
            "output_bytes": sum(meta.get("size", 0) for meta in outputs.values()),
            "fingerprint": fingerprint(manifest) if whole else None}


def config_hash(config) -> str:
    """Hash of the config fields that can change a stage's output (those declared changeable, such as retries, and
    those added later while at their default are left out)."""
    return _hash_json(hashed_values(config))


def fingerprint(manifest: dict) -> str:
    """What downstream stages depend on: this stage's config and the exact bytes it wrote (and read from outside
    the work directory); of a held() manifest, the one it was made with."""
    if "fingerprint" in manifest:
        return manifest["fingerprint"]
    outputs = {rel: {k: meta[k] for k in ("size", "sha256")} for rel, meta in manifest["outputs"].items()}
    return _hash_json({"stage": manifest["stage"], "config_hash": manifest["config_hash"], "outputs": outputs,
                       **({"sources": _content_only(manifest["sources"])} if manifest.get("sources") else {})})


def _content_only(sources: dict) -> dict:
    """Source fingerprints without their mtimes: touching a file changes no output downstream."""
    return {label: {k: v for k, v in fp.items() if k != "mtime_ns"} if isinstance(fp, dict) else fp
            for label, fp in sources.items()}


def _changed_source(recorded: dict, current: dict) -> str | None:
    for label in sorted(set(recorded) | set(current)):
        if recorded.get(label) != current.get(label):
            return label
    return None


def read_manifest(stage_dir: Path) -> dict | None:
    return read_json(stage_dir / MANIFEST, default=None)


def input_dir(lang_dir: Path, label: InputLabel) -> Path:
    """The directory of an input of a stage of `lang_dir`: a stage of the same directory, or a language's stage of a
    run of several languages (<workdir>/<lang>/<stage>)."""
    return lang_dir.parent / label.language / label.stage if label.language else lang_dir / label.stage


def _input_config(pcfg: PipelineConfig | None, label: InputLabel) -> PipelineConfig | None:
    """The config that judges the input `label` of a stage of `pcfg`: a language's own for a language's stage."""
    if pcfg is None or label.language is None:
        return pcfg
    return pcfg.languages[label.language]


def stage_state(pcfg: PipelineConfig | None, lang_dir: Path, name: str, known: dict[Path, StageState] | None = None,
                corrupt: dict[Path, str] | None = None) -> StageState:
    """The state of `name`, judged against the current config and its upstream manifests; `corrupt` (from
    corrupt_stages) makes the stages whose bytes no longer match their sha256 stale. Without a config (`pcfg`
    None), by the manifests alone: whether each stage's files and inputs are still those it recorded, whatever
    settings made them. `known` holds the states judged so far, by stage directory."""
    known = {} if known is None else known
    corrupt = corrupt or {}
    stage_dir = lang_dir / name
    if stage_dir in known:
        return known[stage_dir]
    stage = stage_by_name(name)
    if pcfg is not None and name in pcfg.idle:
        known[stage_dir] = StageState(name, OFF, pcfg.idle[name], None)
        return known[stage_dir]
    manifest = read_manifest(stage_dir)
    failure = _failure_marker(lang_dir, name)
    recorded_inputs = set((manifest or {}).get("inputs", {}))
    inputs = pcfg.inputs_of(name) if pcfg is not None else sorted(
        (label for label in map(InputLabel.parse, recorded_inputs) if label.stage in stage.inputs + stage.mix_inputs),
        key=str)
    if manifest is None:
        state = StageState(name, FAILED if failure.exists() else MISSING,
                           failure.read_text(encoding="utf-8").strip() if failure.exists() else "not run", None)
    elif pcfg is not None and manifest.get("config_hash") != config_hash(pcfg.stage_configs[name]):
        state = StageState(name, STALE, "config changed", manifest)
    elif recorded_inputs != set(map(str, inputs)):
        state = StageState(name, STALE, f"reads {', '.join(map(str, inputs))} now, not "
                                        f"{', '.join(sorted(recorded_inputs))}", manifest)
    elif pcfg is not None and manifest.get("output_format", 1) != stage.output_format:
        state = StageState(name, STALE, f"output format changed (now {stage.output_format})", manifest)
    else:
        state = StageState(name, DONE, "", manifest)
        for upstream in inputs:
            up = upstream_state(pcfg, lang_dir, upstream, known, corrupt)
            if up.state not in (DONE, DROPPED) or \
                    manifest.get("inputs", {}).get(str(upstream)) != fingerprint(up.manifest):
                state = StageState(name, STALE, f"input {upstream} changed", manifest)
                break
        else:
            if "dropped" in manifest:
                freed = _human_bytes(manifest["dropped"]["bytes"])
                state = StageState(name, DROPPED, f"files removed by --keep final ({freed})", manifest)
            for rel, meta in manifest.get("outputs", {}).items() if state.state == DONE else ():
                if _output_changed(stage_dir / rel, meta):
                    state = StageState(name, STALE, f"output {rel} missing or changed", manifest)
                    break
            else:
                if pcfg is not None and stage.sources and (changed := _changed_source(
                        manifest.get("sources", {}), stage.sources(pcfg.stage_configs[name]))):
                    state = StageState(name, STALE, f"input {changed} changed", manifest)
                elif stage_dir in corrupt:
                    state = StageState(name, STALE, corrupt[stage_dir], manifest)
    known[stage_dir] = dataclasses.replace(state, manifest=held(state.manifest)) if state.manifest else state
    return known[stage_dir]


def upstream_state(pcfg: PipelineConfig | None, lang_dir: Path, label: InputLabel, known: dict[Path, StageState],
                   corrupt: dict[Path, str] | None = None) -> StageState:
    """The state of input `label` of a stage of `lang_dir`."""
    directory = input_dir(lang_dir, label)
    return stage_state(_input_config(pcfg, label), directory.parent, directory.name, known, corrupt)


def run_stages(pcfg: PipelineConfig, lang_dir: Path, names: list[str], workers: int = 1, force: bool = False,
               quiet: bool = False, log: logging.Logger | None = None, verify: bool = False,
               executor: Executor | None = None, keep: str = "all") -> None:
    """Run `names` in order, skipping the done ones; verify: first check every finished stage's sha256 (reads all
    outputs), so that one whose bytes changed in place re-runs. Parallel work goes to `executor` (default:
    the stage context's, LocalExecutor(workers)). keep "final": once every stage that reads a stage's outputs is
    done, its files are removed (drop_read_stages); a dropped input of a stage that must run is made again first."""
    log = log or logging.getLogger("wiki2bert")
    corrupt = corrupt_stages(lang_dir, [n for n in pcfg.stage_order if n not in pcfg.idle], quiet) if verify else {}
    for stage_dir, reason in corrupt.items():
        log.warning("%s: %s; it will run again", stage_dir.name, reason)
    for name in names:
        if name in pcfg.idle:
            log.info("%s: no work (%s)", name, pcfg.idle[name])
            continue
        known: dict[Path, StageState] = {}
        state = stage_state(pcfg, lang_dir, name, known, corrupt)
        if state.state in (DONE, DROPPED) and not force:
            log.info("%s: done, skipping (outputs match config and inputs%s)", name,
                     "; its files were dropped" if state.state == DROPPED else "")
            _remove_killed_attempt(lang_dir, name)  # a killed `--force` attempt's, beside the complete output
        else:
            log.info("%s: running%s", name, f" ({state.reason})" if state.state != MISSING else "")
            _run_with_inputs(pcfg, lang_dir, name, workers, quiet, log, executor, corrupt)
            corrupt.pop(lang_dir / name, None)
        if keep == "final":
            drop_read_stages(pcfg, lang_dir, log)


def _run_with_inputs(pcfg: PipelineConfig, lang_dir: Path, name: str, workers: int, quiet: bool,
                     log: logging.Logger, executor: Executor | None, corrupt: dict[Path, str]) -> None:
    """Run stage `name`, first making again each input whose files --keep final dropped (and theirs, as needed):
    the same config and inputs give the same bytes, so the stages after them stay done."""
    known: dict[Path, StageState] = {}
    inputs = {label: upstream_state(pcfg, lang_dir, label, known, corrupt) for label in pcfg.inputs_of(name)}
    for label, up in inputs.items():
        if up.state == DROPPED and label.language is None:
            log.info("%s: making %s again (its files were dropped by --keep final)", name, label)
            _run_with_inputs(pcfg, lang_dir, label.stage, workers, quiet, log, executor, corrupt)
            inputs[label] = upstream_state(pcfg, lang_dir, label, {}, corrupt)
        elif up.state != DONE:
            raise DataError(f"stage {name} needs {label}, which is {up.state} ({up.reason}): "
                            f"run `pipeline run --lang {_lang_flag(pcfg)} --to {up.name}` first")
    run_stage(pcfg, lang_dir, name, {label: up.manifest for label, up in inputs.items()}, workers, quiet, log,
              executor)


def drop_read_stages(pcfg: PipelineConfig, lang_dir: Path, log: logging.Logger) -> None:
    """--keep final: remove the output files of each done stage of `lang_dir` whose readers (the stages that read it
    in this run) are all done, but those of the stages nothing reads and of KEPT_BY_FINAL. The manifest stays,
    marked `dropped` (its files' sizes and sha256 kept: the stages after it stay done)."""
    known: dict[Path, StageState] = {}
    readers = {name: [reader for reader in pcfg.stage_order if reader not in pcfg.idle
                      and InputLabel(name) in pcfg.inputs_of(reader)] for name in pcfg.stage_order}
    for name, its_readers in readers.items():
        if not its_readers or name in KEPT_BY_FINAL or name in pcfg.idle:
            continue
        state = stage_state(pcfg, lang_dir, name, known).state
        if state == DROPPED or (state == DONE and all(
                stage_state(pcfg, lang_dir, reader, known).state in (DONE, DROPPED) for reader in its_readers)):
            if _drop_outputs(lang_dir / name, read_manifest(lang_dir / name)):
                log.info("%s: dropped its files (--keep final; %s read them)", name, ", ".join(its_readers))


def _drop_outputs(stage_dir: Path, manifest: dict) -> bool:
    """Mark the manifest dropped, then remove the other files (also those a drop killed midway left); whether
    there was anything to remove."""
    if "dropped" not in manifest:
        outputs = manifest["outputs"]
        manifest["dropped"] = {"bytes": sum(meta["size"] for meta in outputs.values()), "files": len(outputs)}
        write_json(stage_dir / MANIFEST, manifest)
    leftovers = [entry for entry in stage_dir.iterdir() if entry.name != MANIFEST]
    for entry in leftovers:
        remove_tree(entry)
    return bool(leftovers)


def _lang_flag(pcfg: PipelineConfig) -> str:
    """--lang of the command that runs `pcfg`'s stages (the languages of a mix, comma-separated)."""
    return ",".join(pcfg.languages) if pcfg.languages else pcfg.lang


def run_stage(pcfg: PipelineConfig, lang_dir: Path, name: str, upstream_manifests: dict[InputLabel, dict],
              workers: int, quiet: bool, log: logging.Logger, executor: Executor | None = None) -> dict:
    stage = stage_by_name(name)
    config = pcfg.stage_configs[name]
    final, tmp = lang_dir / name, lang_dir / f".{name}.tmp"
    scratch = lang_dir / f".{name}.scratch"
    failure = _failure_marker(lang_dir, name)
    _remove_killed_attempt(lang_dir, name)
    tmp.mkdir(parents=True)
    ctx = StageContext(lang=pcfg.lang, out_dir=tmp,
                       inputs={label.stage: input_dir(lang_dir, label) for label in upstream_manifests
                               if label.language is None},
                       cache_dir=lang_dir / ".cache" / name, workers=max(1, workers), quiet=quiet, log=log,
                       scratch_dir=scratch, executor=executor,
                       language_inputs={label: input_dir(lang_dir, label) for label in upstream_manifests
                                        if label.language is not None},
                       input_configs={label: m.get("config", {}) for label, m in upstream_manifests.items()},
                       done_dir=final if final.is_dir() else None)
    started = time.time()
    try:
        sources = stage.sources(config) if stage.sources else {}
        counts = stage.run(config, ctx)
        check_counts(name, counts, bool(pcfg.languages))
        duration = time.time() - started
        outputs = {str(p.relative_to(tmp)): _output_entry(p)
                   for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != MANIFEST}
        manifest = {
            "stage": name,
            "lang": pcfg.lang,
            "config": config_to_dict(config),
            "config_hash": config_hash(config),
            "output_format": stage.output_format,
            "inputs": {str(up): fingerprint(m) for up, m in upstream_manifests.items()},
            **({"sources": sources} if sources else {}),
            "outputs": outputs,
            "counts": counts.to_dict(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "duration_s": round(duration, 3),
            "workers": ctx.workers,
            "executor": ctx.executor.name,
            "tools": {"python": platform.python_version(), **{dist: _version(dist) for dist in stage.tools}},
        }
        write_json(tmp / MANIFEST, manifest)
        raise_if_interrupted()
    except BaseException as e:
        _clean_failed_attempt(tmp, scratch, failure, e)
        if isinstance(e, OSError):
            raise DataError(_environment_error(e, name, final)) from None
        raise
    remove_tree(scratch)
    replace_dir(tmp, final)
    failure.unlink(missing_ok=True)
    log.info("%s: done in %.1fs %s", name, duration, _summary(counts.to_dict()))
    return manifest


def _remove_killed_attempt(lang_dir: Path, name: str) -> None:
    """What a killed attempt at stage `name` left: its temporary output, the old output it was replacing, its
    scratch dir and atomic_write's half-written files in its cache."""
    for leftover in (lang_dir / f".{name}.tmp", *lang_dir.glob(f".{name}.old-*"), lang_dir / f".{name}.scratch"):
        remove_tree(leftover)
    for half_written in list((lang_dir / ".cache" / name).rglob("*.tmp")):
        remove_tree(half_written)


def _clean_failed_attempt(tmp: Path, scratch: Path, failure: Path, error: BaseException) -> None:
    """Free what the attempt wrote (first: on a full disk that is what makes room), then leave the failure marker
    for `pipeline status`; a marker that cannot be written (full disk, read-only) is left out."""
    for path in (tmp, scratch):
        with contextlib.suppress(OSError):
            remove_tree(path)
    with contextlib.suppress(OSError):
        failure.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(failure) as f:
            f.write(f"{type(error).__name__}: {error}\n")


def _environment_error(e: OSError, stage: str, final: Path) -> str:
    """One line for a failing environment (full disk, read-only or vanished directory): the file, the cause."""
    where = e.filename or final
    return f"{where}: {e.strerror or e} (stage {stage} stopped; its partial output was removed)"


def corrupt_stages(lang_dir: Path, names: list[str], quiet: bool = True) -> dict[Path, str]:
    """{stage directory: what is wrong} for the finished stages whose outputs no longer match the sha256 of their
    manifest."""
    manifests = {name: read_manifest(lang_dir / name) or {} for name in names}
    checks = [(lang_dir / name, lang_dir / name / rel, meta) for name, manifest in manifests.items()
              if "dropped" not in manifest for rel, meta in manifest.get("outputs", {}).items()]
    corrupt: dict[Path, str] = {}
    with progress(sum(meta["size"] for _, _, meta in checks), "verify sha256", "B", quiet=quiet) as bar:
        for name, path, meta in checks:
            if name not in corrupt:
                try:
                    if sha256_file(path) != meta["sha256"]:
                        corrupt[name] = f"{path}: sha256 differs from its manifest"
                except OSError as e:
                    corrupt[name] = f"{path}: {e.strerror or e}"
            bar.update(meta["size"])
    return corrupt


def _output_entry(path: Path) -> dict:
    stat = path.stat()
    return {"size": stat.st_size, "sha256": sha256_file(path), "mtime_ns": stat.st_mtime_ns}


def _output_changed(path: Path, meta: dict) -> bool:
    """Cheap unless the file's mtime moved: then its sha256 decides (a same-size rewrite is caught)."""
    try:
        stat = path.stat()
    except OSError:
        return True
    if stat.st_size != meta["size"]:
        return True
    if stat.st_mtime_ns == meta.get("mtime_ns"):
        return False
    return sha256_file(path) != meta["sha256"]


def status_rows(pcfg: PipelineConfig, lang_dir: Path, corrupt: dict[Path, str] | None = None) -> list[dict]:
    """One row per stage; `corrupt` from corrupt_stages() when the sha256 were checked."""
    known: dict[Path, StageState] = {}
    rows = []
    for name in pcfg.stage_order:
        st = stage_state(pcfg, lang_dir, name, known, corrupt)
        m = st.manifest or {}
        rows.append({
            "stage": name,
            "state": st.state,
            "reason": st.reason,
            "outputs": f"{m['output_files']} files, {_human_bytes(m['output_bytes'])}" if m.get("output_files") else "",
            "counts": _summary(m.get("counts", {})),
            "duration": f"{m['duration_s']:.1f}s" if "duration_s" in m else "",
        })
    return rows


def _summary(counts: dict, limit: int = 6) -> str:
    items = [f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in counts.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return " ".join(items[:limit])


def _failure_marker(lang_dir: Path, name: str) -> Path:
    return lang_dir / ".state" / f"{name}.failed"


def _hash_json(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"
