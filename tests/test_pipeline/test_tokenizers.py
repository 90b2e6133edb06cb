"""Any tokenizer through the pipeline: `pipeline run --tokenizer` with a WordPiece, a Unigram (SentencePiece .model) and
a byte-level BPE tokenizer, each built here on the sample dump's text; `vocab.method` unigram and bpe learnt from
scratch; the tokenizers that do not fit refused in one line."""
from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import sentencepiece as spm
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from pipeline.stages.hdf5.tokenize import id_dtype, token_batches
from pipeline.text_files import iter_documents
from pipeline.tools.verify import verify_path
from wiki2bert_core.masking import MaskingVocab, original_tokens
from wiki2bert_core.wordpiece import read_vocab

SETTINGS = ["--set", "shard.num_shards=2", "--set", "hdf5.dupe_factor=1", "--set", "vocab.vocab_size=1500",
            "--set", "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]"]
ROBERTA = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def pipeline(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    """(dump, a work directory done through dedup): each test copies it and runs from vocab on."""
    from pipeline.tools.sample_dump import write_sample_dump

    root = tmp_path_factory.mktemp("tokenizers")
    dump = write_sample_dump(root / "dump", 60, 0)
    result = pipeline("run", "--lang", "hu", "--dump", dump, "--workdir", root / "work", "--to", "dedup", "--quiet")
    assert result.returncode == 0, result.stderr
    return dump, root / "work"


def text_files(work: Path) -> list[str]:
    return [str(p) for p in sorted((work / "hu" / "dedup").glob("*.txt"))]


def run_with(base, tmp_path: Path, *flags: str) -> tuple[Path, object]:
    dump, done = base
    work = tmp_path / "work"
    shutil.copytree(done, work, symlinks=True)
    result = pipeline("run", "--lang", "hu", "--dump", dump, "--workdir", work, "--quiet", *SETTINGS, *flags)
    return work, result


def wordpiece_folder(work: Path, out: Path) -> Path:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train(text_files(work), trainers.WordPieceTrainer(
        vocab_size=1200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    out.mkdir()
    tokenizer.save(str(out / "tokenizer.json"))
    return out


def unigram_model(work: Path, out: Path) -> Path:
    out.mkdir()
    spm.SentencePieceTrainer.train(input=",".join(text_files(work)), model_prefix=str(out / "spm"), vocab_size=1000,
                                   model_type="unigram", pad_id=3, user_defined_symbols=["<mask>"],
                                   minloglevel=2)
    return out / "spm.model"


def byte_level_folder(work: Path, out: Path, special=ROBERTA) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.train(text_files(work), trainers.BpeTrainer(
        vocab_size=1200, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    out.mkdir()
    tokenizer.save(str(out / "tokenizer.json"))
    return out


def variant_of(work: Path) -> Path:
    return next((work / "hu" / "hdf5").glob("hdf5_*"))


def check_through_hdf5(work: Path, tokenizer: Tokenizer, special: dict[str, str], kind: str, word_start: str):
    """verify accepts the files; each instance's segments are runs of the tokenizer's own encoding of a document's
    sentences; masking as with a learnt vocabulary, random tokens never special or added ones."""
    variant = variant_of(work)
    report = verify_path(variant)
    assert report.ok, report.problems
    params = json.loads((variant / "variant.json").read_text())
    ids = {role: tokenizer.token_to_id(token) for role, token in special.items()}
    assert params["special_token_ids"] == ids
    assert (params.get("tokenizer_kind", "wordpiece"), params.get("word_start", "")) == (kind, word_start)
    streams = {}
    for shard in (work / "hu" / "shard").glob("*.txt"):
        for document in iter_documents(shard):
            encoded = [e.ids for e in tokenizer.encode_batch(document, add_special_tokens=False)]
            flat = ",".join(str(i) for e in encoded for i in e)
            streams[shard.stem] = streams.get(shard.stem, "") + f"|,{flat},"
    excluded = set(ids.values()) | set(tokenizer.get_added_tokens_decoder())
    masked = as_mask = same = 0
    for path in variant.glob("*/*.hdf5"):
        with h5py.File(path) as f:
            arrays = {name: f[name][:] for name in f}
        tokens = original_tokens(arrays["input_ids"], arrays["masked_lm_positions"], arrays["masked_lm_ids"])
        for row, length in zip(tokens, arrays["input_mask"].sum(1)):
            assert row[0] == ids["[CLS]"] and row[length - 1] == ids["[SEP]"]
            for segment in np.split(row[1:length - 1], np.flatnonzero(row[1:length - 1] == ids["[SEP]"])):
                segment = segment[segment != ids["[SEP]"]]
                assert "," + ",".join(map(str, segment)) + "," in streams[path.stem]
        used = arrays["masked_lm_positions"] > 0
        rows = np.nonzero(used)[0]
        at = arrays["input_ids"][rows, arrays["masked_lm_positions"][used]]
        labels = arrays["masked_lm_ids"][used]
        masked += len(at)
        as_mask += int((at == ids["[MASK]"]).sum())
        same += int((at == labels).sum())
        random = at[(at != ids["[MASK]"]) & (at != labels)]
        assert not set(random.tolist()) & excluded
        needed = np.minimum(10, np.maximum(1, np.rint(0.15 * arrays["input_mask"].sum(1))))
        assert (used.sum(1) <= needed).all() and (used.sum(1) >= needed - 1).mean() > 0.95
    assert masked > 1000
    assert abs(as_mask / masked - 0.8) < 0.03 and abs(same / masked - 0.1) < 0.03


@pytest.mark.slow
def test_wordpiece_folder(base, tmp_path):
    folder = wordpiece_folder(base[1], tmp_path / "bert")
    work, result = run_with(base, tmp_path, "--tokenizer", folder)
    assert result.returncode == 0, result.stderr
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    check_through_hdf5(work, tokenizer, {r: r for r in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")},
                       "wordpiece", "")


def test_folder_saved_with_padding_and_truncation(base, tmp_path):
    """A hub tokenizer.json that pads and cuts every encoding (sentence-transformers' do): the instances hold each
    sentence's own tokens, not [PAD]s turned into [UNK] (nor sentences cut short)."""
    folder = wordpiece_folder(base[1], tmp_path / "st")
    unpadded = Tokenizer.from_file(str(folder / "tokenizer.json"))
    saved = Tokenizer.from_file(str(folder / "tokenizer.json"))
    saved.enable_padding(pad_id=unpadded.token_to_id("[PAD]"), pad_token="[PAD]", length=64)
    saved.enable_truncation(8)
    saved.save(str(folder / "tokenizer.json"))
    work, result = run_with(base, tmp_path, "--tokenizer", folder)
    assert result.returncode == 0, result.stderr
    check_through_hdf5(work, unpadded, {r: r for r in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")},
                       "wordpiece", "")


def test_sentencepiece_unigram_model(base, tmp_path):
    model = unigram_model(base[1], tmp_path / "spm")
    work, result = run_with(base, tmp_path, "--tokenizer", model)
    assert result.returncode == 0, result.stderr
    vocab_dir = work / "hu" / "vocab"
    tokenizer = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    processor = spm.SentencePieceProcessor(model_file=str(model))
    sentence = "A Duna Budapest   közepén folyik át, 1873-ban."
    assert tokenizer.encode(sentence, add_special_tokens=False).ids == processor.encode(sentence)
    check_through_hdf5(work, tokenizer, dict(zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"), ROBERTA)),
                       "unigram", "▁")


def test_byte_level_bpe_folder_and_a_changed_tokenizer(base, tmp_path):
    folder = byte_level_folder(base[1], tmp_path / "roberta")
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}))
    work, result = run_with(base, tmp_path, "--tokenizer", folder)
    assert result.returncode == 0, result.stderr
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    check_through_hdf5(work, tokenizer, dict(zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"), ROBERTA)),
                       "bpe", "Ġ")
    manifest = json.loads((work / "hu" / "vocab" / "_manifest.json").read_text())
    recorded = manifest["sources"]["tokenizer:tokenizer.json"]
    assert recorded["path"] == str((folder / "tokenizer.json").resolve()) and len(recorded["sha256"]) == 64
    status = pipeline("status", "--lang", "hu", "--dump", base[0], "--workdir", work, "--tokenizer", folder, *SETTINGS)
    assert "stale" not in status.stdout
    tokenizer.add_tokens(["Budapesten"])
    tokenizer.save(str(folder / "tokenizer.json"))
    status = pipeline("status", "--lang", "hu", "--dump", base[0], "--workdir", work, "--tokenizer", folder, *SETTINGS)
    stale = [line.split()[0] for line in status.stdout.splitlines() if " stale " in line]
    assert stale == ["vocab", "hdf5"], status.stdout


@pytest.mark.parametrize("method,word_start", [("unigram", "▁"), ("bpe", "Ġ")])
def test_learnt_method_through_hdf5_loads_in_autotokenizer(base, tmp_path, method, word_start):
    from transformers import AutoTokenizer

    from pretrain.run.prepare import _masking_vocab

    work, result = run_with(base, tmp_path, "--set", f"vocab.method={method}")
    assert result.returncode == 0, result.stderr
    vocab_dir = work / "hu" / "vocab"
    assert {p.name for p in vocab_dir.iterdir()} >= {"tokenizer.json", "tokenizer_config.json",
                                                     "special_tokens_map.json", "vocab.txt"}
    tokenizer = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    assert 1000 < tokenizer.get_vocab_size() <= 1500
    check_through_hdf5(work, tokenizer, dict(zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"), ROBERTA)),
                       method, word_start)
    variant = variant_of(work)
    masking_vocab = _masking_vocab(read_vocab(variant / "vocab.txt"), variant, variant)
    assert (masking_vocab.cls_id, masking_vocab.pad_id, masking_vocab.mask_id) == (0, 1, 4)
    pieces = tokenizer.encode("Budapest fővárosa", add_special_tokens=False).tokens
    assert masking_vocab.continues_word[tokenizer.encode("Budapest fővárosa",
                                                                add_special_tokens=False).ids].tolist() == [
        not piece.startswith(word_start) for piece in pieces]
    assert not set(masking_vocab.replacement_ids.tolist()) & {0, 1, 2, 3, 4}
    auto = AutoTokenizer.from_pretrained(str(vocab_dir))
    sentence = "Budapest Magyarország fővárosa."
    assert auto(sentence).input_ids == tokenizer.encode(sentence).ids
    assert auto.convert_ids_to_tokens(auto(sentence).input_ids)[0] == "<s>"
    assert (auto.mask_token, auto.mask_token_id, auto.pad_token_id) == ("<mask>", 4, 1)


def test_tokenizer_without_mask_is_one_line(base, tmp_path):
    folder = byte_level_folder(base[1], tmp_path / "nomask", special=["<s>", "<pad>", "</s>", "<unk>"])
    _, result = run_with(base, tmp_path, "--tokenizer", folder)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --tokenizer {folder}: no mask_token ([MASK] or <mask>) in its vocabulary"


def test_lowercasing_that_disagrees_is_one_line(base, tmp_path):
    folder = tmp_path / "uncased"
    folder.mkdir()
    tokenizer = Tokenizer.from_file(str(wordpiece_folder(base[1], tmp_path / "cased") / "tokenizer.json"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    _, result = run_with(base, tmp_path, "--tokenizer", folder)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --tokenizer {folder}: lowercases the text, but vocab.lowercase is "
                                     "false; set vocab.lowercase=true")


def test_missing_tokenizer_path_is_one_line(tmp_path):
    result = pipeline("config", "--lang", "hu", "--tokenizer", tmp_path / "none")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: --tokenizer {tmp_path / 'none'}: does not exist; give a Hugging Face "
                                     "tokenizer folder, a tokenizer.json, a SentencePiece .model or a vocab.txt")


def test_ids_past_uint16_are_int32(tmp_path):
    """A vocabulary of XLM-R's size: ids stored as int32 and kept whole."""
    pieces = [("<unk>", 0.0)] + [(f"▁w{i}", -1.0) for i in range(70_000)]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=0))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    text = tmp_path / "docs.txt"
    text.write_text("w5 w69999 w65536\nw3\n\n", encoding="utf-8")
    ids, lengths, sizes = next(token_batches(text, tokenizer, {"[UNK]": 0}))
    assert id_dtype(tokenizer) == np.int32 and ids.dtype == np.int32
    assert ids.tolist() == [6, 70000, 65537, 4] and lengths.tolist() == [3, 1]


def test_masking_vocab_of_a_word_start_marker():
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "▁Buda": 5, "pest": 6, "▁a": 7, ",": 8,
             "<extra>": 9}
    special = {"[CLS]": 0, "[PAD]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": 4}
    masking = MaskingVocab.from_vocab(vocab, special, "▁", added_ids=[9])
    assert masking.replacement_ids.tolist() == [5, 6, 7, 8]
    assert np.flatnonzero(masking.continues_word).tolist() == [6, 8]
    assert (masking.cls_id, masking.sep_id, masking.pad_id, masking.mask_id) == (0, 2, 1, 4)


def test_several_languages_adopt_it_for_the_mix(tmp_path):
    """--tokenizer is the mix's vocab setting (one vocabulary for all languages), made absolute."""
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "config", "--lang", "hu,fi", "--tokenizer", "tok"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "vocab.tokenizer:" in line]
    assert [line.split("  #")[0] for line in lines] == [f'vocab.tokenizer: "{tmp_path / "tok"}"']


# --- vocabulary extension (vocab.extend_with) ---------------------------------------------------------------------

def adopted_kinds(work: Path, root: Path) -> dict[str, Path]:
    return {"wordpiece": wordpiece_folder(work, root / "bert"), "unigram": unigram_model(work, root / "spm"),
            "bpe": byte_level_folder(work, root / "roberta")}


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "bpe"])
def test_extension_encodes_its_words_as_one_token_and_lowers_held_out_tokens_per_word(base, tmp_path, kind):
    from pipeline.tokenizer_files import adopt
    from pipeline.vocab_extension import WordCounts, extend

    original, _ = adopt(adopted_kinds(base[1], tmp_path)[kind], tmp_path / "adopted", False, False)
    sentences = [line for path in text_files(base[1]) for line in Path(path).read_text().splitlines() if line]
    held_out, counted = sentences[:300], sentences[300:]
    counts = WordCounts(original, "test")
    counts.add(counted, set())
    unk_id = original.token_to_id("[UNK]" if kind == "wordpiece" else "<unk>")
    extended, new = extend(original, counts.counts, 60, 2, unk_id, "test")
    size = original.get_vocab_size(with_added_tokens=True)
    assert len(new) == 60 and extended.get_vocab_size(with_added_tokens=True) == size + 60
    assert all(extended.id_to_token(i) == original.id_to_token(i) for i in range(size))  # old ids kept
    assert [extended.token_to_id(entry.token) for entry in new] == list(range(size, size + 60))
    words = [entry for entry in new if entry.count]
    assert len(words) > (10 if kind == "bpe" else 59)  # BPE's prefixes that build a word count too
    for entry in words:  # the tokenizer's own encoding of a sentence holding the word gives its new id
        sentence = next(s for s in counted if entry.token in (w for w, _ in extended.pre_tokenizer.pre_tokenize_str(
            extended.normalizer.normalize_str(s) if extended.normalizer else s)))
        assert extended.token_to_id(entry.token) in extended.encode(sentence).ids, (entry, sentence)
    before, after = (sum(len(e.ids) for e in t.encode_batch(held_out)) for t in (original, extended))
    assert after < before


@pytest.mark.parametrize("kind", ["wordpiece", pytest.param("unigram", marks=pytest.mark.slow),
                                  pytest.param("bpe", marks=pytest.mark.slow)])
def test_extended_tokenizer_through_hdf5(base, tmp_path, kind):
    source = adopted_kinds(base[1], tmp_path)[kind]
    work, result = run_with(base, tmp_path, "--tokenizer", source, "--set", "vocab.extend_with=40")
    assert result.returncode == 0, result.stderr
    vocab_dir = work / "hu" / "vocab"
    counts = json.loads((vocab_dir / "_manifest.json").read_text())["counts"]
    extended = Tokenizer.from_file(str(vocab_dir / "tokenizer.json"))
    tokens = list(read_vocab(vocab_dir / "vocab.txt"))
    assert counts["extension"]["tokens_added"] == 40 and len(tokens) == counts["vocab_size"]
    assert counts["sample_tokens_per_word"] < counts["extension"]["sample_tokens_per_word_before"]
    special = ({r: r for r in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")} if kind == "wordpiece" else
               dict(zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"), ROBERTA)))
    check_through_hdf5(work, extended, special, kind, {"wordpiece": "", "unigram": "▁", "bpe": "Ġ"}[kind])
    new_ids = set(range(len(tokens) - 40, len(tokens)))
    seen = set()
    for path in variant_of(work).glob("*/*.hdf5"):
        with h5py.File(path) as f:
            seen |= set(np.unique(f["input_ids"][:]).tolist()) & new_ids
    assert len(seen) > 10  # BPE: some entries are prefixes that only build a word


def test_extend_with_without_a_tokenizer_is_one_line(base, tmp_path):
    work, result = run_with(base, tmp_path, "--set", "vocab.extend_with=10")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --set vocab.extend_with=10: vocab.extend_with: extends an adopted tokenizer: give one with "
        "--tokenizer (vocab.tokenizer), or leave vocab.extend_with at 0")


@pytest.mark.parametrize("form", ["folder without vocab.txt", "tokenizer.json", "sentencepiece .model"])
def test_pipeline_hdf5_vocab_takes_any_form_tokenizer_takes(base, tmp_path, form):
    work = base[1]
    if form == "sentencepiece .model":
        given = unigram_model(work, tmp_path / "spm")
    else:
        folder = byte_level_folder(work, tmp_path / "roberta")
        given = folder if form == "folder without vocab.txt" else folder / "tokenizer.json"
    result = pipeline("hdf5", "--input", work / "hu" / "dedup", "--vocab", given, "--out", tmp_path / "out", "--quiet",
                      "--set", "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]",
                      "--set", "hdf5.dupe_factor=1")
    assert result.returncode == 0, result.stderr
    variant = next((tmp_path / "out").iterdir())
    assert verify_path(variant).ok
    tokenizer = Tokenizer.from_file(str(variant / "tokenizer.json"))
    assert read_vocab(variant / "vocab.txt") == tokenizer.get_vocab(with_added_tokens=True)
    params = json.loads((variant / "variant.json").read_text())
    ids = {role: tokenizer.token_to_id(token) for role, token in zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"),
                                                                      ROBERTA)}
    assert params["special_token_ids"] == ids
    sep = ids["[SEP]"]
    stream = "," + ",".join(str(i) for path in sorted((work / "hu" / "dedup").glob("*.txt"))
                            for document in iter_documents(path)
                            for e in tokenizer.encode_batch(document, add_special_tokens=False) for i in e.ids) + ","
    instances = 0
    for path in variant.glob("*/*.hdf5"):
        with h5py.File(path) as f:
            arrays = {name: f[name][:] for name in f}
        tokens = original_tokens(arrays["input_ids"], arrays["masked_lm_positions"], arrays["masked_lm_ids"])
        for row, length in zip(tokens, arrays["input_mask"].sum(1)):
            for segment in np.split(row[1:length - 1], np.flatnonzero(row[1:length - 1] == sep)):
                segment = segment[segment != sep]
                assert "," + ",".join(map(str, segment)) + "," in stream
                instances += 1
    assert instances > 100


def test_pipeline_hdf5_vocab_with_lowercase_and_a_tokenizer_is_one_line(base, tmp_path):
    folder = byte_level_folder(base[1], tmp_path / "roberta")
    result = pipeline("hdf5", "--input", base[1] / "hu" / "dedup", "--vocab", folder / "tokenizer.json", "--out",
                      tmp_path / "out", "--lowercase")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --lowercase/--strip-accents: {folder / 'tokenizer.json'} already decides them; pass a bare vocab.txt "
        "to choose")


def test_bpe_extension_adds_only_words_its_merges_reach():
    from pipeline.vocab_extension import extend

    vocab = {c: i for i, c in enumerate(["<unk>", "h", "a", "x"])}
    tokenizer = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # ModernBERT's: no Ġ on a first word
    # merges that build "haha" from h a h a left to right would merge both of its "h a" first and stop at "ha ha"
    counts = collections.Counter({"haha": 10, "hhh": 9, "hahah": 8, "ahah": 7, "hax": 3})
    extended, new = extend(tokenizer, counts, 12, 2, 0, "test")
    words = [entry.token for entry in new if entry.count]
    assert {"hhh", "hax"} <= set(words)
    for word in words:
        assert extended.encode(word).tokens == [word]
