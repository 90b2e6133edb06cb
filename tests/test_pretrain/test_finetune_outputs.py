"""What `pretrain finetune` leaves in --out besides the seeds' figures: the report covers every finished seed there
(also of tasks and models this run did not name) and says where a model answers one class; the chart's title says
what its bars are; --save keeps each task's best seed as a model that loads in the task kind's Auto class; a test
split gets the best seed's predictions in the test files' own format."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from finetune_tasks import QUICK_RECIPE, TEST_RECIPE, TOKENS, make_tasks, write_single_task, write_token_task
from pretrain.finetune.recipe import load_recipes
from pretrain.finetune.run import model_sources, run_tasks
from pretrain.finetune.task import Example, Task
from pretrain.finetune.tasks import load_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def charts(monkeypatch) -> list:
    """The axes of each chart drawn (the PNG is still written)."""
    from wiki2bert_core import charts as module

    drawn = []
    save = module.save_png

    def keep(fig, path):
        drawn.append(fig.axes[0])
        return save(fig, path)

    monkeypatch.setattr(module, "save_png", keep)
    return drawn


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def one_class_task() -> Task:
    """Every text the same: whatever a model learns, it gives every example the same answer."""
    examples = tuple(Example(f"e{i}", ("w1 w2 w3",), str(i % 2)) for i in range(40))
    return Task("same-text", "single", ("0", "1"), ("mcc", "accuracy"), examples[:30], examples[30:],
                Path("same-text.json"))


def test_a_model_that_answers_one_class_is_said_to_in_the_table_and_the_chart(tiny_model, tmp_path, charts):
    """It was shown as a figure equal to the baseline with no spread, the chart's bar of height 0 invisible."""
    out = tmp_path / "out"
    table = run_tasks(model_sources([tiny_model], False), [one_class_task(), make_tasks(train=240, dev=40)[0]],
                      out, 2, load_recipes(TEST_RECIPE))
    rows = {row["task"]: row for row in results(out)["results"] if row["model"] == "tiny"}
    assert rows["same-text"]["one_class_seeds"] == 2 and rows["same-text"]["summary"]["mcc"]["median"] == 0
    assert rows["single"]["one_class_seeds"] == 0  # it learned that task
    [line] = [line for line in table.splitlines() if line.startswith("| tiny |")]
    assert line.split(" | ")[1] == "0.000, predicts one class", line
    assert "predicts one class: every dev example got the same label" in table
    labels = [text.get_text() for text in charts[-1].texts]
    assert sum("one class" in label for label in labels) == 1, labels
    assert charts[-1].get_ylim()[1] >= 0.5  # the axis has room for a bar that is not there


def test_one_seed_is_not_called_a_median_with_min_max_bars(tiny_model, tmp_path, charts):
    run_tasks(model_sources([tiny_model], False), make_tasks(train=32, dev=8)[:1], tmp_path / "one", 1,
              load_recipes(QUICK_RECIPE))
    assert charts[-1].get_title() == "Fine-tuning: dev figures (one seed)"
    run_tasks(model_sources([tiny_model], False), make_tasks(train=32, dev=8)[:1], tmp_path / "two", 2,
              load_recipes(QUICK_RECIPE))
    assert charts[-1].get_title() == "Fine-tuning: dev figures (median over 2 seeds, bars: min-max)"


def test_the_report_covers_every_finished_seed_in_out(tiny_model, tmp_path):
    """A re-run with fewer tasks or models rewrote results.json, .md and .png without the others."""
    out = tmp_path / "out"
    single, pair = make_tasks(train=32, dev=8)[:2]
    sources = model_sources([tiny_model], random_init=True)
    run_tasks(sources, [single, pair], out, 2, load_recipes(QUICK_RECIPE))
    first = results(out)
    table = run_tasks(sources[:1], [single], out, 1, load_recipes(QUICK_RECIPE))
    again = results(out)
    assert again["results"] == first["results"] and again["tasks"] == first["tasks"]
    assert "| tiny-random-init |" in table and "pair (accuracy)" in table
    assert table.splitlines()[0].startswith("Dev-set figures, median over 2 seeds (min-max)")

    # seeds finished by an older version, whose task is not described in out: named as left out
    (out / "tasks" / "pair.json").unlink()
    table = run_tasks(sources[:1], [single], out, 1, load_recipes(QUICK_RECIPE))
    assert "pair" not in results(out)["tasks"]
    assert results(out)["left_out"] == ["runs/tiny/pair (2 seeds)", "runs/tiny-random-init/pair (2 seeds)"]
    assert ("Left out (no tasks/<task>.json: re-run with the task to include them): runs/tiny/pair (2 seeds), "
            "runs/tiny-random-init/pair (2 seeds)") in table


def dev_predictions(model_dir: Path, task: Task) -> list:
    """The dev labels a saved model gives, loaded as a user would."""
    import torch
    import transformers

    from pretrain.finetune.encode import collate, encode_task
    from pretrain.finetune.train import AUTO_CLASSES

    model, info = getattr(transformers, AUTO_CLASSES[task.kind]).from_pretrained(model_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    encoded = encode_task(tokenizer, task, task.dev, 64)
    batch = collate(encoded, task.kind, tokenizer.pad_token_id)
    batch.pop("labels")
    with torch.no_grad():
        best = model.eval()(**batch).logits.argmax(-1)
    if task.kind == "tokens":
        assert model.config.id2label == dict(enumerate(task.labels))
        return [[task.labels[best[i, p]] for p in e.first_tokens] for i, e in enumerate(encoded)]
    if task.kind != "choice":
        assert model.config.id2label == dict(enumerate(task.labels))
    return [task.labels[i] for i in best]


def seed_predictions(out: Path, task: Task, seed: int) -> list:
    rows = (out / "predictions" / "tiny" / task.name / f"seed{seed}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(row)["predicted"] for row in rows]


def test_save_keeps_each_tasks_best_seed_as_a_model_of_its_auto_class(tiny_model, tmp_path):
    out = tmp_path / "out"
    tasks = make_tasks(train=64, dev=16)
    run_tasks(model_sources([tiny_model], False), tasks, out, 2, load_recipes(QUICK_RECIPE), save=True)
    for task in tasks:
        best = json.loads((out / "best/tiny" / task.name / "best.json").read_text(encoding="utf-8"))
        figures = {seed: json.loads((out / f"runs/tiny/{task.name}/seed{seed}.json").read_text())["metrics"]
                   [task.main_metric] for seed in (0, 1)}
        assert best["seed"] == max(figures, key=lambda seed: (figures[seed], -seed))
        assert (best["model_dir"], best["test"]) == ("model", [])
        assert dev_predictions(out / "best/tiny" / task.name / "model", task) == seed_predictions(out, task,
                                                                                                   best["seed"])
    kept = {p: p.stat().st_mtime_ns for p in (out / "best").rglob("*")}
    run_tasks(model_sources([tiny_model], False), tasks, out, 2, load_recipes(QUICK_RECIPE), save=True)
    assert {p: p.stat().st_mtime_ns for p in (out / "best").rglob("*")} == kept  # nothing to do again


@pytest.mark.slow
def test_a_test_split_gets_the_best_seeds_predictions_ready_to_submit(tiny_model, tmp_path):
    """Seeds finished without --save: the best one is fine-tuned again, to the same model (the same seed on the
    same machine), for the model and the test predictions."""
    single, _, _, tokens = make_tasks(train=200, dev=40)
    hidden = make_tasks(train=0, dev=30, seed=9)
    directories = [write_single_task(tmp_path / "contains-w0", single, test=hidden[0].dev),
                   write_token_task(tmp_path / "names", tokens, test=tuple(
                       Example(e.id, words=e.words) for e in hidden[3].dev))]
    tasks = [load_task(directory) for directory in directories]
    out = tmp_path / "out"
    run_tasks(model_sources([tiny_model], False), tasks, out, 2, load_recipes(TEST_RECIPE))
    best = {task.name: json.loads((out / "best/tiny" / task.name / "best.json").read_text()) for task in tasks}
    assert [best[task.name]["model_dir"] for task in tasks] == [None, None]
    submitted = json.loads((out / "best/tiny/contains-w0/test/test.json").read_text(encoding="utf-8"))
    assert [row["id"] for row in submitted] == [e.id for e in hidden[0].dev]
    assert set(submitted[0]) == {"id", "Sent", "label"}
    right = sum(row["label"] == e.label for row, e in zip(submitted, hidden[0].dev))
    assert right >= 0.9 * len(submitted), right
    tagged = [line.split() for line in (out / "best/tiny/names/test/test.conll").read_text().splitlines() if line]
    gold = [tag for e in hidden[3].dev for tag in e.tags]
    assert [word for word, _ in tagged] == [word for e in hidden[3].dev for word in e.words]
    assert sum(tag == g for (_, tag), g in zip(tagged, gold)) >= 0.9 * len(gold)

    run_tasks(model_sources([tiny_model], False), tasks, out, 2, load_recipes(TEST_RECIPE), save=True)
    for task in tasks:
        again = json.loads((out / "best/tiny" / task.name / "best.json").read_text())
        assert again["seed"] == best[task.name]["seed"] and again["model_dir"] == "model"
        assert again["refit_figure"] == again["figure"]
        assert dev_predictions(out / "best/tiny" / task.name / "model", task) == seed_predictions(out, task,
                                                                                                   again["seed"])
    assert json.loads((out / "best/tiny/contains-w0/test/test.json").read_text(encoding="utf-8")) == submitted
    assert "ab" in (out / "best/tiny/names/model/vocab.txt").read_text().split() and len(TOKENS) == len(
        (out / "best/tiny/names/model/vocab.txt").read_text().split())
