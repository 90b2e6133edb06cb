"""The pretraining runner end to end on CPU (tiny model, generated NVIDIA-layout HDF5): exact resume of a stopped
run, phase 2 from phase 1's weights, two processes (data split, SIGTERM, resume), bad input refused before
training, crash-safe checkpoints, the schedule and the generated DeepSpeed config."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from wiki2bert_core.errors import ConfigError, DataError
from pretrain.model import checkpoint_files
from pretrain.run import checkpoint
from pretrain.cli import main
from pretrain.config import load_train_config
from pretrain.model.checkpoint_files import MODEL_STATES
from pretrain.run.deepspeed_settings import deepspeed_config
from pretrain.run.metrics import metrics_step
from pretrain.run.prepare import prepare
from pretrain.optim.schedule import WarmupPolyDecay
from pretrain.run.time_plan import scale_warning
from pretrain_cli import ENV, TINY, metrics, pretrain, run_ranks, tags, torchrun

def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset, write_hdf5, write_vocab_dir) -> Path:
    root = tmp_path_factory.mktemp("data")
    variant = write_dataset(root, [40, 40, 40], seq_len=32)
    for i in range(2):
        write_hdf5(root / "hu" / "hdf5" / "seq_len_64" / "training" / f"training_{i:04d}.hdf5", 20, 64, 10, seed=9 + i)
    write_vocab_dir(root / "hu" / "hdf5" / "seq_len_64")
    return variant


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory) -> Path:
    """An uninterrupted 8-step phase 1."""
    out = tmp_path_factory.mktemp("runs") / "full"
    done = pretrain("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=8",
                    "--set", "checkpoint_every=4", "--set", "keep_checkpoints=2")
    assert done.returncode == 0, done.stderr
    return out / "phase1"


@pytest.mark.slow
def test_the_time_plan_is_logged_once_the_first_steps_are_measured(full_run):
    log = (full_run / "train.log").read_text()
    plan = re.findall(r"phase1: 8 steps x 8 sequences at [0-9.e+-]+ s/step here: about \d+ s \(done ~\d\d:\d\d UTC\)",
                      log)
    assert len(plan) == 1, log
    assert "sized for GPUs" not in log  # a CPU run of global_batch 8 is in scale


def test_a_cpu_plan_sized_for_gpus_is_warned_about_naming_the_settings_to_change():
    recipe = load_train_config("phase1", overrides=["preset=tiny"])
    assert recipe.global_batch == 65536
    warning = scale_warning("phase1", recipe, world_size=1, cuda=False)
    for setting in ("global_batch", "micro_batch", "steps"):
        assert f"--set {setting}=" in warning
    assert "65,536" in warning and "accumulation 1,024" in warning
    assert scale_warning("phase1", recipe, world_size=1, cuda=True) is None
    small = load_train_config("phase1", overrides=["preset=tiny", "global_batch=64", "micro_batch=32", "steps=150"])
    assert scale_warning("phase1", small, world_size=1, cuda=False) is None


@pytest.mark.slow
def test_a_stopped_run_resumes_with_exactly_the_losses_of_an_uninterrupted_one(data, full_run, tmp_path):
    out = tmp_path / "stopped"
    args = ("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=8",
            "--set", "checkpoint_every=4", "--set", "keep_checkpoints=2")
    first = pretrain(*args, "--set", "steps_this_run=3")
    assert first.returncode == 0, first.stderr
    assert (checkpoint_files.checkpoint_dir(out / "phase1") / "latest").read_text() == "step00000003"
    with open(out / "phase1" / "metrics.jsonl", "a") as f:  # as if killed after logging step 4, before its save
        f.write(json.dumps({"step": 4, "loss": 0.0}) + "\n")
    second = pretrain(*args)  # same command: resumes from step 3 (dropout RNG, data position, optimizer)
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stderr
    assert "real_tok_s=" in second.stderr and "padding=" in second.stderr  # the progress bar

    expected, resumed = metrics(full_run), metrics(out / "phase1")
    assert [m["step"] for m in resumed] == list(range(1, 9))
    for a, b in zip(expected, resumed):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6, abs=1e-7), a["step"]
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5), a["step"]
        assert b["lr"] == pytest.approx(a["lr"], rel=1e-9)
    assert expected[0]["loss"] != expected[1]["loss"]  # the losses do move: the comparison is not vacuous
    assert tags(out / "phase1") == ["step00000004", "step00000008"]  # keep_checkpoints=2, step 3 pruned

    for name in ("hparams.json", "ds_config.json", "model_config.json", "githash.log", "gitdiff.log",
                 "tokenizer/vocab.txt", "tokenizer/tokenizer.json", "train.log"):
        assert (full_run / name).is_file(), name
    hparams = json.loads((full_run / "hparams.json").read_text())
    assert hparams["config"]["steps"] == 8 and hparams["seed"] == 12345 and hparams["gradient_accumulation"] == 2
    assert "torch==" in (full_run / "pip_freeze.txt").read_text()
    assert list((full_run / "tb").glob("events.out.tfevents.*"))
    assert {"mlm_accuracy", "nsp_loss", "tokens_per_s", "real_tokens_per_s", "padding_share", "tflops",
            "data_wait_share"} <= set(expected[0])
    assert hparams["config"]["pack_sequences"] is True  # the default: this test resumes a packed run

    again = pretrain(*args)
    assert again.returncode == 0 and "complete" in again.stderr


@pytest.mark.slow
def test_loading_in_the_training_process_sees_the_same_batches(data, full_run, tmp_path):
    done = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / "inline"), *TINY, "--set", "steps=8",
                    "--set", "checkpoint_every=4", "--set", "loader_workers=0")
    assert done.returncode == 0, done.stderr
    inline = [row["loss"] for row in metrics(tmp_path / "inline" / "phase1")]
    assert inline == pytest.approx([row["loss"] for row in metrics(full_run)], rel=1e-6)


@pytest.mark.slow
def test_phase2_starts_from_phase1_weights_with_a_fresh_schedule(data, full_run, tmp_path):
    seq512 = data.parent / "seq_len_64"
    done = pretrain("phase2", "--data", str(seq512), "--out", str(tmp_path), "--init", str(full_run),
                    "--set", "global_batch=4", "--set", "micro_batch=4", "--set", "steps=5",
                    "--set", "warmup=0.4", "--set", "lr=1e-12", "--set", "steps_this_run=1")
    assert done.returncode == 0, done.stderr
    phase2 = tmp_path / "phase2"
    hparams = json.loads((phase2 / "hparams.json").read_text())
    assert hparams["init"] == {"phase_dir": str(full_run.resolve()), "tag": "step00000008", "step": 8}
    assert hparams["config"]["preset"] == "tiny"  # phase 1's model, not phase2.yaml's preset
    assert metrics(phase2)[0]["step"] == 1 and metrics(phase2)[0]["lr"] == pytest.approx(1e-12 / 2)  # warmup 1/2
    before, after = (checkpoint_files.load_weights(checkpoint_files.latest(d)) for d in (full_run, phase2))
    assert before.keys() == after.keys()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)  # lr ~0: phase 1's weights


@pytest.mark.slow
def test_two_processes_split_the_files_stop_on_sigterm_and_resume(data, tmp_path):
    out = tmp_path / "two"
    args = ["phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=200",
            "--set", "checkpoint_every=100"]
    launch = [*torchrun(2), "-m", "pretrain.cli"]
    proc = subprocess.Popen(launch + args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not ((out / "phase1" / "metrics.jsonl").is_file() and len(metrics(out / "phase1")) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both ranks
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    latest = checkpoint_files.latest(out / "phase1")
    tag, meta = latest.tag, latest.meta
    stopped_at = metrics(out / "phase1")[-1]["step"]
    assert meta["step"] == stopped_at and meta["world_size"] == 2 and stopped_at < 200, stderr
    assert stderr.count("abandoning the step in progress") == 2
    client = torch.load(checkpoint_files.checkpoint_dir(out / "phase1") / tag / MODEL_STATES,
                        weights_only=False)
    files = [set(rank["data"]["files"]) for rank in client["ranks"]]
    assert not files[0] & files[1] and files[0] | files[1] == {p.name for p in (data / "training").iterdir()}

    resumed = run_ranks(2, "-m", "pretrain.cli", *args, "--set", "steps_this_run=2")  # the launcher's part is done
    assert resumed.returncode == 0, resumed.stderr
    assert [m["step"] for m in metrics(out / "phase1")][-3:] == [stopped_at, stopped_at + 1, stopped_at + 2]


@pytest.mark.parametrize("extra, message", [
    (["--set", "seq_len=128"], "training_0000.hdf5: sequences of length 32, but this phase trains on seq_len 128"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--set", "learning_rate=1e-4"], "--set learning_rate=1e-4: phase1.learning_rate: unknown key"),
    (["--set", "model.hidden=64"], "phase1.model.hidden: not a model setting"),
    (["--set", "global_batch=10"], "global_batch 10 is not a multiple of micro_batch 4"),
    (["--set", "precision=fp16"], "precision fp16: needs a GPU"),
    (["--deepspeed-config", "missing.json"], "missing.json: DeepSpeed config file not found"),
    (["--set", "zero_stage=3"], "zero_stage 3: lamb needs whole tensors for its per-tensor statistics"),
    (["--set", "zero_stage=3", "--set", "optimizer=stableadamw"], "zero_stage 3: stableadamw needs whole tensors"),
])
def test_bad_settings_exit_2_with_one_line_before_training(data, tmp_path, monkeypatch, capsys, extra, message):
    assert _exit_code(monkeypatch, ["phase1", "--data", str(data), "--out", str(tmp_path / "r"), *TINY, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r").exists()  # nothing written


def test_bad_data_exits_1_bad_vocab_and_init_exit_2_before_training(data, tmp_path, monkeypatch, capsys, write_hdf5):
    (tmp_path / "empty" / "training").mkdir(parents=True)
    big = tmp_path / "big" / "training" / "big.hdf5"
    write_hdf5(big, 10, 32, 5, vocab_size=500)
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("micro_batch: 4\nwarmup_steps: 100\n")
    vocab = data  # a variant directory holds its vocabulary
    cases = [
        (["phase1", "--data", str(tmp_path / "empty")], "empty/training: no HDF5 files", 2),
        (["phase1", "--data", str(big.parents[1]), "--vocab", str(vocab)],
         "big.hdf5: input_ids holds token id", 1),
        (["phase2", "--data", str(data), "--init", str(tmp_path / "empty")],
         "empty: neither a pretraining phase directory", 2),
        (["phase2", "--data", str(data)], "phase1: no checkpoint to start phase 2 from", 2),
        (["phase1", "--data", str(data), "--config", str(bad_config)], "bad.yaml: phase1.warmup_steps: unknown key",
         2),
        (["phase1", "--data", str(big.parents[1])], "no vocab.txt in this data directory; pass --vocab DIR", 2),
    ]
    for args, message, expected_code in cases:
        code = _exit_code(monkeypatch, [*args, "--out", str(tmp_path / "r"), *TINY])
        err = capsys.readouterr().err
        assert code == expected_code and err.count("\n") == 1 and message in err, (args, err)
    assert not (tmp_path / "r").exists()


def test_a_vocab_other_than_the_datas_is_refused_before_training(data, tmp_path, monkeypatch, capsys,
                                                                 write_vocab_dir):
    other = write_vocab_dir(tmp_path / "other", size=80)  # the data's ids index a 60-token vocabulary
    code = _exit_code(monkeypatch, ["phase1", "--data", str(data), "--vocab", str(other), "--out", str(tmp_path / "r"),
                                    *TINY, "--set", "steps=1"])
    assert (code, capsys.readouterr().err) == (2, f"error: --vocab {other / 'vocab.txt'}: differs from "
                                                  f"{data / 'vocab.txt'}, the vocabulary the data's token ids index "
                                                  f"(80 tokens against 60); leave out --vocab\n")
    assert not (tmp_path / "r").exists()


def test_a_crash_while_saving_leaves_latest_on_the_previous_checkpoint(tmp_path):
    class Engine:
        global_rank = 0
        fail = False

        def save_checkpoint(self, save_dir, tag, client_state, save_latest):
            assert save_latest is False  # `latest` is ours to write
            (Path(save_dir) / tag).mkdir(parents=True)
            (Path(save_dir) / tag / MODEL_STATES).write_bytes(b"half a checkpoint")
            if self.fail:
                raise OSError("disk full")

    engine = Engine()
    for step in (1, 2):
        checkpoint.save(engine, tmp_path, step, {"world_size": 1}, {}, keep=2)
    engine.fail = True
    with pytest.raises(DataError, match=r"step00000003: saving the checkpoint failed \(OSError: disk full\); "
                                             r".* GiB free there; the latest checkpoint is still step00000002$"):
        checkpoint.save(engine, tmp_path, 3, {"world_size": 1}, {}, keep=2)
    assert checkpoint_files.latest(tmp_path).tag == "step00000002" and "step00000003" not in tags(tmp_path)
    engine.fail = False
    checkpoint.save(engine, tmp_path, 4, {"world_size": 1}, {}, keep=2)
    latest = checkpoint_files.latest(tmp_path)
    assert (latest.tag, latest.meta) == ("step00000004", {"world_size": 1, "tag": "step00000004", "step": 4,
                                                          "files": {MODEL_STATES: 17},
                                                          "sha256": {MODEL_STATES: sha256(b"half a checkpoint")}})
    assert tags(tmp_path) == ["step00000002", "step00000004"]  # the broken step 3 and the oldest are gone


VERIFY_SCRIPT = """
import sys, torch
from pathlib import Path
from pretrain.model import checkpoint_files
from wiki2bert_core.errors import DataError
torch.distributed.init_process_group("gloo")
try:
    checkpoint_files.verify(checkpoint_files.latest(Path(sys.argv[1])))
    print("intact")
except DataError as e:
    print(e)
"""


@pytest.mark.slow
def test_each_rank_checks_a_share_of_the_checksums_and_all_report_a_damage(tmp_path):
    class Engine:
        global_rank = 0

        def save_checkpoint(self, save_dir, tag, client_state, save_latest):
            (Path(save_dir) / tag).mkdir(parents=True)
            for rank in range(2):
                (Path(save_dir) / tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"ab" * 100)

    checkpoint.save(Engine(), tmp_path, 1, {"world_size": 2}, {}, keep=1)
    checkpoint.save(Engine(), tmp_path, 2, {"world_size": 2}, {}, keep=2)
    damaged = checkpoint_files.checkpoint_dir(tmp_path) / "step00000002" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"

    script = tmp_path / "verify.py"
    script.write_text(VERIFY_SCRIPT, encoding="utf-8")

    def both_ranks() -> list[str]:
        return run_ranks(2, str(script), str(tmp_path), timeout=120).stdout.splitlines()  # rank 0's line, rank 1's

    assert both_ranks() == ["intact", "intact"]
    damaged.write_bytes(b"ba" * 100)  # the second of the two files: rank 1's share
    ckpt = checkpoint_files.checkpoint_dir(tmp_path)
    expected = (f"{damaged}: its sha256 differs from the one saved with the checkpoint (changed on disk since); the "
                f"previous complete checkpoint is {ckpt / 'step00000001'}: to go on from it, write 'step00000001' into "
                f"{ckpt / 'latest'}")
    assert both_ranks() == [expected, expected]


def test_schedule_warms_up_linearly_then_decays_as_the_square_root():
    f = WarmupPolyDecay(total_steps=110, warmup_steps=10, power=0.5)
    assert [f(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert f(10) == 1.0 and f(60) == pytest.approx(0.5 ** 0.5) and 0 < f(109) < 0.11
    phase1, phase2 = load_train_config("phase1"), load_train_config("phase2")
    assert (phase1.seq_len, phase1.global_batch, phase1.lr, phase1.steps, int(phase1.warmup * phase1.steps)) == \
        (None, 65536, 6e-3, 7038, 2000)  # seq_len: the data's (128 for the phase-1 variant, 512 for phase 2's)
    assert (phase2.seq_len, phase2.global_batch, phase2.lr, phase2.steps, int(phase2.warmup * phase2.steps)) == \
        (None, 32768, 4e-3, 1563, 200)


def test_the_sequence_length_is_the_datas_and_a_setting_only_asserts_it(data, tmp_path):
    config = load_train_config("phase1", overrides=["preset=tiny", "global_batch=8", "micro_batch=4"])
    assert config.seq_len is None
    assert prepare("phase1", data, tmp_path / "r", config).data.seq_len == 32
    assert prepare("phase1", data.parent / "seq_len_64", tmp_path / "r", config).data.seq_len == 64
    assert prepare("phase1", data, tmp_path / "r", dataclasses.replace(config, seq_len=32)).data.seq_len == 32
    with pytest.raises(ConfigError, match=r"training_0000\.hdf5: sequences of length 32, but this phase trains on "
                                          r"seq_len 128 \(use the HDF5 variant made for 128, or seq_len null"):
        prepare("phase1", data, tmp_path / "r", dataclasses.replace(config, seq_len=128))
    longer = dataclasses.replace(config, model={"max_position_embeddings": 16})
    with pytest.raises(ConfigError, match=r"seq_len_32: sequences of length 32, longer than the model's "
                                          r"max_position_embeddings 16"):
        prepare("phase1", data, tmp_path / "r", longer)


def test_accumulation_comes_from_global_batch_micro_batch_and_ranks(data, tmp_path, monkeypatch):
    user = tmp_path / "ds.json"
    user.write_text(json.dumps({"zero_optimization": {"reduce_bucket_size": 1000}, "wall_clock_breakdown": True}))
    config = load_train_config("phase1", overrides=["preset=tiny", "seq_len=32", "global_batch=64",
                                                    "micro_batch=4", "precision=bf16"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    run = prepare("phase1", data, tmp_path / "r", config, deepspeed_config=user)
    assert run.grad_accumulation == 8 and run.world_size == 2
    ds = deepspeed_config(run.config, run.grad_accumulation, run.precision, run.user_ds_config, zero_stage=1)
    assert ds["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 1000} and ds["wall_clock_breakdown"]
    assert ds["bf16"] == {"enabled": True} and "torch_autocast" not in ds
    ds = deepspeed_config(run.config, run.grad_accumulation, run.precision, run.user_ds_config, zero_stage=0)
    assert ds["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"} and "bf16" not in ds  # fp32 to LAMB
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (64, 8)
    user.write_text(json.dumps({"train_batch_size": 8}))
    with pytest.raises(ConfigError, match="ds.json: train_batch_size is set by wiki2bert"):
        prepare("phase1", data, tmp_path / "r", config, deepspeed_config=user)
    overridden = load_train_config("phase1", overrides=["lr=1e-4", "model.hidden_dropout_prob=0"])
    assert overridden.lr == 1e-4 and overridden.model == {"hidden_dropout_prob": 0.0}


def _exit_code(monkeypatch, args: list[str]) -> int:
    monkeypatch.setattr(sys, "argv", ["pretrain", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code


def test_metrics_rows_cut_off_by_a_crash_are_dropped_on_resume():
    rows = ['{"step": 1, "loss": 2.0}\n', '{"step": 2, "loss": 1.9}\n', '{"step": 3, "lo']
    assert [row for row in rows if metrics_step(row) <= 2] == rows[:2]
    assert metrics_step("\n") == float("inf")


@pytest.mark.slow
def test_an_unpacked_run_resumes_exactly_too(data, full_run, tmp_path):
    """pack_sequences=false (one sequence a row); the test above runs the default, packed."""
    unpacked = ("--set", "pack_sequences=false", "--set", "steps=6", "--set", "checkpoint_every=3")
    whole = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / "whole"), *TINY, *unpacked)
    assert whole.returncode == 0, whole.stderr
    args = ("phase1", "--data", str(data), "--out", str(tmp_path / "stopped"), *TINY, *unpacked)
    first = pretrain(*args, "--set", "steps_this_run=2")
    assert first.returncode == 0, first.stderr
    second = pretrain(*args)
    assert second.returncode == 0 and "resumed from" in second.stderr, second.stderr
    expected, resumed = metrics(tmp_path / "whole" / "phase1"), metrics(tmp_path / "stopped" / "phase1")
    assert [m["step"] for m in resumed] == list(range(1, 7))
    for a, b in zip(expected, resumed):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6, abs=1e-7), a["step"]
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5), a["step"]
    packed = metrics(full_run)
    for a, b in zip(expected, packed):  # the same sequences, packed into as many rows or fewer
        assert b["padding_share"] <= a["padding_share"]
        assert b["real_tokens_per_s"] / b["samples_per_s"] == pytest.approx(a["real_tokens_per_s"] / a["samples_per_s"])
    assert sum(b["padding_share"] for b in packed) < sum(a["padding_share"] for a in expected)


@pytest.mark.slow
def test_packed_and_unpacked_runs_have_the_same_losses_and_gradients(data, tmp_path):
    """Without dropout, the same sequences packed give the same losses and gradient norms over optimizer steps of
    two accumulated micro-batches: packing changes neither the loss normalization nor what global_batch counts."""
    runs = {}
    for pack in ("false", "true"):
        done = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / pack), *TINY, "--set", "steps=4",
                        "--set", f"pack_sequences={pack}", "--set", "model.hidden_dropout_prob=0",
                        "--set", "model.attention_probs_dropout_prob=0")
        assert done.returncode == 0, done.stderr
        runs[pack] = metrics(tmp_path / pack / "phase1")
    for a, b in zip(runs["false"], runs["true"]):
        for key in ("loss", "mlm_loss", "nsp_loss", "grad_norm", "mlm_accuracy", "nsp_accuracy"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
        assert b["padding_share"] <= a["padding_share"]
    assert runs["false"][0]["loss"] != runs["false"][-1]["loss"]


@pytest.mark.slow
def test_a_variant_directory_copied_alone_trains_evaluates_and_exports(tmp_path, run_hdf5_stage, write_corpus,
                                                                      write_vocab):
    """The hdf5 stage's variant directory holds its vocabulary and tokenizer: moved elsewhere on its own (as to a
    cluster), it trains, evaluates on its own test split and the export loads in transformers with its tokenizer."""
    import shutil

    import transformers

    from pipeline.stages.hdf5.stage import Hdf5Config, Variant

    build = tmp_path / "build"
    (build / "shard").mkdir(parents=True)
    write_corpus(build / "shard" / "training_0000.txt", 120, seed=1)
    write_corpus(build / "shard" / "test_0000.txt", 40, seed=2)
    write_vocab(build / "vocab.txt")
    out = run_hdf5_stage(build, build / "shard", build / "vocab.txt",
                         Hdf5Config(variants=[Variant(32, 5)], dupe_factor=2))
    variant = tmp_path / "cluster" / "variant"
    [made] = [d for d in out.iterdir() if d.is_dir()]
    shutil.copytree(made, variant)
    shutil.rmtree(build)  # nothing of the pipeline's work directory is left

    done = pretrain("phase1", "--data", str(variant), "--out", str(tmp_path / "run"), *TINY, "--set", "steps=2")
    assert done.returncode == 0, done.stderr
    evaluated = pretrain("eval", str(tmp_path / "run" / "phase1"), "--data", str(variant))
    assert evaluated.returncode == 0, evaluated.stderr
    assert "eval_mlm_accuracy" in evaluated.stdout
    exported = pretrain("export", str(tmp_path / "run" / "phase1"), "--out", str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    model, info = transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert tokenizer.convert_ids_to_tokens(tokenizer("w1 w2s .")["input_ids"]) == \
        ["[CLS]", "w1", "w2", "##s", ".", "[SEP]"]
    assert model.config.vocab_size >= len(tokenizer)


def test_deepspeed_ops_are_built_in_the_environments_own_cache(tmp_path):
    """DeepSpeed JIT-builds its ops through torch.utils.cpp_extension.load, into TORCH_EXTENSIONS_DIR, by default the
    user-wide ~/.cache/torch_extensions that every environment shares (a build lock another one left hung runs):
    pretrain points it into its virtual environment, one directory a `ninja` on PATH (two ninja versions read each
    other's .ninja_log as out of date: a process with the venv's bin on PATH and one without rebuilt the op in
    turn), unless it is set."""
    env = {k: v for k, v in ENV.items() if k != "TORCH_EXTENSIONS_DIR"}

    def extensions_dir(module: str = "pretrain", path: str = env.get("PATH", os.defpath), **extra: str) -> str:
        code = f"import os, {module}; print(os.environ.get('TORCH_EXTENSIONS_DIR'))"
        return subprocess.run([sys.executable, "-c", code], env={**env, "PATH": path, **extra}, capture_output=True,
                              text=True, check=True).stdout.strip()

    own = extensions_dir("pretrain.cli")
    in_venv = sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK)
    if in_venv:
        other_ninja = tmp_path / "bin" / "ninja"
        other_ninja.parent.mkdir()
        other_ninja.write_text("#!/bin/sh\n")
        other_ninja.chmod(0o755)
        other = extensions_dir(path=f"{other_ninja.parent}{os.pathsep}{env.get('PATH', os.defpath)}")
        assert Path(own).parent == Path(other).parent == Path(sys.prefix) / "torch_extensions" and own != other
        assert extensions_dir() == own  # the same ninja, the same directory
    else:
        assert own == "None"
    assert extensions_dir(TORCH_EXTENSIONS_DIR=str(tmp_path)) == str(tmp_path)


@pytest.mark.skipif(sys.prefix == sys.base_prefix or not os.access(sys.prefix, os.W_OK), reason="not in a venv")
def test_a_load_lock_left_by_a_killed_process_is_removed_not_waited_for_forever():
    """torch's marker of a load in progress (`<build dir>/lock`), as a process killed while loading DeepSpeed's
    communication op leaves it (a rank stopped by its launcher when another rank failed hung the next run for good).
    In a directory of its own (a copy of the venv's built op): another test's process loading the op from the shared
    one at the same moment would remove the planted file first."""
    env = {k: v for k, v in ENV.items() if k != "TORCH_EXTENSIONS_DIR"}
    code = "import os, pretrain; print(os.environ['TORCH_EXTENSIONS_DIR'])"
    shared = Path(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout.strip())
    directory = shared.parent / f"test-lock-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    if (shared / "deepspeed_shm_comm").is_dir():
        shutil.copytree(shared / "deepspeed_shm_comm", directory / "deepspeed_shm_comm", symlinks=True,
                        ignore=shutil.ignore_patterns("lock"))
    leftover = directory / "deepspeed_shm_comm" / "lock"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.touch()
    try:
        done = subprocess.run([sys.executable, "-c", "import pretrain; pretrain.load_communication_op()"],
                              env={**env, "TORCH_EXTENSIONS_DIR": str(directory)}, capture_output=True, text=True,
                              timeout=240)
    finally:
        shutil.rmtree(directory, ignore_errors=True)  # a failure here must not hang the rest of the suite
    assert done.returncode == 0, done.stderr
    assert f"{leftover}: left by a process killed while loading" in done.stderr
