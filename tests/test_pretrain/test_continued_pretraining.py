"""Continued pretraining (`--init` of a Hugging Face folder as the hub serves one: config.json, model.safetensors and
tokenizer.json, no vocab.txt) of BERT, XLM-R/RoBERTa and ModernBERT: our model computes the logits transformers
computes from the same weights, the folder's config.json decides the architecture (and recipe), a few steps train,
the export loads as the class the model came from with our model's logits, and a tokenizer that is not the data's is
one line. The models are small, with random weights, built here with transformers."""
from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import h5py
import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.wordpiece import SPECIAL_TOKENS, read_vocab, wordpiece_tokenizer
from pretrain.config import ModelConfig, load_train_config
from pretrain.finetune.run import finetune
from pretrain.model.hf_config import hf_config
from pretrain.model.model_dir import arch_of, read_our_model
from pretrain.model import checkpoint_files
from pretrain.model.arch import pretraining_model
from pretrain.run.prepare import prepare
from pretrain.run.train import _load_init
from pretrain.tools.export import export_hf
from pretrain_cli import metrics, pretrain

SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48)
VOCAB = 60  # write_dataset's vocabulary (BERT's special tokens, then w0, w1, ...)
# XLM-R's special tokens at XLM-R's ids, then pieces, and <mask> last, as in XLM-R
XLMR_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", *(f"▁w{i}" for i in range(59)), "<mask>"]
XLMR_SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>",
                "pad_token": "<pad>", "mask_token": "<mask>"}
TRAIN = ["--set", "global_batch=4", "--set", "micro_batch=4", "--set", "log_every=1", "--set", "loader_workers=0",
         "--set", "steps=2", "--set", "eval_every=0"]


def xlmr_tokenizer() -> Tokenizer:
    """A SentencePiece-Unigram tokenizer of XLMR_TOKENS, as XLM-R's tokenizer.json is made."""
    tokenizer = Tokenizer(models.Unigram([(token, -float(i)) for i, token in enumerate(XLMR_TOKENS)], unk_id=3))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tokenizer


def write_xlmr_tokenizer(directory: Path) -> None:
    xlmr_tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "XLMRobertaTokenizer",
                                                                 **XLMR_SPECIAL}))
    (directory / "special_tokens_map.json").write_text(json.dumps(XLMR_SPECIAL))


def hf_model(kind: str, class_name: str, path: Path, tokenizer_dir: Path, tied: bool = True) -> Path:
    """A transformers model of `kind` (bert, xlmr, modernbert) with random weights saved as the hub serves it: its
    tokenizer.json (the data's), no vocab.txt; `tied` False: its decoder a weight of its own."""
    torch.manual_seed(3)
    if kind == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, tie_word_embeddings=tied, **SHAPE)
    elif kind == "xlmr":
        config_class = transformers.RobertaConfig if class_name.startswith("Roberta") else transformers.XLMRobertaConfig
        config = config_class(vocab_size=len(XLMR_TOKENS), max_position_embeddings=66, type_vocab_size=1,
                              layer_norm_eps=1e-5, tie_word_embeddings=tied, **SHAPE)
    else:
        ours = ModelConfig(vocab_size=VOCAB, arch="modernbert", local_attention=16, layer_norm_eps=1e-5,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=tied,
                           **SHAPE)
        config = hf_config(ours, VOCAB, 0, class_name, 2, 3)
    model = getattr(transformers, class_name)(config)
    with torch.no_grad():  # transformers initialises LayerNorms to 1 and 0 and biases to 0: test them too
        for name, value in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                value.normal_(0, 0.1).add_(1 if name.endswith("weight") else 0)
    model.save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, path / name)
    return path


def xlmr_dataset(root: Path, write_hdf5) -> Path:
    """A variant directory whose token ids are XLMR_TOKENS's, with the tokenizer files (no variant.json): <s> A </s>
    B </s> rows, <mask> at the masked positions, <pad> after the end."""
    variant = root / "hu" / "hdf5" / "seq_len_32"
    variant.mkdir(parents=True)
    (variant / "vocab.txt").write_text("\n".join(XLMR_TOKENS) + "\n", encoding="utf-8")
    write_xlmr_tokenizer(variant)
    # write_hdf5's [CLS], [SEP] and [MASK] ids (BERT's order) and its padding 0 become XLM-R's
    cls_id, sep_id, mask_id = (SPECIAL_TOKENS.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    for i in range(2):
        path = variant / "training" / f"training_{i:04d}.hdf5"
        arrays = write_hdf5(path, 16, 32, 5, vocab_size=len(XLMR_TOKENS) - 1, seed=i)
        ids = arrays["input_ids"]
        xlmr = ids.copy()
        xlmr[ids == cls_id], xlmr[ids == sep_id], xlmr[ids == mask_id] = 0, 2, len(XLMR_TOKENS) - 1
        xlmr[arrays["input_mask"] == 0] = 1
        with h5py.File(path, "r+") as f:
            f["input_ids"][...] = xlmr
    return variant


@pytest.fixture(scope="module")
def bert_data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("bert"), [16, 16], seq_len=32)


@pytest.fixture(scope="module")
def xlmr_data(tmp_path_factory, write_hdf5) -> Path:
    return xlmr_dataset(tmp_path_factory.mktemp("xlmr"), write_hdf5)


def data_of(kind: str, bert_data: Path, xlmr_data: Path) -> Path:
    return xlmr_data if kind == "xlmr" else bert_data


def a_batch(kind: str) -> dict[str, torch.Tensor]:
    """Two sequences, the second padded, with the ids of the kind's vocabulary."""
    first, end, pad, size = (0, 2, 1, len(XLMR_TOKENS) - 1) if kind == "xlmr" else (2, 3, 0, VOCAB)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, size, (2, 16), generator=generator)
    ids[:, 0] = first
    ids[0, -1] = ids[1, 11] = end
    ids[1, 12:] = pad
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def transformers_logits(model_dir: Path, class_name: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model = getattr(transformers, class_name).from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        output = model(**batch)
    return output.prediction_logits if class_name == "BertForPreTraining" else output.logits


def our_logits(model_dir: Path, batch: dict[str, torch.Tensor], attention: str = "mask") -> torch.Tensor:
    """Our model's MLM logits at positions 1..10 of the batch (those of the tokenizer's rows), its attention through
    the kernel `attention`."""
    read = read_our_model(model_dir, "pretrain eval", "evaluate")
    read.model.attention = attention
    positions = torch.arange(1, 11).expand(2, -1)
    with torch.no_grad():
        mlm, _ = read.model.eval().logits(batch["input_ids"], torch.zeros_like(batch["input_ids"]),
                                          batch["attention_mask"], positions)
    return mlm[..., :read.vocab_tokens]


@pytest.mark.parametrize("kind, class_name", [
    ("bert", "BertForMaskedLM"), ("bert", "BertForPreTraining"), ("xlmr", "XLMRobertaForMaskedLM"),
    ("xlmr", "RobertaForMaskedLM"), ("modernbert", "ModernBertForMaskedLM")])
def test_step0_logits_equal_transformers(kind, class_name, bert_data, xlmr_data, tmp_path):
    model_dir = hf_model(kind, class_name, tmp_path / "hf", data_of(kind, bert_data, xlmr_data))
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == \
        {"BertForMaskedLM": "bert", "BertForPreTraining": "bert", "XLMRobertaForMaskedLM": "xlm-roberta",
         "RobertaForMaskedLM": "roberta", "ModernBertForMaskedLM": "modernbert"}[class_name]
    batch = a_batch(kind)
    theirs = transformers_logits(model_dir, class_name, batch)[:, 1:11]
    # the nested kernel: over the real tokens only (not ModernBERT's: it takes no window)
    for kernel in ("mask", "nested") if kind != "modernbert" else ("mask",):
        assert (our_logits(model_dir, batch, kernel) - theirs).abs().max() < 1e-4, kernel


@pytest.mark.slow
@pytest.mark.parametrize("kind, source, exported, fresh", [
    ("bert", "BertModel", "BertForPreTraining",  # a bare BERT learns next-sentence prediction too, as BERT did
     "cls.predictions, cls.predictions.transform.LayerNorm, cls.predictions.transform.dense, cls.seq_relationship"),
    ("xlmr", "XLMRobertaModel", "XLMRobertaForMaskedLM", "lm_head, lm_head.dense, lm_head.layer_norm"),
    ("xlmr", "XLMRobertaForMaskedLM", "XLMRobertaForMaskedLM", None),
    ("modernbert", "ModernBertModel", "ModernBertForMaskedLM", "decoder, head.dense, head.norm"),
])
def test_init_from_a_hub_folder_trains_and_exports_as_its_class(kind, source, exported, fresh, bert_data, xlmr_data,
                                                                 tmp_path):
    data = data_of(kind, bert_data, xlmr_data)
    model_dir = hf_model(kind, source, tmp_path / "hf", data)
    done = pretrain("phase1", "--data", str(data), "--init", str(model_dir), "--out", str(tmp_path / "run"), *TRAIN)
    assert done.returncode == 0, done.stderr
    phase = tmp_path / "run" / "phase1"
    hparams = json.loads((phase / "hparams.json").read_text())
    arch = {"bert": "bert", "xlmr": "roberta", "modernbert": "modernbert"}[kind]
    # the folder's config.json chose the arch and with it the recipe (XLM-R's: continued pretraining's AdamW)
    assert (hparams["config"]["arch"], hparams["config"]["objective"]) == \
        (arch, "mlm+nsp" if exported == "BertForPreTraining" else "mlm")
    assert hparams["config"]["optimizer"] == {"bert": "lamb", "roberta": "adamw", "modernbert": "adamw"}[arch]
    log = (phase / "train.log").read_text()
    assert (f"initialised fresh: {fresh}" in log) if fresh else "initialised fresh" not in log
    rows = metrics(phase)
    assert len(rows) == 2 and all(row["loss"] > 0 for row in rows)
    assert checkpoint_files.latest(phase).step == 2

    done = pretrain("export", str(phase), "--out", str(tmp_path / "export"))
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config["architectures"] == [exported]
    assert (tmp_path / "export" / "tokenizer.json").read_bytes() == (data / "tokenizer.json").read_bytes()
    batch = a_batch(kind)
    theirs = transformers_logits(tmp_path / "export", exported, batch)[:, 1:11]
    assert (our_logits(phase, batch) - theirs).abs().max() < 1e-4
    if kind == "xlmr":  # fine-tuning takes the export like any other (model_type xlm-roberta)
        task = tmp_path / "task"
        task.mkdir()
        for split, count in (("train", 8), ("dev", 4)):
            rows = [{"id": f"{split}{i}", "Sent": "w0 w1 w2" if i % 2 else "w3 w4", "label": str(i % 2)}
                    for i in range(count)]
            (task / f"{split}.json").write_text(json.dumps(rows), encoding="utf-8")
        finetune([tmp_path / "export"], [task], tmp_path / "ft", seeds=1, overrides=["epochs=1", "batch=4"])
        results = json.loads((tmp_path / "ft" / "results.json").read_text(encoding="utf-8"))["results"]
        assert [row["model"] for row in results] == ["export", "majority baseline"]


@pytest.mark.parametrize("kind, class_name", [
    ("bert", "BertForMaskedLM"), ("xlmr", "XLMRobertaForMaskedLM"), ("modernbert", "ModernBertForMaskedLM")])
def test_an_untied_decoder_stays_untied_through_reading_and_export(kind, class_name, bert_data, xlmr_data,
                                                                    tmp_path):
    model_dir = hf_model(kind, class_name, tmp_path / "hf", data_of(kind, bert_data, xlmr_data), tied=False)
    read = read_our_model(model_dir, "pretrain eval", "evaluate")
    config = read.model.config
    vocabulary_matrices = [p for p in read.model.parameters() if p.shape == (config.vocab_size, config.hidden_size)]
    assert not config.tie_word_embeddings and len(vocabulary_matrices) == 2  # embeddings, decoder
    assert not torch.equal(*vocabulary_matrices)
    export_hf(model_dir, tmp_path / "export")  # the folder's tokenizer.json is the export's tokenizer
    assert json.loads((tmp_path / "export" / "config.json").read_text())["tie_word_embeddings"] is False
    batch = a_batch(kind)
    theirs = transformers_logits(tmp_path / "export", class_name, batch)[:, 1:11]
    assert (our_logits(model_dir, batch) - theirs).abs().max() < 1e-4
    assert (transformers_logits(model_dir, class_name, batch)[:, 1:11] - theirs).abs().max() == 0


def test_the_folders_config_decides_the_arch_and_one_set_otherwise_is_one_line(xlmr_data, tmp_path):
    model_dir = hf_model("xlmr", "XLMRobertaForMaskedLM", tmp_path / "hf", xlmr_data)
    assert arch_of(model_dir) == "roberta" and arch_of(tmp_path / "nothing") is None
    recipe = load_train_config("phase1", init_arch=arch_of(model_dir))
    assert (recipe.arch, recipe.optimizer, recipe.lr, recipe.warmup) == ("roberta", "adamw", 5e-4, 0.06)
    run = prepare("phase1", xlmr_data, tmp_path / "out", recipe, init_dir=model_dir)
    assert (run.model.arch, run.model.pad_token_id, run.model.type_vocab_size, run.config.preset) == \
        ("roberta", 1, 1, "base")
    # the recipe's dynamic masking draws with the tokenizer's special tokens (its special_tokens_map.json)
    masking = run.masking.vocab
    assert (masking.cls_id, masking.sep_id, masking.pad_id, masking.mask_id) == (0, 2, 1, len(XLMR_TOKENS) - 1)
    assert set(masking.replacement_ids.tolist()) == set(range(4, len(XLMR_TOKENS) - 1))
    with pytest.raises(ConfigError, match="^arch bert: phase 1 continues the roberta model of "):
        prepare("phase1", xlmr_data, tmp_path / "out",
                load_train_config("phase1", overrides=["arch=bert"], init_arch="roberta"), init_dir=model_dir)
    assert not (tmp_path / "out").exists()


def test_xlmr_positions_start_after_the_pad_id_so_its_table_must_hold_the_datas_length_past_it(xlmr_data, tmp_path):
    model_dir = hf_model("xlmr", "XLMRobertaForMaskedLM", tmp_path / "hf", xlmr_data)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 33}))
    with pytest.raises(ConfigError) as e:
        prepare("phase1", xlmr_data, tmp_path / "out", load_train_config("phase1", init_arch="roberta"),
                init_dir=model_dir)
    assert str(e.value) == ("model.max_position_embeddings 33: the position ids start after the pad id 1, which leaves "
                            "31 positions, fewer than the data's sequences (32 tokens); use data of at most 31 tokens")


def test_a_tokenizer_that_is_not_the_datas_is_one_line_naming_the_first_difference(bert_data, tmp_path):
    model_dir = hf_model("bert", "BertForMaskedLM", tmp_path / "hf", bert_data)
    vocab = read_vocab(bert_data / "vocab.txt")
    renamed = {("w7x" if token == "w7" else token): i for token, i in vocab.items()}
    wordpiece_tokenizer(renamed).save(str(model_dir / "tokenizer.json"))
    with pytest.raises(ConfigError) as e:
        prepare("phase1", bert_data, tmp_path / "out", load_train_config("phase1"), init_dir=model_dir)
    assert str(e.value) == (f"{bert_data / 'vocab.txt'}: differs from the vocabulary of the model --init starts from "
                            f"({model_dir / 'tokenizer.json'}: id 12: 'w7' against 'w7x' (60 tokens against 60))")
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match="no vocab.txt nor tokenizer.json, so its vocabulary cannot be checked"):
        prepare("phase1", bert_data, tmp_path / "out", load_train_config("phase1"), init_dir=model_dir)
    assert not (tmp_path / "out").exists()


# the entries vocab.extend_with would add for two words of XLMR_TOKENS's pieces: their ids and their pieces' ids
EXTENSION = {"▁w1▁w2": (64, [5, 6]), "▁w3▁w4▁w5": (65, [7, 8, 9])}


def extended_xlmr_data(xlmr_data: Path, out: Path) -> Path:
    """xlmr_data whose tokenizer is XLM-R's extended (pipeline/vocab_extension.py) by EXTENSION's entries."""
    from pipeline.tokenizer_files import write_vocab_file
    from pipeline.vocab_extension import extend

    shutil.copytree(xlmr_data, out)
    extended, new = extend(xlmr_tokenizer(), collections.Counter({"▁w1▁w2": 9, "▁w3▁w4▁w5": 3}), 2, 2, 3, "test")
    assert [entry.token for entry in new] == list(EXTENSION)
    extended.save(str(out / "tokenizer.json"))
    write_vocab_file(out, extended)
    return out


def test_an_extended_tokenizers_new_rows_start_from_the_mean_of_their_pieces(xlmr_data, tmp_path):
    data = extended_xlmr_data(xlmr_data, tmp_path / "data")
    model_dir = hf_model("xlmr", "XLMRobertaForMaskedLM", tmp_path / "hf", xlmr_data, tied=False)
    run = prepare("phase1", data, tmp_path / "out", load_train_config("phase1", init_arch="roberta"),
                  init_dir=model_dir)
    assert run.new_token_pieces == dict(EXTENSION.values())
    assert run.model.vocab_size == 72 and run.vocab_size == 66  # 66 tokens padded to a multiple of 8
    model = pretraining_model(run.model)
    _load_init(model, run)
    theirs = transformers.XLMRobertaForMaskedLM.from_pretrained(str(model_dir))
    rows = {"input": (model.roberta.embeddings.word_embeddings.weight,
                      theirs.roberta.embeddings.word_embeddings.weight),
            "output": (model.lm_head.decoder.weight, theirs.lm_head.decoder.weight),
            "output bias": (model.lm_head.bias, theirs.lm_head.decoder.bias)}
    for what, (ours, original) in rows.items():
        assert torch.equal(ours[:64], original), what
        for new, pieces in EXTENSION.values():
            assert torch.allclose(ours[new], original[pieces].mean(0), atol=1e-7), what
    assert not torch.equal(rows["input"][0][64], rows["output"][0][64])  # untied: each from its own rows


def test_a_tokenizer_that_extends_another_is_still_refused(xlmr_data, tmp_path):
    data = extended_xlmr_data(xlmr_data, tmp_path / "data")
    model_dir = hf_model("xlmr", "XLMRobertaForMaskedLM", tmp_path / "hf", xlmr_data)
    tokens = XLMR_TOKENS[:10] + ["▁other"] + XLMR_TOKENS[11:]  # id 10 is not the model's
    tokenizer = Tokenizer(models.Unigram([(token, -float(i)) for i, token in enumerate(tokens)], unk_id=3))
    tokenizer.save(str(model_dir / "tokenizer.json"))
    with pytest.raises(ConfigError) as e:
        prepare("phase1", data, tmp_path / "out", load_train_config("phase1", init_arch="roberta"),
                init_dir=model_dir)
    assert str(e.value) == (f"{data / 'vocab.txt'}: differs from the vocabulary of the model --init starts from "
                            f"({model_dir / 'tokenizer.json'}: id 10: '▁w6' against '▁other' (66 tokens against 64))")


@pytest.mark.slow
def test_a_model_of_an_extended_tokenizer_trains_and_exports_with_it(xlmr_data, tmp_path):
    data = extended_xlmr_data(xlmr_data, tmp_path / "data")
    model_dir = hf_model("xlmr", "XLMRobertaForMaskedLM", tmp_path / "hf", xlmr_data)
    done = pretrain("phase1", "--data", str(data), "--init", str(model_dir), "--out", str(tmp_path / "run"), *TRAIN)
    assert done.returncode == 0, done.stderr
    phase = tmp_path / "run" / "phase1"
    assert ("2 tokens the data's tokenizer adds to that of " in (phase / "train.log").read_text())
    done = pretrain("export", str(phase), "--out", str(tmp_path / "export"))
    assert done.returncode == 0, done.stderr
    export = tmp_path / "export"
    assert json.loads((export / "config.json").read_text())["vocab_size"] == 66
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export))
    assert tokenizer.convert_tokens_to_ids(list(EXTENSION)) == [64, 65]
    batch = a_batch("xlmr")
    batch["input_ids"][:, 3:5] = torch.tensor([64, 65])
    theirs = transformers_logits(export, "XLMRobertaForMaskedLM", batch)[:, 1:11]
    assert theirs.shape[-1] == 66 and (our_logits(phase, batch) - theirs).abs().max() < 1e-4


@pytest.mark.parametrize("kind, class_name, mask", [("xlmr", "XLMRobertaForMaskedLM", "<mask>"),
                                                     ("bert", "BertForMaskedLM", "[MASK]")])
def test_a_folder_with_tokenizer_json_alone_exports_the_files_autotokenizer_loads(kind, class_name, mask, bert_data,
                                                                                   xlmr_data, tmp_path):
    model_dir = hf_model(kind, class_name, tmp_path / "hf", data_of(kind, bert_data, xlmr_data))
    for name in ("tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        (model_dir / name).unlink(missing_ok=True)
    export_hf(model_dir, tmp_path / "export")
    export = tmp_path / "export"
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= {p.name for p in export.iterdir()}
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export))
    assert tokenizer.mask_token == mask and tokenizer.pad_token_id == (1 if kind == "xlmr" else 0)
    original = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tokenizer("w3 w4")["input_ids"] == original.encode("w3 w4").ids
    assert json.loads((export / "config.json").read_text())["pad_token_id"] == tokenizer.pad_token_id
