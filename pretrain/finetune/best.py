"""The best seed of each model and task (the highest main dev figure of its finished seeds; ties: the lowest seed),
kept where it is asked for, in best/<model>/<task>/ of the output directory:

  model/       with --save: the fine-tuned model, a Hugging Face directory with its label names and the tokenizer
               files of the model it was fine-tuned from, which loads in the task kind's Auto class
               (train.AUTO_CLASSES) and AutoTokenizer
  test/<file>  each file of the task's test split with the predicted labels, in the file's own format (tasks.py):
               ready to submit
  best.json    which seed, its dev figures, what the directory holds; written last

A directory whose best.json names the current best seed and holds what is asked for is left as it is; otherwise it
is written again (a temporary directory renamed into place). A directory that once held a model keeps holding one.
Where the best seed finished in an earlier run its model is gone, and run.py fine-tunes that seed again: the same
seed gives the same model on the same machine (`refit_figure` in best.json records what it gave)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

from wiki2bert_core.files import atomic_write, read_json, remove_tree, replace_dir, write_json
from wiki2bert_core.wordpiece import copy_tokenizer_files
from pretrain.finetune.results_dir import finished_seeds, result_path, writing
from pretrain.finetune.task import Task
from pretrain.finetune.train import AUTO_CLASSES, ModelSource

BEST_FILE = "best.json"
MODEL_DIR = "model"
TEST_DIR = "test"


def best_dir(out: Path, source: ModelSource, task: Task) -> Path:
    return out / "best" / source.name / task.name


def _recorded(out: Path, source: ModelSource, task: Task) -> dict:
    return read_json(best_dir(out, source, task) / BEST_FILE, default=None) or {}


def wanted(out: Path, source: ModelSource, task: Task, save: bool) -> bool:
    """Whether the best seed is kept: with --save, for a task with a test split, and where a model was saved."""
    return save or bool(task.test) or bool(_recorded(out, source, task).get("model_dir"))


def best_seed(out: Path, source: ModelSource, task: Task) -> tuple[int, dict[str, float]] | None:
    """The best finished seed and its dev figures; None before the first has finished."""
    seeds = finished_seeds(out, source.name, task.name).get((source.name, task.name), [])
    figures = {seed: read_json(result_path(out, source.name, task.name, seed))["metrics"] for seed in seeds}
    if not figures:
        return None
    seed = max(figures, key=lambda s: (figures[s][task.main_metric], -s))
    return seed, figures[seed]


def missing(out: Path, source: ModelSource, task: Task, save: bool) -> int | None:
    """The best seed where it is wanted and best/<model>/<task> does not hold it, or not all that is asked for;
    else None."""
    found = best_seed(out, source, task) if wanted(out, source, task, save) else None
    if found is None:
        return None
    recorded = _recorded(out, source, task)
    holds = (recorded.get("seed") == found[0] and recorded.get("test_digest") == _test_digest(task)
             and (recorded.get("model_dir") or not save))
    return None if holds else found[0]


def write(out: Path, source: ModelSource, task: Task, seed: int, model, test_labels: list, save: bool,
          refit: float | None, log: logging.Logger) -> Path:
    """best/<model>/<task>/ for `seed`, whose fine-tuned `model` this is: the model with `save` (or where one was
    saved before), the test files filled in with `test_labels` (one a test example); refit: the main figure of
    the seed fine-tuned again (None: the model is that of its finished run)."""
    from safetensors import SafetensorError

    place = best_dir(out, source, task)
    keep_model = save or bool(_recorded(out, source, task).get("model_dir"))
    figures = read_json(result_path(out, source.name, task.name, seed))["metrics"]
    if refit is not None and refit != figures[task.main_metric]:
        log.warning("%s %s seed %d fine-tuned again to keep it gives %s %.4f, its finished run %.4f (another "
                    "machine or library version?): %s holds the new one", source.name, task.name, seed,
                    task.main_metric, refit, figures[task.main_metric], place)
    tmp = place.with_name(f".{place.name}.tmp-{os.getpid()}")
    remove_tree(tmp)
    tmp.mkdir(parents=True)
    try:
        if keep_model:
            if task.kind != "choice":  # a choice model scores each candidate: its one output has no label
                model.config.id2label = dict(enumerate(task.labels))
                model.config.label2id = {label: i for i, label in enumerate(task.labels)}
            with writing(place / MODEL_DIR):
                try:
                    model.save_pretrained(tmp / MODEL_DIR)
                    copy_tokenizer_files(source.path, tmp / MODEL_DIR)
                except SafetensorError as e:  # the weights' write failed (a full disk)
                    raise OSError(None, str(e), str(place / MODEL_DIR)) from None
        start = 0
        for test_file in task.test_files:
            path = tmp / TEST_DIR / test_file.name
            path.parent.mkdir(parents=True, exist_ok=True)
            with writing(place / TEST_DIR / test_file.name), atomic_write(path) as f:
                f.write(test_file.fill(test_labels[start:start + test_file.examples]))
            start += test_file.examples
        with writing(place / BEST_FILE):
            write_json(tmp / BEST_FILE, {
                "model": source.name, "task": task.name, "seed": seed, "main_metric": task.main_metric,
                "figure": figures[task.main_metric], "refit_figure": refit, "dev": figures,
                "model_dir": MODEL_DIR if keep_model else None, "auto_class": AUTO_CLASSES[task.kind],
                "test": [f"{TEST_DIR}/{test_file.name}" for test_file in task.test_files],
                "test_digest": _test_digest(task)})
        replace_dir(tmp, place)
    finally:
        remove_tree(tmp)
    log.info("%s %s: best seed %d (%s %.4f) in %s", source.name, task.name, seed, task.main_metric,
             figures[task.main_metric], place)
    return place


def _test_digest(task: Task) -> str | None:
    if not task.test:
        return None
    text = json.dumps([[(f.name, f.examples) for f in task.test_files], [dataclasses.asdict(e) for e in task.test]],
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
