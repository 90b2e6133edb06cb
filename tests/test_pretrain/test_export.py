"""Export of a phase directory to a Hugging Face model directory, loaded back with transformers."""
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import model_dirs
from pretrain.cli import main
from pretrain_cli import rank_envs

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.wordpiece import write_tokenizer_dir
from pretrain.model import checkpoint_files
from pretrain.run import checkpoint
from pretrain.model.model_dir import read_our_model
from pretrain.tools.export import export_hf, fill_mask
from pretrain.config import model_config
from pretrain.model.hf_config import hf_config, model_config_of
from pretrain.model.bert.model import BertForPreTraining

WORDS = ["the", "cat", "dog", "sat", "on", "a", "mat", "and", "ran", "home", "##s", "."]
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS  # 17 tokens, model vocabulary 24


def write_phase_dir(phase_dir, model, tag="global_step7"):
    return model_dirs.write_phase_dir(phase_dir, model, TOKENS, tag)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", len(TOKENS))).eval()
    write_phase_dir(root / "phase2", model)
    out = export_hf(root / "phase2", root / "hf")
    return model, out


def test_export_writes_a_hugging_face_directory(exported):
    model, out = exported
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["config.json", "model.safetensors", "pretraining_config.json", "vocab.txt",
                            "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"])
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary left over
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["model_type"] == "bert"
    assert config["vocab_size"] == len(TOKENS) == 17 and config["pad_token_id"] == 0 and config["hidden_act"] == "gelu"


def test_transformers_loads_it_without_missing_keys_and_gives_the_same_outputs(exported):
    model, out = exported
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    hf.eval()
    assert hf.cls.predictions.decoder.weight.data_ptr() == hf.bert.embeddings.word_embeddings.weight.data_ptr()
    assert model.config.vocab_size == 24 and hf.config.vocab_size == len(TOKENS)  # the padding rows are not exported
    for name, value in model.state_dict().items():
        theirs = hf.state_dict()[name]
        assert torch.equal(theirs, value[:len(TOKENS)] if value.shape[0] == 24 else value), name
    input_ids = torch.tensor([[2, 5, 6, 4, 9, 3, 7, 8, 3]])
    token_type_ids = torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1, 1]])
    attention_mask = torch.ones_like(input_ids)
    positions = torch.tensor([[3, 0]])
    with torch.no_grad():
        mlm, nsp = model.logits(input_ids, token_type_ids, attention_mask, positions)
        theirs = hf(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
    torch.testing.assert_close(mlm[0, 0, :len(TOKENS)], theirs.prediction_logits[0, 3], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nsp, theirs.seq_relationship_logits, atol=1e-5, rtol=1e-5)


def test_fill_mask_pipeline_and_helper(exported):
    _, out = exported
    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    predictions = pipe("the cat [MASK] on the mat .", top_k=3)
    assert len(predictions) == 3 and all(0 < p["score"] <= 1 and p["sequence"].startswith("the cat")
                                         for p in predictions)
    ours = fill_mask(out, "The cat [MASK] on the mat.", top_k=3)
    assert len(ours) == 3 and all(token in TOKENS and 0 < p <= 1 for token, p in ours)
    assert [p for _, p in ours] == sorted((p for _, p in ours), reverse=True)
    every = pipe("the cat [MASK] on the mat .", top_k=len(TOKENS))
    assert len(every) == len(TOKENS) and all(p["token_str"].strip() for p in every)  # only real tokens, none empty
    assert {p["token"] for p in every} == set(range(len(TOKENS)))
    assert predictions[0]["token"] == TOKENS.index(ours[0][0])  # the same model
    with pytest.raises(ValueError, match="exactly once"):
        fill_mask(out, "no mask here")


def test_export_replaces_a_previous_export(exported, tmp_path):
    model, _ = exported
    write_phase_dir(tmp_path / "phase1", model)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "stale.bin").write_text("old")
    export_hf(tmp_path / "phase1", out, force=True)
    assert not (out / "stale.bin").exists() and (out / "model.safetensors").is_file()
    assert json.loads((out / "pretraining_config.json").read_text())["checkpoint"] == "global_step7"


def export_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Exit code and stderr of `pretrain export ARGS`."""
    monkeypatch.setattr(sys, "argv", ["pretrain", "export", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


def test_export_refuses_a_directory_it_did_not_write_unless_forced(exported, tmp_path, monkeypatch, capsys):
    model, _ = exported
    write_phase_dir(tmp_path / "phase1", model)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    code, err = export_cli(monkeypatch, capsys, str(tmp_path / "phase1"), "--out", str(out))
    assert code == 2 and err == (f"error: {out}: not empty and not an export (it holds notes.txt); choose another "
                                 f"--out, or pass --force to replace it\n"), err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "the user's"
    (out / "config.json").write_text("{}")  # an export's file beside the user's: still not an export
    (out / "pretraining_config.json").write_text("{}")
    assert export_cli(monkeypatch, capsys, str(tmp_path / "phase1"), "--out", str(out))[0] == 2
    assert (out / "notes.txt").is_file()
    code, err = export_cli(monkeypatch, capsys, str(tmp_path / "phase1"), "--out", str(out), "--force")
    assert code == 0 and not (out / "notes.txt").exists() and (out / "model.safetensors").is_file(), err


def test_export_over_a_previous_export_replaces_it(exported, tmp_path, monkeypatch, capsys):
    model, _ = exported
    write_phase_dir(tmp_path / "phase1", model, tag="step00000007")
    out = tmp_path / "hf"
    assert export_cli(monkeypatch, capsys, str(tmp_path / "phase1"), "--out", str(out))[0] == 0
    write_phase_dir(tmp_path / "phase2", model, tag="step00000009")
    code, err = export_cli(monkeypatch, capsys, str(tmp_path / "phase2"), "--out", str(out))
    assert code == 0, err
    assert json.loads((out / "pretraining_config.json").read_text())["checkpoint"] == "step00000009"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "phase1", "phase2"]  # no temporary left over


@pytest.mark.parametrize("target", ["phase dir", "run dir", "another run", "holds a run", "a checkpoint",
                                    "a run's tokenizer"])
def test_export_never_replaces_a_run_or_a_checkpoint_even_forced(exported, tmp_path, monkeypatch, capsys, target):
    model, _ = exported
    run = tmp_path / "run"
    write_phase_dir(run / "phase1", model)
    (run / "phase1" / "hparams.json").write_text("{}")
    (run / "phase1" / "metrics.jsonl").write_text('{"step": 1}\n')
    other = tmp_path / "other"
    write_phase_dir(other / "phase1", model)
    out, found = {"phase dir": (run / "phase1", "is a model directory pretrain export reads; choose another --out"),
                  "run dir": (run, "is a pretraining run directory, "),
                  "another run": (other, "is a pretraining run directory, "),
                  "holds a run": (tmp_path, f"holds the pretraining run directory {other}, "),
                  "a checkpoint": (other / "phase1" / "checkpoints",
                                   f"lies inside the pretraining phase directory {other}/phase1, "),
                  "a run's tokenizer": (run / "phase1" / "tokenizer",
                                        f"lies inside the pretraining phase directory {run}/phase1, "),
                  }[target]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for force in ([], ["--force"]):
        code, err = export_cli(monkeypatch, capsys, str(run / "phase1"), "--out", str(out), *force)
        assert code == 2 and err.startswith(f"error: {out}: ") and found in err and err.count("\n") == 1, err
        assert target == "phase dir" or err.endswith("which pretrain export --out never replaces; choose another "
                                                      "--out\n"), err
        assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_a_full_disk_during_export_is_one_line_and_keeps_the_previous_export(exported, tmp_path):
    model, _ = exported
    write_phase_dir(tmp_path / "phase1", model)
    out = tmp_path / "hf"
    command = [sys.executable, "-m", "pretrain.cli", "export", str(tmp_path / "phase1"), "--out", str(out)]
    assert subprocess.run(command, capture_output=True, timeout=300).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    size = (out / "model.safetensors").stat().st_size
    # a file size limit below the weights' size: the write fails as on a full disk (EFBIG instead of ENOSPC)
    full = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2)))
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out}: writing the export failed (") and "File too large" in last, last
    assert f"GiB free there; {out} is left as it was" in last, last
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "phase1"]


def test_export_errors_are_one_line(tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", len(TOKENS)))
    phase = tmp_path / "phase1"
    write_phase_dir(phase, model)
    (phase / "checkpoints" / "latest").unlink()
    with pytest.raises(ConfigError, match="no checkpoint to export"):
        export_hf(phase, tmp_path / "out")
    (phase / "checkpoints" / "latest").write_text("global_step99")
    with pytest.raises(DataError, match="names checkpoint 'global_step99', which does not exist"):
        export_hf(phase, tmp_path / "out")
    (phase / "checkpoints" / "latest").write_text("global_step7")
    (phase / "model_config.json").write_text(json.dumps(dataclasses.asdict(model_config("mini", len(TOKENS)))))
    with pytest.raises(DataError, match="has shape .*, but the model's config gives"):
        export_hf(phase, tmp_path / "out")
    (phase / "model_config.json").unlink()
    with pytest.raises(ConfigError, match="model_config.json: not found"):
        export_hf(phase, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_flipped_bytes_in_a_checkpoint_are_found_by_export_and_eval(exported, tmp_path):
    model, _ = exported

    class Engine:  # saves as DeepSpeed does without ZeRO
        global_rank = 0

        def save_checkpoint(self, save_dir, tag, client_state, save_latest):
            (Path(save_dir) / tag).mkdir(parents=True)
            torch.save({"module": model.state_dict()}, Path(save_dir) / tag / checkpoint_files.MODEL_STATES)

    phase = tmp_path / "phase1"
    write_phase_dir(phase, model)  # a checkpoint of before the checksums (no sha256 in meta.json) still loads
    for step in (8, 9):
        checkpoint.save(Engine(), phase, step, {"world_size": 1}, {}, keep=3)
    export_hf(phase, tmp_path / "hf")
    states = phase / "checkpoints" / "step00000009" / checkpoint_files.MODEL_STATES
    with open(states, "r+b") as f:  # one byte of a weight: torch.load reads it without complaint
        f.seek(states.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    message = (rf"^{states}: its sha256 differs from the one saved with the checkpoint \(changed on disk since\); "
               rf"the previous complete checkpoint is {phase / 'checkpoints' / 'step00000008'}: ")
    with pytest.raises(DataError, match=message):
        export_hf(phase, tmp_path / "hf2")
    with pytest.raises(DataError, match=message):
        read_our_model(phase, "pretrain eval", "evaluate")
    assert not (tmp_path / "hf2").exists()


DEEPSPEED_SCRIPT = """
import json, dataclasses, sys
from pathlib import Path
import torch, deepspeed
from pretrain.config import model_config
from pretrain.model.bert.model import BertForPreTraining
from pretrain.run import checkpoint
from pretrain.optim.optimizers import build_optimizer
phase, zero_stage = Path(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = BertForPreTraining(model_config("tiny", 17, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
ds_config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
             "zero_optimization": {"stage": zero_stage}, "zero_allow_untested_optimizer": True}
engine, *_ = deepspeed.initialize(model=model, optimizer=build_optimizer(model, "lamb", lr=1e-2), config=ds_config)
batch = dict(input_ids=torch.randint(5, 17, (2, 8)), token_type_ids=torch.zeros(2, 8, dtype=torch.long),
             attention_mask=torch.ones(2, 8, dtype=torch.long), masked_lm_positions=torch.tensor([[1, 2]] * 2),
             masked_lm_ids=torch.randint(5, 17, (2, 2)), next_sentence_labels=torch.tensor([0, 1]))
for _ in range(2):
    loss = engine(**batch).loss
    engine.backward(loss)
    engine.step()
checkpoint.save(engine, phase, 2, {"world_size": 1}, {}, keep=1)  # as the training loop saves
(phase / "model_config.json").write_text(json.dumps(dataclasses.asdict(model.config)))
torch.save({k: v.detach().clone() for k, v in engine.module.state_dict().items()}, phase / "expected.pt")
"""


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [0, 1])
def test_export_of_a_real_deepspeed_checkpoint(tmp_path, zero_stage):
    """Trains two LAMB steps on CPU with DeepSpeed (one process), saves, exports, reloads."""
    pytest.importorskip("deepspeed")
    phase = tmp_path / "phase1"
    phase.mkdir()
    result = subprocess.run([sys.executable, "-c", DEEPSPEED_SCRIPT, str(phase), str(zero_stage)],
                            env=rank_envs(1)[0], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (phase / "tokenizer").mkdir()
    write_tokenizer_dir(phase / "tokenizer", TOKENS)
    assert any((phase / "checkpoints" / "step00000002").glob("zero_pp_rank_*_optim_states.pt")) == (zero_stage > 0)
    out = export_hf(phase, tmp_path / "hf")
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    expected = torch.load(phase / "expected.pt")
    initial = BertForPreTraining(model_config("tiny", 17)).state_dict()
    for name, value in expected.items():
        value = value[:len(TOKENS)] if value.shape[0] == 24 else value
        assert torch.equal(hf.state_dict()[name], value.float()), name
    assert not torch.equal(expected["bert.pooler.dense.weight"], initial["bert.pooler.dense.weight"])  # trained


def test_model_config_and_hugging_face_config_map_both_ways():
    config = model_config("tiny", 24, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.05, layer_norm_eps=1e-5,
                          initializer_range=0.01, pad_token_id=3)
    hf = hf_config(config, config.vocab_size, config.pad_token_id)
    assert (hf.hidden_act, hf.vocab_size, hf.pad_token_id, hf.tie_word_embeddings) == ("gelu", 24, 3, True)
    assert model_config_of(hf, Path("config.json")) == config
    assert model_config_of(hf_config(config, 17, 0), Path("config.json")) == \
        dataclasses.replace(config, vocab_size=17, pad_token_id=0)  # the export's: the tokenizer's rows


@pytest.mark.parametrize("key, value", [("hidden_act", "relu"), ("is_decoder", True)])
def test_a_hugging_face_model_ours_cannot_compute_is_refused_with_one_line(exported, tmp_path, key, value):
    _, out = exported
    other = tmp_path / "other"
    shutil.copytree(out, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ConfigError, match=rf"other/config\.json: {key} {value!r}, but this BERT computes only "
                                          rf"{key} .*$") as e:
        read_our_model(other, "pretrain eval", "evaluate")
    assert "\n" not in str(e.value)


def test_export_of_a_unigram_vocabulary_takes_its_special_ids(tmp_path):
    """A model trained on data of a Unigram tokenizer (<s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4): the export's
    config has its pad id, and transformers' fill-mask answers through its tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from pipeline.tokenizer_files import LEARNT_SPECIAL, finish_learnt

    pieces = LEARNT_SPECIAL + ["▁" + w for w in WORDS[:-2]] + ["s", "."]
    torch.manual_seed(0)
    model = BertForPreTraining(model_config("tiny", len(pieces))).eval()
    write_phase_dir(tmp_path / "phase1", model)
    shutil.rmtree(tmp_path / "phase1" / "tokenizer")
    tokenizer = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=3))
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tokenizer.add_special_tokens(LEARNT_SPECIAL)
    finish_learnt(tokenizer, tmp_path / "phase1" / "tokenizer")
    out = export_hf(tmp_path / "phase1", tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["pad_token_id"] == 1
    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    predictions = pipe("the cat <mask> on the mat .", top_k=3)
    assert len(predictions) == 3 and all(p["sequence"].startswith("the cat") for p in predictions)


def test_a_role_its_special_tokens_map_leaves_out_is_found_by_its_spelling(exported, tmp_path):
    """A hub folder with tokenizer.json alone and a special_tokens_map.json without mask_token (published without its
    masked-LM use in mind): the mask token is found by its spelling, as in a folder without the file."""
    _, out = exported
    folder = tmp_path / "hub"
    shutil.copytree(out, folder)
    for name in ("vocab.txt", "tokenizer_config.json"):
        (folder / name).unlink()
    special = json.loads((folder / "special_tokens_map.json").read_text())
    del special["mask_token"]
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    export = export_hf(folder, tmp_path / "export")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export))
    assert tokenizer.mask_token == "[MASK]" and tokenizer.mask_token_id == TOKENS.index("[MASK]")
