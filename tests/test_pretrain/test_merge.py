"""`pretrain merge`: the mean of several models' weights, written as an export that transformers loads; models that
differ in shape, vocabulary or heads are refused with one line."""
import json
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

import model_dirs
from pretrain.cli import main
from pretrain.config import model_config
from pretrain.model.arch import pretraining_model
from pretrain.tools.export import export_hf

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "a", "mat", "."]
# XLM-R's special tokens at XLM-R's ids, then pieces, and <mask> last, as in XLM-R
HUB_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", *("\u2581" + token for token in TOKENS[5:]), "<mask>"]


def tiny_model(seed: int, nsp_head: bool = True, **overrides):
    torch.manual_seed(seed)
    return pretraining_model(model_config("tiny", len(TOKENS), **overrides), nsp_head=nsp_head).eval()


def merge_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Exit code and stderr of `pretrain merge ARGS`."""
    monkeypatch.setattr(sys, "argv", ["pretrain", "merge", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Two exports of the same shape and tokenizer with different weights, and a phase directory of a third."""
    root = tmp_path_factory.mktemp("merge")
    found = []
    for seed in (0, 1):
        phase = model_dirs.write_phase_dir(root / f"run{seed}" / "phase1", tiny_model(seed), TOKENS)
        found.append(export_hf(phase, root / f"export{seed}"))
    phase = model_dirs.write_phase_dir(root / "run2" / "phase1", tiny_model(2), TOKENS, tag="step00000009")
    return found, phase


def test_merge_of_two_exports_is_their_mean_and_loads_in_transformers(exports, tmp_path, monkeypatch, capsys):
    (a, b), _ = exports
    out = tmp_path / "merged"
    assert merge_cli(monkeypatch, capsys, str(a), str(b), "--out", str(out))[0] == 0
    weights_a, weights_b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    merged = load_file(out / "model.safetensors")
    assert merged.keys() == weights_a.keys()
    for name, value in merged.items():
        torch.testing.assert_close(value, (weights_a[name] + weights_b[name]) / 2, rtol=0, atol=1e-7)
        # the weight matrices start random, so the mean is neither model (biases and LayerNorms start constant)
        assert value.ndim < 2 or not torch.equal(value, weights_a[name]), name
    config = json.loads((out / "pretraining_config.json").read_text())
    assert [m["model"] for m in config["merged_from"]] == [str(a), str(b)] and config["checkpoint"] is None
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    loaded_a, loaded_b = (transformers.BertForPreTraining.from_pretrained(p).state_dict() for p in (a, b))
    for name, value in hf.state_dict().items():
        torch.testing.assert_close(value, (loaded_a[name] + loaded_b[name]) / 2, rtol=0, atol=1e-7)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.convert_tokens_to_ids("cat") == TOKENS.index("cat")


def test_merge_takes_phase_directories_and_three_models(exports, tmp_path):
    from pretrain.tools.merge import merge_models

    (a, b), phase = exports
    out = merge_models([a, b, phase], tmp_path / "merged")
    weights = [load_file(p / "model.safetensors") for p in (a, b)]
    third = load_file(export_hf(phase, tmp_path / "third") / "model.safetensors")
    for name, value in load_file(out / "model.safetensors").items():
        torch.testing.assert_close(value, (weights[0][name] + weights[1][name] + third[name]) / 3, rtol=0, atol=1e-7)
    assert json.loads((out / "pretraining_config.json").read_text())["merged_from"][2]["checkpoint"] == "step00000009"


@pytest.mark.parametrize("kind, message", [
    ("shape", "model setting intermediate_size is 256, against 512 in"),
    ("vocabulary", "its vocabulary differs (id 6: 'cat' against 'cow'"),
    ("heads", "lacks bert.pooler.dense.bias (a head), unlike"),
    ("one model", "1 model directory given; the mean needs at least two"),
])
def test_models_that_differ_are_refused_with_one_line(exports, tmp_path, monkeypatch, capsys, kind, message):
    (a, _), _ = exports
    tokens = [t if t != "cat" else "cow" for t in TOKENS] if kind == "vocabulary" else TOKENS
    model = tiny_model(1, nsp_head=kind != "heads", **({"intermediate_size": 256} if kind == "shape" else {}))
    other = model_dirs.write_phase_dir(tmp_path / "other" / "phase1", model, tokens)
    out = tmp_path / "merged"
    others = [str(other)] if kind != "one model" else []
    code, err = merge_cli(monkeypatch, capsys, str(a), *others, "--out", str(out))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    if kind != "one model":
        assert err.startswith(f"error: {other}: ") and "pretrain merge averages models of one arch" in err
    assert not out.exists()


def test_out_may_not_be_one_of_the_models(exports, monkeypatch, capsys):
    (a, b), _ = exports
    code, err = merge_cli(monkeypatch, capsys, str(a), str(b), "--out", str(b))
    assert code == 2 and f"error: {b}: is a model directory pretrain merge reads; choose another --out" in err


def hub_folder(path: Path, seed: int, tokens: list[str]) -> Path:
    """A small XLM-R masked LM with random weights as the hub serves one: config.json, model.safetensors and a
    SentencePiece-Unigram tokenizer.json of `tokens` alone (no vocab.txt, no special_tokens_map.json)."""
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=48, max_position_embeddings=40,
                                           type_vocab_size=1, layer_norm_eps=1e-5)
    transformers.XLMRobertaForMaskedLM(config).save_pretrained(path)
    tokenizer = Tokenizer(models.Unigram([(token, -float(i)) for i, token in enumerate(tokens)], unk_id=3))
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tokenizer.add_special_tokens([*tokens[:4], tokens[-1]])
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def test_hub_folders_with_tokenizer_json_alone_are_merged(tmp_path, monkeypatch, capsys):
    a, b = (hub_folder(tmp_path / name, seed, HUB_TOKENS) for name, seed in (("a", 0), ("b", 1)))
    out = tmp_path / "merged"
    code, err = merge_cli(monkeypatch, capsys, str(a), str(b), "--out", str(out))
    assert code == 0, err
    loaded_a, loaded_b, merged = (transformers.AutoModelForMaskedLM.from_pretrained(p).state_dict()
                                  for p in (a, b, out))
    assert merged.keys() == loaded_a.keys()
    for name, value in merged.items():
        torch.testing.assert_close(value, (loaded_a[name] + loaded_b[name]) / 2, rtol=0, atol=1e-7)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.mask_token == "<mask>" and tokenizer.pad_token_id == 1
    assert tokenizer.convert_tokens_to_ids("\u2581cat") == HUB_TOKENS.index("\u2581cat")


def test_hub_folders_whose_tokenizer_json_differs_are_refused_with_one_line(tmp_path, monkeypatch, capsys):
    a = hub_folder(tmp_path / "a", 0, HUB_TOKENS)
    b = hub_folder(tmp_path / "b", 1, [token if token != "\u2581cat" else "\u2581cow" for token in HUB_TOKENS])
    capsys.readouterr()  # save_pretrained's progress bars
    out = tmp_path / "merged"
    code, err = merge_cli(monkeypatch, capsys, str(a), str(b), "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {b}: its vocabulary differs (id 5: '\u2581cat' against '\u2581cow' (13 tokens "
                          f"against 13)) from {a}'s; pretrain merge averages models of one arch"), err
    assert not out.exists()
