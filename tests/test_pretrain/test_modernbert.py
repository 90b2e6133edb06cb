"""ModernBERT (arch modernbert): our model computes transformers' ModernBertForMaskedLM (the same logits, and the
encoder every fine-tuning class reads), local layers see only their window, raising the global RoPE base changes the
global layers only, packed rows give the losses and gradients of padded ones; the runner trains, resumes exactly,
exports a directory transformers loads as a ModernBertForMaskedLM, takes it back with --init, fine-tunes it on every
task kind, and refuses each bad setting with one line; the recipe (AdamW, warmup-stable-decay) and the presets."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import transformers
from typer.testing import CliRunner

from model_dirs import write_phase_dir
from pretrain_batches import nvidia_rows
from pretrain_cli import assert_refused, metrics, pretrain
from finetune_tasks import TOKENS as TASK_TOKENS, make_tasks
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.wordpiece import SPECIAL_TOKENS
from pretrain.cli import app, main
from pretrain.config import load_train_config, model_config
from pretrain.data.packing import pack_batch
from pretrain.finetune.recipe import load_recipes
from pretrain.finetune.run import model_sources, run_tasks
from pretrain.finetune.train import AUTO_CLASSES
from pretrain.model.arch import pretraining_model, spec
from pretrain.model.attention import token_layout
from pretrain.model.hf_config import hf_config, model_config_of
from pretrain.model.modernbert.model import ModernBertForPreTraining, rotary_tables
from pretrain.optim.optimizers import parameter_groups
from pretrain.optim.schedule import WarmupStableDecay, lr_schedule
from pretrain.run.prepare import prepare
from pretrain.tools.estimate import estimate_memory, parameter_sizes
from pretrain.tools.export import export_hf, fill_mask

VOCAB, LENGTH, PREDICTIONS, WINDOW = 104, 32, 6, 8  # local layers: 4 positions either side
CLS, SEP = SPECIAL_TOKENS.index("[CLS]"), SPECIAL_TOKENS.index("[SEP]")
# 4 layers: 0 and 3 global, 1 and 2 local
SHAPE = dict(num_hidden_layers=4, local_attention=WINDOW, max_position_embeddings=64)
TINY = ["--preset", "tiny", "--set", "arch=modernbert", "--set", "global_batch=8", "--set", "micro_batch=4",
        "--set", "log_every=1", "--set", "model.local_attention=16", "--set", "lr=1e-3"]


def tiny(seed: int = 0, **settings) -> ModernBertForPreTraining:
    torch.manual_seed(seed)
    return pretraining_model(model_config("tiny", VOCAB, "modernbert", **{**SHAPE, **settings})).eval()


def twin(model: ModernBertForPreTraining) -> transformers.ModernBertForMaskedLM:
    """transformers' ModernBertForMaskedLM with our model's weights (SDPA, as it chooses on CPU)."""
    theirs = transformers.ModernBertForMaskedLM(hf_config(model.config, VOCAB, 0, None, CLS, SEP))
    theirs.load_state_dict(model.state_dict(), strict=True)
    return theirs.eval()


def all_positions(rows: int, length: int) -> torch.Tensor:
    """masked_lm_positions that ask for every position of every row (position 0 is [CLS]'s, as slot 0 reads)."""
    return torch.arange(length).expand(rows, -1)


def padded_batch() -> dict[str, torch.Tensor]:
    return nvidia_rows([32, 20, 9, 27], LENGTH, PREDICTIONS, VOCAB, seed=3)


def test_our_modernbert_gives_transformers_logits():
    """Padded rows longer than the window: every real position's logits within 1e-4 in fp32."""
    model = tiny()
    batch = padded_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        ours, nsp = model.logits(ids, batch["token_type_ids"], mask, all_positions(*ids.shape))
        theirs = twin(model)(input_ids=ids, attention_mask=mask).logits
    assert nsp is None
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max().item() <= 1e-4
    assert theirs[real].std() > 0.1  # logits that differ between tokens: the comparison is not vacuous


def test_every_finetuning_class_reads_the_encoder_our_model_computes(tmp_path):
    """The export loaded in each task kind's class: no weight but the classifier is fresh, and its encoder's output
    is ours (the final LayerNorm's), the MLM head's transform its head."""
    model = tiny()
    tokens = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(VOCAB - len(SPECIAL_TOKENS)))]
    export = export_hf(write_phase_dir(tmp_path / "run" / "phase1", model, tokens), tmp_path / "hf")
    batch = padded_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        sequence, layout = model.model(ids, mask, all_positions(*ids.shape), packed=False)
        ours = model.model.final_norm(sequence)[layout.flat_index(torch.arange(ids.numel()))].view(*ids.shape, -1)
    for kind, auto_class in AUTO_CLASSES.items():
        loaded, info = getattr(transformers, auto_class).from_pretrained(str(export), num_labels=3,
                                                                         output_loading_info=True)
        assert type(loaded).__name__.startswith("ModernBertFor") and loaded.config.classifier_pooling == "mean"
        assert set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}, (kind, info)
        torch.testing.assert_close(loaded.head.dense.weight, model.head.dense.weight, rtol=0, atol=0)
        with torch.no_grad():
            theirs = loaded.eval().model(input_ids=ids, attention_mask=mask).last_hidden_state
        real = mask.bool()
        assert (ours[real] - theirs[real]).abs().max().item() <= 1e-4, kind


def test_a_local_layer_attends_only_within_its_window():
    """Changing the input at one position changes a local layer's attention output exactly at the positions within
    local_attention // 2 of it, in padded and in packed rows."""
    model = tiny(initializer_range=0.1)
    layer = model.model.layers[1]
    assert layer.attn.window == WINDOW // 2 and model.model.layers[0].attn.window is None
    half, changed = WINDOW // 2, 12
    torch.manual_seed(1)
    x = torch.randn(LENGTH, model.config.hidden_size)  # the real tokens of one full row
    mask = torch.ones(1, LENGTH, dtype=torch.long)
    y = x.clone()
    y[changed] += 1.0
    for packed in (False, True):
        layout = token_layout(mask, packed, "mask")
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        rotary = {theta: rotary_tables(torch.arange(LENGTH), head_dim, theta)
                  for theta in {model.config.global_rope_theta, model.config.local_rope_theta}}
        with torch.no_grad():
            moved = (layer.attn(y, layout, rotary) - layer.attn(x, layout, rotary)).abs().amax(-1)
        within = (torch.arange(LENGTH) - changed).abs() <= half
        assert (moved[~within] == 0).all(), (packed, moved)
        assert (moved[within] > 1e-5).all(), (packed, moved)


def test_raising_the_global_rope_base_changes_the_global_layers_only():
    """Context extension: phase 2's model differs from phase 1's only in global_rope_theta; with the same weights
    the local layers compute what they did, the global ones otherwise; the export says so per layer type."""
    before = tiny()
    after = pretraining_model(dataclasses.replace(before.config, global_rope_theta=160000.0)).eval()
    after.load_state_dict(before.state_dict())
    changed = {k for k, v in dataclasses.asdict(after.config).items() if dataclasses.asdict(before.config)[k] != v}
    assert changed == {"global_rope_theta"}
    assert [layer.attn.theta for layer in after.model.layers] == [160000.0, 10000.0, 10000.0, 160000.0]
    torch.manual_seed(2)
    x = torch.randn(2 * LENGTH, before.config.hidden_size)  # the real tokens of two full rows
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    positions = torch.arange(LENGTH).repeat(2)
    layout = token_layout(mask, False, "mask")
    outputs = []
    for model in (before, after):
        c = model.config
        rotary = {theta: rotary_tables(positions, c.hidden_size // c.num_attention_heads, theta)
                  for theta in {c.global_rope_theta, c.local_rope_theta}}
        with torch.no_grad():
            outputs.append([layer(x, layout, rotary) for layer in model.model.layers])
    for i, (a, b) in enumerate(zip(*outputs)):
        assert torch.equal(a, b) != before.config.is_global_layer(i), i
    rope = hf_config(after.config, VOCAB, 0, None, CLS, SEP).rope_parameters
    assert (rope["full_attention"]["rope_theta"], rope["sliding_attention"]["rope_theta"]) == (160000.0, 10000.0)


def test_packed_rows_give_the_losses_and_gradients_of_padded_ones():
    model = tiny().train()  # no dropout in ModernBERT's presets, but the training path runs
    batch = {**padded_batch(), "token_type_ids": torch.zeros(4, LENGTH, dtype=torch.long)}
    results = []
    for layout in (batch, pack_batch(batch)):
        model.zero_grad()
        out = model(**layout)
        out.loss.backward()
        results.append((out, {name: p.grad.clone() for name, p in model.named_parameters()}))
    assert pack_batch(batch)["input_ids"].shape[0] < 4  # rows were packed
    (padded, padded_grads), (packed, packed_grads) = results
    torch.testing.assert_close(packed.loss, padded.loss, rtol=1e-5, atol=1e-6)
    assert (packed.mlm_correct, packed.mlm_count) == (padded.mlm_correct, padded.mlm_count)
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_export_config_maps_back_to_our_model_config():
    config = model_config("tiny", VOCAB, "modernbert", global_attn_every_n_layers=2, num_hidden_layers=5,
                          global_rope_theta=160000.0, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.05)
    hf = hf_config(config, VOCAB, 0, None, CLS, SEP)
    assert hf.layer_types == ["full_attention", "sliding_attention"] * 2 + ["full_attention"]
    assert model_config_of(hf, Path("config.json")) == config
    two_layers = model_config("tiny", VOCAB, "modernbert")  # layer 0 alone global: any n from 2 up, 3 kept
    assert model_config_of(hf_config(two_layers, VOCAB, 0, None, CLS, SEP), Path("config.json")) == two_layers
    hf.layer_types = ["full_attention", "sliding_attention", "full_attention", "full_attention", "sliding_attention"]
    with pytest.raises(ConfigError, match="layer_types .*: this ModernBERT computes a global layer every n-th"):
        model_config_of(hf, Path("config.json"))


def test_the_presets_at_base_and_large_are_modernberts_published_shapes():
    """ModernBERT-base and -large: 149 and 395 million parameters with their 50,368-token vocabulary (and the masked-LM
    head); the smaller presets keep BERT's layers, width and heads."""
    assert parameter_sizes("base", 50368, "modernbert")[0] == 149_655_232
    assert parameter_sizes("large", 50368, "modernbert")[0] == 395_881_664
    for name, shape in spec("modernbert").presets.items():
        bert = spec("bert").presets[name]
        if name not in ("base", "large"):
            assert {k: shape[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")} == \
                   {k: bert[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")}
            assert abs(3 * shape["intermediate_size"] - 2 * bert["intermediate_size"]) <= 96  # the same FFN size
        model_config(name, 64, "modernbert")  # valid: RoPE's head dimensions are even


def test_estimate_counts_this_architectures_parameters_flops_and_activations():
    preset = pretraining_model(model_config("tiny", VOCAB, "modernbert"))
    assert parameter_sizes("tiny", VOCAB, "modernbert")[0] == preset.num_parameters() != \
        parameter_sizes("tiny", VOCAB)[0]
    model = tiny()
    all_global = pretraining_model(dataclasses.replace(model.config, global_attn_every_n_layers=1))
    # a local layer needs the pairs within its window only (at most local_attention + 1 keys a token)
    assert model.training_flops(64, 64 ** 2, 1, 5) < all_global.training_flops(64, 64 ** 2, 1, 5)
    assert model.training_flops(8, 8 ** 2, 1, 5) == all_global.training_flops(8, 8 ** 2, 1, 5)
    c = model.config
    matmuls = 2 * 64 * c.num_hidden_layers * (4 * c.hidden_size ** 2 + 3 * c.hidden_size * c.intermediate_size)
    attention = 2 * 2 * c.hidden_size * 64 ** 2 * c.num_hidden_layers
    head = 5 * (2 * c.hidden_size ** 2 + 2 * c.hidden_size * VOCAB)
    assert all_global.training_flops(64, 64 ** 2, 1, 5) == 3 * (matmuls + attention + head)
    mask, flash = (estimate_memory("base", 50368, 0, 1, 4, 8192, arch="modernbert", attention=kernel)
                   for kernel in ("mask", "flash"))
    assert mask["max_predictions"] == math.ceil(0.3 * 8192)
    assert mask["memory"]["activations"] > 10 * flash["memory"]["activations"]  # the score matrices at 8,192


def test_training_flops_count_the_matmuls_of_a_step():
    """torch's FLOP counter over a forward and backward (SDPA decomposed into matmuls): the formula's count, with
    the head on the used masked slots only (a window as wide as the rows: every pair is computed, as counted)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny(local_attention=2 * LENGTH).train()
    batch = padded_batch()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    rows = batch["input_ids"].shape[0]
    used = int((batch["masked_lm_positions"] != 0).sum())
    # the dense layers see the real tokens only, attention whole rows
    assert counter.get_total_flops() == pytest.approx(
        model.training_flops(int(batch["attention_mask"].sum()), rows * LENGTH ** 2, rows, used))


def test_the_recipe_is_adamw_with_a_warmup_stable_decay_schedule():
    phase1 = load_train_config("phase1", overrides=["arch=modernbert"])
    phase2 = load_train_config("phase2", overrides=["arch=modernbert"])
    assert (phase1.optimizer, phase1.schedule, phase1.objective, phase1.masking, phase1.mask_rate, phase1.betas) == \
        ("adamw", "wsd", "mlm", "dynamic", 0.3, [0.9, 0.98])
    assert phase1.cooldown == 0 and phase2.cooldown > 0 and phase2.model == {"global_rope_theta": 160000.0}
    assert load_train_config("phase1").optimizer == "lamb"  # BERT's recipe is unchanged
    f = WarmupStableDecay(total_steps=100, warmup_steps=10, cooldown_steps=40)
    assert [f(s) for s in (0, 9, 10, 59)] == [0.1, 1.0, 1.0, 1.0]
    assert f(60) == 1.0 and f(70) == pytest.approx(1 - math.sqrt(0.25)) and 0 < f(99) < 0.2 and f(100) == 0.0
    flat = lr_schedule(phase1)
    assert flat(phase1.steps - 1) == flat(phase1.steps) == 1.0  # no cooldown: the phase ends at the peak
    bert = load_train_config("phase1", overrides=["schedule=wsd", "cooldown=0.2", "warmup=0.1", "steps=10"])
    assert [round(lr_schedule(bert)(s), 4) for s in range(10)] == [1.0] * 8 + [1.0, round(1 - math.sqrt(0.5), 4)]


def test_norms_and_biases_take_no_weight_decay():
    model = tiny()
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): name for name, p in model.named_parameters()}
    assert sorted(names[id(p)].rsplit(".", 1)[0].rsplit(".", 1)[-1] for p in no_decay["params"]) == sorted(
        ["norm"] * 2 + ["attn_norm"] * 3 + ["mlp_norm"] * 4 + ["final_norm", "decoder"])
    assert all(p.ndim == 2 for p in decay["params"]) and decay["weight_decay"] == 0.01


@pytest.mark.parametrize("overrides, message", [
    (["objective=mlm+nsp"], "objective: mlm+nsp: ModernBERT has no next-sentence prediction"),
    (["attention=nested"], "attention: nested takes no window for ModernBERT's local layers"),
    (["model.num_attention_heads=128"], "head dimension 1 (hidden_size 128 / num_attention_heads 128) is odd"),
    (["model.type_vocab_size=1"],
     "model.type_vocab_size: applies to arch bert and roberta only (this is arch modernbert)"),
    (["cooldown=0.1", "schedule=poly"], "cooldown: applies to schedule wsd only"),
    (["cooldown=0.99"], "cooldown: must be a fraction of the steps in [0, 1 - warmup]"),
])
def test_bad_modernbert_settings_are_one_line(tmp_path, write_dataset, monkeypatch, capsys, overrides, message):
    data = write_dataset(tmp_path, [8], seq_len=LENGTH)
    args = [a for item in overrides for a in ("--set", item)]
    assert_refused(monkeypatch, capsys, message, tmp_path / "r", "phase1", "--data", str(data), *TINY, "--set",
                   "loader_workers=0", *args)


def test_a_window_wider_than_the_sequences_is_one_line(tmp_path, write_dataset, monkeypatch, capsys):
    data = write_dataset(tmp_path, [8], seq_len=LENGTH)
    monkeypatch.setattr(sys, "argv", ["pretrain", "phase1", "--data", str(data), "--out", str(tmp_path / "r"), *TINY,
                                      "--set", "model.local_attention=64"])
    with pytest.raises(SystemExit) as e:
        main()
    assert (e.value.code, capsys.readouterr().err) == (
        2, f"error: model.local_attention 64: the local layers' window is wider than the data's sequences ({LENGTH} "
           f"tokens), so they would attend like the global ones; set it at most {LENGTH} or train on longer "
           f"sequences\n")
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), [40, 40], seq_len=LENGTH)


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory) -> Path:
    """An uninterrupted 6-step ModernBERT phase 1 (dynamic 30% masking, AdamW, warmup-stable-decay)."""
    out = tmp_path_factory.mktemp("runs") / "full"
    done = pretrain("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=6",
                    "--set", "checkpoint_every=3", "--set", "eval_samples=16", "--set", "eval_every=3",
                    "--set", "cooldown=0.5", "--set", "warmup=0.2")
    assert done.returncode == 0, done.stderr
    return out / "phase1"


@pytest.mark.slow
def test_a_stopped_modernbert_run_resumes_with_exactly_the_losses_of_an_uninterrupted_one(data, full_run, tmp_path):
    out = tmp_path / "stopped"
    args = ("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=6", "--set", "checkpoint_every=3",
            "--set", "eval_samples=16", "--set", "eval_every=3", "--set", "cooldown=0.5", "--set", "warmup=0.2")
    first = pretrain(*args, "--set", "steps_this_run=2")
    assert first.returncode == 0, first.stderr
    second = pretrain(*args)
    assert second.returncode == 0 and "resumed from" in second.stderr, second.stderr
    expected, resumed = metrics(full_run), metrics(out / "phase1")
    assert [row["step"] for row in resumed] == [row["step"] for row in expected]
    learnt = ("loss", "mlm_loss", "mlm_accuracy", "lr", "grad_norm", "padding_share", "eval_mlm_accuracy",
              "eval_mlm_loss")  # not the times and memory
    for a, b in zip(expected, resumed):
        assert {k: a.get(k) for k in learnt} == {k: b.get(k) for k in learnt}, a["step"]  # bit for bit
    train = [row for row in expected if "loss" in row]
    assert len({row["loss"] for row in train}) == len(train)  # the losses move: the comparison is not vacuous
    assert [row["lr"] for row in train][1:4] == [1e-3] * 3 and train[-1]["lr"] < 1e-3  # stable, then the cooldown
    hparams = json.loads((full_run / "hparams.json").read_text())
    assert (hparams["config"]["arch"], hparams["config"]["objective"], hparams["config"]["optimizer"]) == \
        ("modernbert", "mlm", "adamw")
    assert json.loads((full_run / "model_config.json").read_text())["arch"] == "modernbert"


@pytest.mark.slow
def test_the_export_is_a_modernbert_masked_lm_with_our_logits_fill_mask_and_eval(data, full_run, tmp_path):
    from pretrain.model.model_dir import read_our_model

    out = tmp_path / "hf"
    assert CliRunner().invoke(app, ["export", str(full_run), "--out", str(out)]).exit_code == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["local_attention"]) == \
        ("modernbert", ["ModernBertForMaskedLM"], 16)
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert type(loaded).__name__ == "ModernBertForMaskedLM" and not any(info.values()), info
    ours = read_our_model(full_run, "test", "compare").model.eval()
    ids = torch.randint(5, 60, (2, LENGTH))
    ids[:, 0] = CLS
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0
    with torch.no_grad():
        mine, _ = ours.logits(ids, torch.zeros_like(ids), mask, all_positions(2, LENGTH))
        theirs = loaded.eval()(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert (mine[real][:, :theirs.shape[-1]] - theirs[real]).abs().max().item() <= 1e-4

    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    answers = pipe("w1 w2 [MASK] w3 .", top_k=3)
    assert [token for token, _ in fill_mask(out, "w1 w2 [MASK] w3 .", top_k=3)] == [a["token_str"] for a in answers]

    def figures(path):
        result = CliRunner().invoke(app, ["eval", str(path), "--data", str(data / "training"), "--samples", "16"])
        assert result.exit_code == 0, result.output
        return dict(line.split() for line in result.stdout.splitlines())

    assert figures(out) == figures(full_run) and "eval_nsp_accuracy" not in figures(out)


@pytest.mark.slow
def test_init_takes_an_export_back_and_phase2_raises_the_global_rope_base(data, full_run, tmp_path):
    out = tmp_path / "hf"
    export_hf(full_run, out)
    run = prepare("phase1", data, tmp_path / "again", load_train_config("phase1", overrides=["arch=modernbert"]),
                  init_dir=out)
    assert run.init.hugging_face and run.model.arch == "modernbert" and run.config.objective == "mlm"
    assert run.model.local_attention == 16 and run.model.global_rope_theta == 10000.0
    phase2 = prepare("phase2", data, tmp_path / "run", load_train_config("phase2", overrides=["arch=modernbert"]),
                     init_dir=full_run)
    before = dataclasses.asdict(run.model)
    assert {k: v for k, v in dataclasses.asdict(phase2.model).items() if before[k] != v} == {
        "global_rope_theta": 160000.0}
    with pytest.raises(ConfigError, match="arch bert: phase 2 continues the modernbert model of .*; set arch "
                                          "modernbert \\(--set arch=modernbert\\)"):
        prepare("phase2", data, tmp_path / "run", load_train_config("phase2"), init_dir=full_run)
    assert not (tmp_path / "run").exists() and not (tmp_path / "again").exists()


@pytest.mark.slow
def test_finetune_takes_a_modernbert_on_every_task_kind(tmp_path):
    """A phase directory of a ModernBERT (random weights, the synthetic tasks' vocabulary), exported and fine-tuned
    on one task of each kind: pairs and choices go in without token type ids."""
    torch.manual_seed(0)
    model = pretraining_model(model_config("tiny", len(TASK_TOKENS), "modernbert", local_attention=8))
    phase = write_phase_dir(tmp_path / "mb" / "phase1", model, TASK_TOKENS)
    table = run_tasks(model_sources([phase], random_init=False, out=tmp_path / "ft"), make_tasks(train=32, dev=16),
                      tmp_path / "ft", 1, load_recipes(["epochs=1", "batch=8"]))
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert {row["task"] for row in results["results"] if row["model"] == "mb-phase1"} == \
        {"single", "pair", "choice", "tokens"}, table
    assert json.loads((tmp_path / "ft" / "models" / "mb-phase1" / "config.json").read_text())["model_type"] == \
        "modernbert"


def test_tune_tries_the_kernels_that_take_a_window_with_the_recipe_of_the_length():
    from pretrain.run import tune

    setup, pinned = tune.make_setup("tiny", 1024, 0, "fp32", 0.5, ["arch=modernbert"], None)
    assert (setup.arch, setup.phase, setup.optimizer) == ("modernbert", "phase1", "adamw")
    assert [kernel for kernel, _ in tune.groups(setup, pinned)] == ["mask", "mask"]  # no nested (CPU: no flash)
    assert tune.make_setup("tiny", 2048, 0, "fp32", 0.5, ["arch=modernbert"], None)[0].phase == "phase2"
    bert, pinned = tune.make_setup("tiny", 512, 0, "fp32", 0.5, [], None)
    assert bert.phase == "phase2" and "nested" in [kernel for kernel, _ in tune.groups(bert, pinned)]


def test_a_local_layer_computes_the_keys_around_each_block_not_the_whole_row():
    """Windowed attention of rows longer than three windows: the outputs of the whole rows' band mask (packed rows,
    padding included), with the (query, key) products of 3 * window keys a query instead of the row's length."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from pretrain.model.attention import attend, window_mask

    length, window, heads, d = 96, 8, 2, 16
    mask = torch.tensor([[1] * 30 + [2] * 50 + [0] * 16, [1] * 90 + [0] * 6])
    layout = token_layout(mask, True, "mask")
    torch.manual_seed(0)
    q, k, v = (torch.randn(layout.real.numel(), heads, d, dtype=torch.float64) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        blocked = attend(q, k, v, layout, 0.0, window)
    rows = [t.transpose(1, 2) for t in (layout.to_rows(q), layout.to_rows(k), layout.to_rows(v))]
    whole = layout.from_rows(torch.nn.functional.scaled_dot_product_attention(
        *rows, attn_mask=window_mask(layout, window)).transpose(1, 2))
    torch.testing.assert_close(blocked, whole, rtol=0, atol=1e-12)
    queries = 2 * length * heads
    assert counter.get_total_flops() == 2 * 2 * queries * 3 * window * d  # QK^T and AV over 3 * window keys
