"""`pretrain finetune`: each task kind learns a synthetic task a tiny BERT can learn, beside its majority baseline;
the same seed gives the same figures; a killed run re-run keeps its finished seeds; bad models and settings are one
line."""
from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from finetune_tasks import QUICK_RECIPE, TEST_RECIPE, TOKENS, make_tasks, write_single_task
from pretrain_cli import ENV, pretrain, start_pretrain
from wiki2bert_core.errors import ConfigError, DataError
from pretrain.finetune.recipe import load_recipes
from pretrain.finetune.run import model_sources, run_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def finished(tiny_model, tmp_path_factory) -> Path:
    """The output directory of a run over the four tasks with 2 seeds."""
    out = tmp_path_factory.mktemp("finetune") / "out"
    table = run_tasks(model_sources([tiny_model], random_init=False), make_tasks(), out, 2, load_recipes(TEST_RECIPE))
    assert table == (out / "results.md").read_text(encoding="utf-8")
    return out


@pytest.mark.slow
def test_each_kind_learns_its_task_well_above_the_majority_baseline(finished):
    results = json.loads((finished / "results.json").read_text(encoding="utf-8"))
    rows = {(row["model"], row["task"]): row for row in results["results"]}
    margins = {"single": 0.5, "pair": 0.3, "choice": 0.3, "tokens": 0.5}  # mcc, accuracy, accuracy, entity_f1
    for name, task in results["tasks"].items():
        main = task["main_metric"]
        model, baseline = rows[("tiny", name)]["summary"][main], rows[("majority baseline", name)]["summary"][main]
        assert [run["seed"] for run in rows[("tiny", name)]["seeds"]] == [0, 1]
        assert model["min"] > baseline["median"] + margins[name], (name, model, baseline)
    assert rows[("majority baseline", "single")]["summary"]["mcc"]["median"] == 0
    assert rows[("majority baseline", "tokens")]["summary"]["entity_f1"]["median"] == 0


def test_outputs_table_chart_predictions_and_provenance(finished):
    table = (finished / "results.md").read_text(encoding="utf-8")
    assert "| tiny |" in table and "| majority baseline |" in table and "single (mcc)" in table
    assert (finished / "results.png").read_bytes()[:4] == b"\x89PNG"
    for name in ("githash.log", "pip_freeze.txt", "finetune.log"):
        assert (finished / name).is_file()
    settings = json.loads((finished / "settings.json").read_text(encoding="utf-8"))
    assert settings["recipes"]["single"]["lr"] == 3e-3 and settings["recipes"]["tokens"]["max_length"] == 256
    tasks = {task.name: task for task in make_tasks()}
    for seed in (0, 1):
        rows = [json.loads(line) for line in
                (finished / "predictions/tiny/tokens" / f"seed{seed}.jsonl").read_text(encoding="utf-8").splitlines()]
        assert [row["id"] for row in rows] == [e.id for e in tasks["tokens"].dev]
        # one tag per word, "abcd" (two sub-tokens) included
        assert all(len(row["predicted"]) == len(row["words"]) == len(row["gold"]) for row in rows)
        assert any("abcd" in row["words"] for row in rows)
        choice = (finished / "predictions/tiny/choice" / f"seed{seed}.jsonl").read_text(encoding="utf-8")
        assert {json.loads(line)["predicted"] for line in choice.splitlines()} == {"1", "2"}


def test_the_same_seed_gives_the_same_figures_twice(finished, tiny_model, tmp_path):
    tasks = make_tasks()[::3]  # single and tokens
    run_tasks(model_sources([tiny_model], random_init=False), tasks, tmp_path, 1, load_recipes(TEST_RECIPE))
    for task in tasks:
        part = f"predictions/tiny/{task.name}/seed0.jsonl"
        assert (tmp_path / part).read_bytes() == (finished / part).read_bytes()
        again, first = (json.loads((d / f"runs/tiny/{task.name}/seed0.json").read_text(encoding="utf-8"))
                        for d in (tmp_path, finished))
        assert again.pop("seconds") >= 0 and first.pop("seconds") >= 0
        assert again == first


def test_bf16_autocast_runs_the_same_code_and_learns(tiny_model, tmp_path):
    task = make_tasks()[0]
    run_tasks(model_sources([tiny_model], False), [task], tmp_path, 1, load_recipes([*TEST_RECIPE, "precision=bf16"]))
    result = json.loads((tmp_path / "runs/tiny/single/seed0.json").read_text(encoding="utf-8"))
    assert result["precision"] == "bf16" and result["metrics"]["mcc"] > 0.5


def test_another_recipe_for_the_same_directory_is_refused_before_anything_runs(finished, tiny_model):
    before = {p: p.stat().st_mtime_ns for p in finished.rglob("*")}
    with pytest.raises(ConfigError, match=rf"^{finished}: holds results of another single recipe \(lr 0\.003 there, "
                                          r"0\.001 now\); re-run with the settings it was made with, or choose"):
        run_tasks(model_sources([tiny_model], False), make_tasks(), finished, 2,
                  load_recipes([*TEST_RECIPE, "lr=1e-3"]))
    assert {p: p.stat().st_mtime_ns for p in finished.rglob("*")} == before


def test_recipes_layer_set_keys_for_all_kinds_or_one():
    recipes = load_recipes(["lr=1e-3", "tokens.epochs=2", "pair.lr=2e-5"])
    assert {kind: (r.lr, r.epochs, r.batch) for kind, r in recipes.items()} == {
        "single": (1e-3, 3, 32), "pair": (2e-5, 5, 16), "choice": (1e-3, 5, 16), "tokens": (1e-3, 2, 32)}
    for bad, message in (("epochs=0", "--set epochs=0: single.epochs: must be at least 1, got 0"),
                         ("tokens.nope=1", "--set tokens.nope=1: tokens.nope: unknown key"),
                         ("lr", "--set lr: expected KEY=VALUE")):
        with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
            load_recipes([bad])


def test_random_init_is_the_same_architecture_with_other_weights(tiny_model):
    from pretrain.finetune.train import load_model

    task = make_tasks(train=4, dev=2)[0]
    pretrained, random_init = (load_model(source, task, seed=0) for source in model_sources([tiny_model], True))
    assert [name for name, _ in pretrained.named_parameters()] == [name for name, _ in random_init.named_parameters()]
    embeddings = "bert.embeddings.word_embeddings.weight"
    assert not pretrained.state_dict()[embeddings].equal(random_init.state_dict()[embeddings])
    assert model_sources([tiny_model], True)[1].name == "tiny-random-init"


def finetune_args(*args) -> list[str]:
    return ["finetune", *map(str, args)]


@pytest.mark.slow
def test_a_killed_run_rerun_keeps_its_finished_seeds_and_finishes_the_rest(tiny_model, tmp_path):
    task_dir = write_single_task(tmp_path / "contains-w0", make_tasks(train=1000, dev=100)[0])
    out = tmp_path / "out"
    command = finetune_args(tiny_model, "--task", task_dir, "--out", out, "--seeds", 3,
                            *[arg for item in TEST_RECIPE for arg in ("--set", item)])
    first = out / "runs/tiny/contains-w0/seed0.json"
    process = start_pretrain(*command, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not first.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "re-run the same command to continue" in stderr
    finished = sorted(p.name for p in first.parent.iterdir())
    assert "seed0.json" in finished and "seed2.json" not in finished, finished  # stopped in the middle
    assert not list(out.rglob("*.tmp"))
    kept = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "runs").rglob("seed*.json")}
    kept |= {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "predictions").rglob("seed*.jsonl")}

    done = pretrain(*command, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{len(finished)} seeds already finished, {3 - len(finished)} to run" in done.stderr
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in kept} == kept
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [run["seed"] for run in results["results"][0]["seeds"]] == [0, 1, 2]
    assert "| tiny |" in done.stdout



def test_a_model_directory_without_tokenizer_is_one_line(tiny_model, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((tiny_model / name).read_bytes())
    task_dir = write_single_task(tmp_path / "task", make_tasks(train=8, dev=4)[0])
    done = pretrain(*finetune_args(bare, "--task", task_dir, "--out", tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {bare}: no tokenizer files (tokenizer.json or vocab.txt); copy the tokenizer the model was "
        f"pretrained with into it (`pretrain export` writes them)"]
    assert not (tmp_path / "out").exists()


def test_model_directories_that_name_nothing_usable_or_the_same_row_are_refused(tiny_model, tmp_path):
    (tmp_path / "weights-only").mkdir()
    for path, message in ((tmp_path / "missing", "no such model directory"),
                          (tmp_path / "weights-only", "neither a pretraining phase directory")):
        with pytest.raises(ConfigError, match=f"^{path}: {message}"):
            model_sources([path], False)
    twin = tmp_path / "tiny"
    twin.mkdir()
    for name in ("config.json", "vocab.txt"):
        (twin / name).write_bytes((tiny_model / name).read_bytes())
    with pytest.raises(ConfigError, match="^two models named tiny: their results would share a directory"):
        model_sources([tiny_model, twin], False)


def test_a_model_that_does_not_load_is_one_line(tiny_model, tmp_path):
    from pretrain.finetune.train import load_model

    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer.json"):
        (damaged / name).write_bytes((tiny_model / name).read_bytes())
    (damaged / "model.safetensors").write_bytes((tiny_model / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(DataError, match=f"^{damaged}: cannot load the model for single tasks \\(.*header"):
        load_model(model_sources([damaged], False)[0], make_tasks(train=4, dev=2)[0], seed=0)


def test_length_grouped_batches_hold_every_example_once_in_a_seeded_order():
    import torch

    from pretrain.finetune.train import epoch_batches, optimizer_steps

    lengths = [random.Random(i).randint(3, 200) for i in range(1000)]
    grouped, plain = (load_recipes([f"group_by_length={flag}", "batch=8"])["single"] for flag in ("true", "false"))
    for recipe in (grouped, plain):
        batches = epoch_batches(lengths, recipe, torch.Generator().manual_seed(3))
        assert sorted(i for b in batches for i in b) == list(range(1000))
        assert len(batches) == optimizer_steps(1000, recipe) // recipe.epochs and max(map(len, batches)) == 8
        assert batches == epoch_batches(lengths, recipe, torch.Generator().manual_seed(3))

    def padding(batches):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    generator = torch.Generator().manual_seed(3)
    assert padding(epoch_batches(lengths, grouped, generator)) * 5 < padding(epoch_batches(lengths, plain, generator))


def test_the_first_optimizer_step_already_learns_as_pretraining_warms_up():
    """Fine-tuning's schedule is pretraining's (pretrain/optim/schedule.py): step t of w warmup steps runs at
    (t + 1) / w of lr, so the first step moves the weights (the old convention ran it at lr 0)."""
    import torch
    import transformers

    from pretrain.finetune.encode import Encoded
    from pretrain.finetune.train import fine_tune

    config = transformers.BertConfig(vocab_size=len(TOKENS), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = transformers.BertForSequenceClassification(config)
    train = [Encoded(rows=((2, 5 + i % 3, 3),), segments=((0, 0, 0),), label=i % 2) for i in range(8)]
    recipe = load_recipes(["batch=4", "epochs=1", "warmup=0.5", "group_by_length=false"])["single"]  # 1 of 2 steps
    weights = [p.detach().clone() for p in model.parameters()]
    moved = []

    def on_step():
        moved.append(sum(not torch.equal(p, w) for p, w in zip(model.parameters(), weights)))
        weights[:] = [p.detach().clone() for p in model.parameters()]

    fine_tune(model, train, "single", recipe, seed=0, pad_id=0, device=torch.device("cpu"), bf16=False,
              on_step=on_step)
    assert len(moved) == 2 and all(moved), moved


def copy_model(model: Path, directory: Path) -> Path:
    directory.mkdir(parents=True)
    for path in model.iterdir():
        (directory / path.name).write_bytes(path.read_bytes())
    return directory


def test_a_run_that_failed_on_a_damaged_model_leaves_out_to_the_repaired_model(tiny_model, tmp_path):
    """The model's fingerprint was recorded before its first seed: the repaired model, at the same path, was then
    refused as "another model" although --out held no results."""
    model = copy_model(tiny_model, tmp_path / "tiny")
    weights = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(weights[:1000])
    out = tmp_path / "out"
    task = make_tasks(train=32, dev=8)[0]
    with pytest.raises(DataError, match="cannot load the model"):
        run_tasks(model_sources([model], False), [task], out, 1, load_recipes(QUICK_RECIPE))
    (model / "model.safetensors").write_bytes(weights)
    run_tasks(model_sources([model], False), [task], out, 1, load_recipes(QUICK_RECIPE))
    assert (out / "runs/tiny/single/seed0.json").is_file()
    # the figures' settings are those of the finished seeds: the repaired model's
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    assert settings["models"]["tiny"]["files"]["model.safetensors"]["size"] == len(weights)


def test_a_changed_tokenizer_is_another_model(tiny_model, tmp_path):
    """The fingerprint covered config and weights only: a re-run with a new vocabulary reported the old figures."""
    from wiki2bert_core.wordpiece import write_tokenizer_dir

    model = copy_model(tiny_model, tmp_path / "tiny")
    out = tmp_path / "out"
    task = make_tasks(train=32, dev=8)[0]
    run_tasks(model_sources([model], False), [task], out, 1, load_recipes(QUICK_RECIPE))
    tokens = list(TOKENS)
    tokens[6], tokens[7] = tokens[7], tokens[6]  # w1 and w2 swap ids: the same size, other inputs
    write_tokenizer_dir(model, tokens)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(ConfigError, match=rf"^{out}: holds results of another model named tiny \(its tokenizer "
                                          rf"files differ from those of {model}\); re-run with the settings"):
        run_tasks(model_sources([model], False), [task], out, 1, load_recipes(QUICK_RECIPE))
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_out_naming_a_file_is_one_line_naming_it(tiny_model, tmp_path):
    """It said only "File exists"."""
    task = make_tasks(train=8, dev=4)[0]
    file = tmp_path / "results.txt"
    file.write_text("mine")
    for out, named in ((file, ""), (file / "run1", f" {file}")):
        with pytest.raises(ConfigError, match=rf"^{out}:{named} is a file, not a directory; choose another --out"):
            run_tasks(model_sources([tiny_model], False), [task], out, 1, load_recipes(QUICK_RECIPE))
    assert file.read_text() == "mine"


@pytest.mark.slow
def test_a_full_disk_under_out_is_one_line_naming_the_file(tiny_model, tmp_path):
    """RLIMIT_FSIZE fails writes past its size (EFBIG) as a full disk does (ENOSPC): the message named no file."""
    import resource

    task_dir = write_single_task(tmp_path / "task", make_tasks(train=16, dev=4)[0])
    out = tmp_path / "out"
    command = finetune_args(tiny_model, "--task", task_dir, "--out", out, "--seeds", 1, "--set", "epochs=1")
    limit = 1 << 10  # past settings.json's first KiB
    done = subprocess.run([sys.executable, "-m", "pretrain.cli", *command], env=ENV, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(rf"error: {out}/settings\.json: File too large \(writing the results; \d+\.\d GiB free "
                        rf"in {out}\); make room and re-run the same command: finished seeds are kept", line), line
    assert not list(out.rglob("*.tmp"))
