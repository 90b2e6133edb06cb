"""Runs stages in order, each into a temporary directory renamed into place with a `_manifest.json`.

A stage is done when its manifest matches its current config hash and the fingerprints of its
inputs; a done stage is skipped, and a changed stage re-runs along with everything whose inputs change.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import platform
import time
from importlib import metadata
from pathlib import Path

from core.config import config_to_dict
from pipeline.config import PipelineConfig
from core.errors import PipelineError
from core.fileio import remove_tree, sha256_file, write_json
from pipeline.parallel import Executor, LocalExecutor
from pipeline.stages import StageContext, stage_by_name

MANIFEST = "_manifest.json"
DONE, STALE, MISSING, FAILED = "done", "stale", "missing", "failed"


@dataclasses.dataclass(frozen=True)
class StageState:
    name: str
    state: str
    reason: str
    manifest: dict | None


def config_hash(config, runtime_fields: tuple[str, ...] = ()) -> str:
    """Hash of the config fields that can change a stage's output (runtime_fields such as retries are left out)."""
    return _hash_json({k: v for k, v in config_to_dict(config).items() if k not in runtime_fields})


def fingerprint(manifest: dict) -> str:
    """What downstream stages depend on: this stage's config and the exact bytes it wrote."""
    return _hash_json({"stage": manifest["stage"], "config_hash": manifest["config_hash"], "outputs": manifest["outputs"]})


def read_manifest(stage_dir: Path) -> dict | None:
    try:
        return json.loads((stage_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stage_state(pcfg: PipelineConfig, lang_dir: Path, name: str, known: dict[str, StageState] | None = None) -> StageState:
    """The state of `name`, judged against the current config and its upstream manifests."""
    known = {} if known is None else known
    if name in known:
        return known[name]
    stage = stage_by_name(name)
    manifest = read_manifest(lang_dir / name)
    failure = _failure_marker(lang_dir, name)
    if manifest is None:
        state = StageState(name, FAILED if failure.exists() else MISSING,
                           failure.read_text(encoding="utf-8").strip() if failure.exists() else "not run", None)
    elif manifest.get("config_hash") != config_hash(pcfg.stage_configs[name], stage.runtime_fields):
        state = StageState(name, STALE, "config changed", manifest)
    else:
        state = StageState(name, DONE, "", manifest)
        for upstream in stage.inputs:
            up = stage_state(pcfg, lang_dir, upstream, known)
            if up.state != DONE or manifest.get("inputs", {}).get(upstream) != fingerprint(up.manifest):
                state = StageState(name, STALE, f"input {upstream} changed", manifest)
                break
        else:
            for rel, meta in manifest.get("outputs", {}).items():
                path = lang_dir / name / rel
                if not path.is_file() or path.stat().st_size != meta["size"]:
                    state = StageState(name, STALE, f"output {rel} missing or changed", manifest)
                    break
    known[name] = state
    return state


def run_stages(pcfg: PipelineConfig, lang_dir: Path, names: list[str], workers: int = 1, force: bool = False,
               quiet: bool = False, log: logging.Logger | None = None, executor: Executor | None = None) -> None:
    """Run `names` in order, skipping those done; parallel work goes to `executor` (default: LocalExecutor(workers))."""
    log = log or logging.getLogger("wiki2bert")
    executor = executor or LocalExecutor(max(1, workers))
    for name in names:
        known: dict[str, StageState] = {}
        state = stage_state(pcfg, lang_dir, name, known)
        stage = stage_by_name(name)
        for upstream in stage.inputs:
            up = stage_state(pcfg, lang_dir, upstream, known)
            if up.state != DONE:
                raise PipelineError(f"stage {name} needs {upstream}, which is {up.state} ({up.reason}): "
                                    f"run `pipeline run --lang {pcfg.lang} --to {upstream}` first")
        if state.state == DONE and not force:
            log.info("%s: done, skipping (outputs match config and inputs)", name)
            continue
        log.info("%s: running%s", name, f" ({state.reason})" if state.state != MISSING else "")
        run_stage(pcfg, lang_dir, name, {up: known[up].manifest for up in stage.inputs}, workers, quiet, log,
                  executor)


def run_stage(pcfg: PipelineConfig, lang_dir: Path, name: str, upstream_manifests: dict[str, dict], workers: int,
              quiet: bool, log: logging.Logger, executor: Executor | None = None) -> dict:
    stage = stage_by_name(name)
    config = pcfg.stage_configs[name]
    final, tmp, old = lang_dir / name, lang_dir / f".{name}.tmp", lang_dir / f".{name}.old"
    failure = _failure_marker(lang_dir, name)
    remove_tree(tmp)
    remove_tree(old)
    tmp.mkdir(parents=True)
    ctx = StageContext(lang=pcfg.lang, lang_dir=lang_dir, out_dir=tmp,
                       inputs={up: lang_dir / up for up in stage.inputs},
                       cache_dir=lang_dir / ".cache" / name, workers=max(1, workers), quiet=quiet, log=log,
                       executor=executor)
    started = time.time()
    try:
        counts = stage.run(config, ctx) or {}
    except BaseException as e:
        failure.parent.mkdir(parents=True, exist_ok=True)
        failure.write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
        remove_tree(tmp)
        raise
    duration = time.time() - started
    outputs = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
               for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != MANIFEST}
    manifest = {
        "stage": name,
        "lang": pcfg.lang,
        "config": config_to_dict(config),
        "config_hash": config_hash(config, stage.runtime_fields),
        "inputs": {up: fingerprint(m) for up, m in upstream_manifests.items()},
        "outputs": outputs,
        "counts": counts,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(duration, 3),
        "workers": ctx.workers,
        "executor": ctx.executor.name,
        "tools": {"python": platform.python_version(), **{dist: _version(dist) for dist in stage.tools}},
    }
    write_json(tmp / MANIFEST, manifest)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    remove_tree(old)
    failure.unlink(missing_ok=True)
    log.info("%s: done in %.1fs %s", name, duration, _summary(counts))
    return manifest


def status_rows(pcfg: PipelineConfig, lang_dir: Path) -> list[dict]:
    known: dict[str, StageState] = {}
    rows = []
    for name in pcfg.stage_order:
        st = stage_state(pcfg, lang_dir, name, known)
        m = st.manifest or {}
        outputs = m.get("outputs", {})
        rows.append({
            "stage": name,
            "state": st.state,
            "reason": st.reason,
            "outputs": f"{len(outputs)} files, {_human_bytes(sum(o['size'] for o in outputs.values()))}" if outputs else "",
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
