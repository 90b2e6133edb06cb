"""`pretrain finetune`: every model x task x seed, fine-tuned and scored on the dev split, with its baselines; the
figures go to the output directory (report.py).

The output directory (--out) and its files: results_dir.py.

A model is a model directory (pretrain/model/model_dir.py): a Hugging Face directory of a BERT-family encoder, used as
it is, or a phase directory, exported into models/<run>-<phase>/ and named so. --out may not be a directory that
belongs to something else (pretrain/out_dirs.py).

Resume: a seed whose figures file exists is done and never run again, so a killed run re-run with the same
command continues with the seeds it had not finished (each file is written to a temporary name and renamed into
place). More seeds, models and tasks may be added to a directory later; a recipe, --held-out, model or task that
differs from what its finished seeds were made with is refused (ConfigError naming what differs): the figures in one
directory always come from one recipe. Settings of models and tasks without finished seeds (a run that failed
before its first) bind nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import atomic_write, file_fingerprint, read_json, write_json
from wiki2bert_core.log import progress, setup_logging
from wiki2bert_core.wordpiece import TOKENIZER_FILES as TOKENIZER_FINGERPRINT
from pretrain.finetune import best, metrics
from pretrain.finetune.encode import encode_task
from pretrain.finetune.recipe import Recipe, load_recipes
from pretrain.finetune.report import describe_task, write_report
from pretrain.finetune.results_dir import (EXPORTS, LOG_FILE, SETTINGS_FILE, finished_seeds, predictions_path,
                                           result_path, writing)
from pretrain.finetune.task import Task, gold_labels, majority_label
from pretrain.finetune.tasks import load_task
from pretrain.finetune.train import (ModelSource, choose_device, fine_tune, load_model, load_tokenizer,
                                     make_deterministic, optimizer_steps, predict)
from pretrain.model.checkpoint_files import META, MODEL_CONFIG
from pretrain.model.model_dir import HF_CONFIG, PRETRAINING_CONFIG, HuggingFaceDir, PhaseDir, open_model_dir
from pretrain.out_dirs import FINETUNE, check_out_dir
from pretrain.provenance import write_code_files
from pretrain.tools.export import export_hf

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # either lets AutoTokenizer build a BERT tokenizer
RANDOM_INIT = "-random-init"  # the suffix of a model's randomly initialised twin


def finetune(model_dirs: list[Path], task_paths: list[Path], out: Path, seeds: int = 5,
             overrides: list[str] = (), held_out: float | None = None, random_init: bool = False,
             save: bool = False) -> str:
    """Runs what `out` does not hold yet and writes the results; returns the results table (markdown)."""
    recipes = load_recipes(list(overrides))
    sources = model_sources(model_dirs, random_init, Path(out))
    tasks = [load_task(Path(path), held_out) for path in task_paths]
    return run_tasks(sources, tasks, Path(out), seeds, recipes, held_out, save)


def run_tasks(sources: list[ModelSource], tasks: list[Task], out: Path, seeds: int, recipes: dict[str, Recipe],
              held_out: float | None = None, save: bool = False) -> str:
    """`finetune` once the models are checked and the tasks read. save: keep each task's best seed (best.py)."""
    if seeds < 1:
        raise ConfigError(f"--seeds: must be at least 1, got {seeds}")
    _check_unique([task.name for task in tasks], "tasks", "the task files")
    check_out_dir(out, "pretrain finetune", FINETUNE)
    one_per_kind = {task.kind: task for task in tasks}.values()
    for source in sources:  # loads in each kind's class, no fresh weight outside the head (an export always does)
        for task in one_per_kind if source.export_of is None and not source.random_init else ():
            load_model(source, task, 0)
    out.mkdir(parents=True, exist_ok=True)
    log = setup_logging(out / LOG_FILE)
    used = {task.kind: recipes[task.kind] for task in tasks}
    try:
        record_settings(out, used, held_out, sources, tasks)
        _export_phase_dirs(sources, out, log)
        for task in tasks:
            path = out / "tasks" / f"{task.name}.json"
            path.parent.mkdir(exist_ok=True)
            with writing(path):
                write_json(path, describe_task(task))
        for kind, recipe in used.items():
            log.info("recipe %s: %s", kind, json.dumps(dataclasses.asdict(recipe)))
        pending = [(source, task, [seed for seed in range(recipes[task.kind].seed, recipes[task.kind].seed + seeds)
                                   if not result_path(out, source.name, task.name, seed).is_file()])
                   for source in sources for task in tasks]
        to_run = sum(len(todo) for _, _, todo in pending)
        if to_run < len(pending) * seeds:
            log.info("%s: %d seeds already finished, %d to run", out, len(pending) * seeds - to_run, to_run)
        _run_seeds(pending, recipes, out, save, log)
        return write_report(out, sources, tasks)
    except OSError as e:  # a full disk, mostly
        raise DataError(_failed_write(out, e)) from None


def _failed_write(out: Path, e: OSError) -> str:
    try:
        free = f"{shutil.disk_usage(out).free / 2 ** 30:.1f} GiB free in {out}"
    except OSError:
        free = f"{out} unreadable"
    return (f"{e.filename or out}: {e.strerror or e} (writing the results; {free}); make room and re-run the same "
            "command: finished seeds are kept")


def model_sources(model_dirs: list[Path], random_init: bool, out: Path | None = None) -> list[ModelSource]:
    """The rows to fine-tune: each model directory (checked; a phase directory is exported into `out`, needed then),
    and with `random_init` its randomly initialised twin after it."""
    sources = []
    for path in map(Path, model_dirs):
        model_dir = open_model_dir(path)
        place = Path(os.path.abspath(path))  # "." has a name too; a link keeps its own
        if isinstance(model_dir, PhaseDir):
            model_dir.find_checkpoint("export")
            model_dir.model_config()
            name = f"{place.parent.name}-{place.name}"
            source = ModelSource(name, out / EXPORTS / name, export_of=path)
        else:
            model_dir.model_type("finetune", "pretrain finetune")
            if not any((path / name).is_file() for name in TOKENIZER_FILES):
                raise ConfigError(f"{path}: no tokenizer files ({' or '.join(TOKENIZER_FILES)}); copy the "
                                  f"tokenizer the model was pretrained with into it (`pretrain export` writes them)")
            source = ModelSource(place.name, path)
        sources.append(source)
        if random_init:
            sources.append(dataclasses.replace(source, name=source.name + RANDOM_INIT, random_init=True))
    _check_unique([source.name for source in sources], "models", "the model directories (rename one)")
    return sources


def record_settings(out: Path, recipes: dict[str, Recipe], held_out: float | None, sources: list[ModelSource],
                    tasks: list[Task]) -> None:
    """Checks the settings against those `out`'s finished seeds were made with (ConfigError naming what differs),
    then writes settings.json (those, with this run's added) and the code's provenance files. Settings recorded
    for models, tasks and kinds with no finished seed (a run that failed before its first) are dropped."""
    path = out / SETTINGS_FILE
    now = {"recipes": {kind: dataclasses.asdict(recipe) for kind, recipe in recipes.items()},
           "held_out": held_out,
           "models": {s.name: {"path": str(s.origin.resolve()), "files": model_fingerprint(s),
                               "tokenizer": tokenizer_fingerprint(s)} for s in sources if not s.random_init},
           "tasks": {t.name: {"source": str(t.source.resolve()), "kind": t.kind, "digest": task_digest(t)}
                     for t in tasks}}
    before = read_json(path, error=DataError) if path.is_file() else None
    finished = finished_seeds(out)
    if before and finished:
        done = {"models": {model.removesuffix(RANDOM_INIT) for model, _ in finished},
                "tasks": {task for _, task in finished}}
        done["recipes"] = {before["tasks"][task]["kind"] for task in done["tasks"] if task in before["tasks"]}
        before = {**before, **{key: {name: value for name, value in before[key].items() if name in done[key]}
                               for key in done}}
        again = "re-run with the settings it was made with, or choose another --out"
        for kind in [kind for kind in now["recipes"] if kind in before["recipes"]]:
            for key, value in now["recipes"][kind].items():
                if before["recipes"][kind].get(key) != value:
                    raise ConfigError(f"{out}: holds results of another {kind} recipe ({key} "
                                      f"{before['recipes'][kind].get(key)!r} there, {value!r} now); {again}")
        if before["held_out"] != held_out:
            raise ConfigError(f"{out}: holds results made with --held-out {before['held_out']}, not {held_out}; "
                              f"{again}")
        for group, what, differs in (("models", "files", ""), ("models", "tokenizer", "its tokenizer files differ "
                                                                                      "from those of "),
                                     ("tasks", "digest", "")):
            for name in [name for name in now[group] if name in before[group]]:
                # settings.json written before the tokenizer was fingerprinted: only what it holds is compared
                if what in before[group][name] and now[group][name][what] != before[group][name][what]:
                    raise ConfigError(f"{out}: holds results of another {group[:-1]} named {name} ({differs or 'from '}"
                                      f"{before[group][name].get('path') or before[group][name]['source']}); "
                                      f"{again}")
        for key in ("recipes", "models", "tasks"):
            now[key] = {**before[key], **now[key]}
    with writing(path):
        write_json(path, {**now, "command": sys.argv})
    with writing(out):
        write_code_files(out)


def model_fingerprint(source: ModelSource) -> dict:
    """Size and the sha256 of the first and last MiB of each configuration and weights file (not the mtime: a copy
    of the model is the same model); of a phase directory's, its model config and the meta.json of its latest
    checkpoint, which lists the checkpoint's files with their sizes and sha256."""
    if source.export_of is not None:
        phase = PhaseDir(source.export_of)
        return _fingerprint([phase.path / MODEL_CONFIG, phase.find_checkpoint("export").path / META])
    return _fingerprint([source.path / HF_CONFIG, *HuggingFaceDir(source.path).weight_files()])


def tokenizer_fingerprint(source: ModelSource) -> dict:
    """The same for the tokenizer's files: a new vocabulary makes other inputs of the same examples."""
    directory = PhaseDir(source.export_of).tokenizer_dir if source.export_of is not None else source.path
    return _fingerprint([directory / name for name in TOKENIZER_FINGERPRINT])


def _fingerprint(files: list[Path]) -> dict:
    prints = {}
    for path in files:
        if path.is_file():
            fingerprint = file_fingerprint(path)
            prints[path.name] = {"size": fingerprint["size"], "sample_sha256": fingerprint["sample_sha256"]}
    return prints


def _export_phase_dirs(sources: list[ModelSource], out: Path, log: logging.Logger) -> None:
    """Exports each model given as a phase directory into its place in --out, unless the export of its latest
    checkpoint is there (exports are deterministic: the same checkpoint gives the same files)."""
    for source in sources:
        if source.export_of is None or source.random_init:
            continue
        latest = PhaseDir(source.export_of).find_checkpoint("export").tag
        if read_json(source.path / PRETRAINING_CONFIG, default={}).get("checkpoint") != latest:
            log.info("exporting %s (%s) into %s", source.export_of, latest, source.path)
            export_hf(source.export_of, source.path, within=out)


def task_digest(task: Task) -> str:
    examples = [dataclasses.asdict(e) for e in task.train + task.dev]
    text = json.dumps([task.kind, task.labels, task.metrics, len(task.train), examples], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_unique(names: list[str], what: str, where: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"two {what} named {repeated[0]}: their results would share a directory; give "
                          f"{where} different names")


def _run_seeds(groups: list[tuple[ModelSource, Task, list[int]]], recipes: dict[str, Recipe], out: Path,
               save: bool, log: logging.Logger) -> None:
    """Fine-tunes and scores each pending seed of each (model, task), tokenizing each task once per model; then
    keeps the group's best seed where that is asked for (best.py), fine-tuning it again if it finished in an
    earlier run."""
    refits = [(source, task) for source, task, seeds in groups
              if not seeds and best.missing(out, source, task, save) is not None]
    if not any(seeds for _, _, seeds in groups) and not refits:
        return
    inputs = _Inputs(recipes)
    total = sum(optimizer_steps(len(task.train), recipes[task.kind]) * len(seeds) for _, task, seeds in groups)
    total += sum(optimizer_steps(len(task.train), recipes[task.kind]) for _, task in refits)
    with progress(total, "fine-tuning", unit="step") as bar:
        for source, task, seeds in groups:
            if not seeds and (source, task) not in refits:
                continue
            recipe = recipes[task.kind]
            tokenizer, train, dev, test = inputs.get(source, task)
            wanted = best.wanted(out, source, task, save)
            kept = None  # (seed, figure, model): the best seed fine-tuned here, where one is wanted
            for seed in seeds:
                bar.set_postfix_str(f"{source.name} {task.name} seed {seed}")
                started = time.monotonic()
                model, figures = _run_seed(source, task, seed, recipe, tokenizer.pad_token_id, train, dev, out,
                                           lambda: bar.update(1))
                figure = figures[task.main_metric]
                log.info("%s %s seed %d: %s %.4f (%.0f s)", source.name, task.name, seed, task.main_metric, figure,
                         time.monotonic() - started)
                if wanted and (kept is None or figure > kept[1]):
                    kept = (seed, figure, model)
            seed = best.missing(out, source, task, save)
            if seed is None:
                continue
            refit = None
            if kept is None or kept[0] != seed:
                if (source, task) not in refits:
                    bar.total += optimizer_steps(len(task.train), recipe)
                    bar.refresh()
                bar.set_postfix_str(f"{source.name} {task.name} seed {seed} again (best)")
                model, _, figures, _ = _train_seed(source, task, seed, recipe, tokenizer.pad_token_id, train, dev,
                                                   lambda: bar.update(1))
                refit = figures[task.main_metric]
                kept = (seed, refit, model)
            test_labels = _as_labels(task, _predict(kept[2], test, task, recipe, tokenizer.pad_token_id)) \
                if task.test else []
            best.write(out, source, task, seed, kept[2], test_labels, save, refit, log)


class _Inputs:
    """Each model's tokenizer (loaded once) and each task's encoded train, dev and test splits (once per model)."""

    def __init__(self, recipes: dict[str, Recipe]):
        self.recipes = recipes
        self.tokenizers: dict[Path, object] = {}
        self.encoded: dict[tuple[Path, str], tuple] = {}

    def get(self, source: ModelSource, task: Task) -> tuple:
        if source.path not in self.tokenizers:
            self.tokenizers[source.path] = load_tokenizer(source.path)
        tokenizer = self.tokenizers[source.path]
        if (source.path, task.name) not in self.encoded:
            # a model with fewer positions than the recipe's max_length says so in its tokenizer's config
            max_length = min(self.recipes[task.kind].max_length, tokenizer.model_max_length)
            self.encoded[(source.path, task.name)] = tuple(encode_task(tokenizer, task, split, max_length)
                                                           for split in (task.train, task.dev, task.test))
        return (tokenizer, *self.encoded[(source.path, task.name)])


def _train_seed(source: ModelSource, task: Task, seed: int, recipe: Recipe, pad_id: int, train: list, dev: list,
                on_step) -> tuple[object, list, dict[str, float], float]:
    """Fine-tunes one seed and scores the dev split: the model, its dev predictions as labels, the figures, the
    training loss."""
    device, bf16 = choose_device(recipe.precision)
    make_deterministic(device)
    model = load_model(source, task, seed)
    loss = fine_tune(model, train, task.kind, recipe, seed, pad_id, device, bf16, on_step)
    predicted = _as_labels(task, _predict(model, dev, task, recipe, pad_id))
    return model, predicted, metrics.compute(task.metrics, task.labels, gold_labels(task), predicted), loss


def _predict(model, examples: list, task: Task, recipe: Recipe, pad_id: int) -> list:
    device, bf16 = choose_device(recipe.precision)
    return predict(model, examples, task.kind, recipe.batch, pad_id, device, bf16,
                   task.labels.index(majority_label(task)))


def _as_labels(task: Task, predicted: list) -> list:
    return [[task.labels[i] for i in p] if task.kind == "tokens" else task.labels[p] for p in predicted]


def _run_seed(source: ModelSource, task: Task, seed: int, recipe: Recipe, pad_id: int, train: list, dev: list,
              out: Path, on_step) -> tuple[object, dict[str, float]]:
    """Fine-tunes, predicts the dev split, writes the predictions and then the figures (the mark of a finished
    seed); returns the model and the figures."""
    started = time.monotonic()
    model, predicted, figures, loss = _train_seed(source, task, seed, recipe, pad_id, train, dev, on_step)
    write_predictions(predictions_path(out, source.name, task.name, seed), task, predicted)
    path = result_path(out, source.name, task.name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    device, bf16 = choose_device(recipe.precision)
    with writing(path):
        write_json(path, {"model": source.name, "model_path": str(source.origin.resolve()),
                          "random_init": source.random_init, "task": task.name, "seed": seed, "metrics": figures,
                          "train_loss": loss, "steps": optimizer_steps(len(train), recipe),
                          "train_examples": len(train), "dev_examples": len(dev),
                          "cut_words": sum(p < 0 for e in dev for p in e.first_tokens), "device": str(device),
                          "precision": "bf16" if bf16 else "fp32", "seconds": round(time.monotonic() - started, 1)})
    return model, figures


def write_predictions(path: Path, task: Task, predicted: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path), atomic_write(path) as f:
        for example, gold, guess in zip(task.dev, gold_labels(task), predicted):
            row = {"id": example.id, "gold": gold, "predicted": guess}
            if task.kind == "tokens":
                row["words"] = list(example.words)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
