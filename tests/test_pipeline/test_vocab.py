"""The `vocab` stage: sent2wordpiece conversion rules, special tokens, accents, transformers compatibility,
determinism, and bad input answered with one clear line."""
from __future__ import annotations

import dataclasses
import io
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
from tokenizers import normalizers, pre_tokenizers

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.errors import DataError
from pipeline.stages import InputLabel
from pipeline.stages.vocab import (VocabConfig, bert_normalization_rules, bert_vocabulary, run,
                                   sentencepiece_to_wordpiece)
from wiki2bert_core.wordpiece import load_tokenizer, read_vocab, special_token_ids
from pipeline.words import count_words
from unspaced_text import JA, unspaced

SYLLABLES = ["al", "ma", "kör", "te", "sző", "lő", "fű", "víz", "tű", "rő", "ár", "ka", "bá", "szél", "őr", "ül",
             "ne", "űr", "mű", "hí", "dú", "gyö", "ke", "rés", "pi", "ros", "zöld", "ég", "ó", "ta", "nya", "és", "le"]
SENTENCES = ["Az őszi árvíztűrő tükörfúrógép működik.", "Ő is látta a fűzfát, és az ürgét (nem a ŰRT).",
             "Budapest, 2021. márc. 5-én: 3,5 fok.", "Egy szó — két szó… három?"]


@pytest.fixture(scope="session")
def make_corpus(write_document_parts):
    def make_corpus(directory: Path, documents: int = 300, seed: int = 1, parts: int = 2) -> Path:
        """Generated Hungarian-looking documents: one sentence per line, a blank line after each document."""
        rng = random.Random(seed)
        words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(1500)]

        def sentence() -> str:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
            return text[0].upper() + text[1:] + rng.choice([".", "!", "?", ", mondta."])

        docs = ([sentence() for _ in range(rng.randint(3, 8))] for _ in range(documents))
        return write_document_parts(directory, docs, parts)
    return make_corpus


@pytest.fixture(scope="session")
def run_vocab(run_stage_function):
    def run_vocab(tmp_path: Path, filter_dir: Path, name: str = "out", workers: int = 1, **config) -> tuple[Path, dict]:
        return run_stage_function(run, VocabConfig(**config), tmp_path, {"dedup": filter_dir, "filter": filter_dir},
                                  name, workers)
    return run_vocab


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, make_corpus) -> Path:
    return make_corpus(tmp_path_factory.mktemp("vocab") / "filter")


SMALL = {"sentencepiece": {"vocab_size": 600}, "tokenizers": {"vocab_size": 800}}


def test_sentencepiece_pieces_become_wordpiece_tokens():
    pieces = ["<unk>", "<s>", "</s>", "▁a", "▁alma", "fa", "▁", "▁őszi", "ről", "▁[UNK]"]
    assert sentencepiece_to_wordpiece(pieces) == ["a", "alma", "##fa", "őszi", "##ről", "[UNK]"]
    vocab = bert_vocabulary(sentencepiece_to_wordpiece(pieces), unused_tokens=2)
    assert vocab == ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                     "a", "alma", "##fa", "őszi", "##ről",
                     "##a", "f", "##f", "i", "##i", "l", "##l", "m", "##m", "r", "##r", "s", "##s", "z", "##z",
                     "ő", "##ő"]


@pytest.mark.parametrize("lowercase,strip_accents", [(False, False), (True, True), (False, True)])
def test_sentencepiece_sees_the_words_the_bert_tokenizer_sees(tmp_path, lowercase, strip_accents):
    rules = tmp_path / "rules.tsv"
    rules.write_text(bert_normalization_rules(lowercase, strip_accents), encoding="utf-8")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES * 5), model_writer=model, vocab_size=60,
                                   hard_vocab_limit=False, normalization_rule_tsv=str(rules), minloglevel=2)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=strip_accents, lowercase=lowercase)
    for line in SENTENCES + ["tab\there\u00a0nbsp\u2028ls\r", "ctl\x07\u200bx\u00adz", "漢字かな混じり 𠀋",
                             "a+b=c <x> $5 ^_^ `q` ~| 1.5", "Ünnepi ŐSZ Ǆ ǅ ﬁ ①", "e\u0301 \U0001F600 \U000E0041"]:
        expected = [w for w, _ in pre_tokenizers.BertPreTokenizer().pre_tokenize_str(normalizer.normalize_str(line))]
        assert processor.normalize(line).split("▁")[1:] == expected, line


def test_tokens_per_word_counts_unspaced_words_as_the_filter_did(tmp_path, write_document_parts, stage_context):
    """A Japanese corpus whose filter counted chars_per_word characters a word (the config the runner hands the
    vocab stage): tokens per word is per such word, not per BERT word (BERT makes every kanji a word of its own and
    a run of kana another)."""
    documents = [unspaced(sentences) for sentences in JA.values()] * 5
    filter_dir = write_document_parts(tmp_path / "filter", documents, 1)
    ctx = dataclasses.replace(stage_context(tmp_path, {"dedup": filter_dir, "filter": filter_dir}),
                              input_configs={InputLabel("filter"): {"chars_per_word": 1.7}})
    out, counts = ctx.out_dir, run(VocabConfig(vocab_size=300), ctx)
    sentences = [s for d in documents for s in d]
    tokens = sum(len(e.ids) for e in load_tokenizer(out).encode_batch(sentences, add_special_tokens=False))
    assert counts["sample_tokens_per_word"] == round(tokens / sum(count_words(s, 1.7) for s in sentences), 4)


@pytest.mark.parametrize("method", ["sentencepiece", "tokenizers"])
def test_special_tokens_first_and_ids_read_from_the_file(tmp_path, corpus, method, run_vocab):
    out, counts = run_vocab(tmp_path, corpus, unused_tokens=3, method=method, **SMALL[method])
    lines = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:8] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert counts["special_token_ids"] == special_token_ids(read_vocab(out / "vocab.txt")) == {
        "[PAD]": 0, "[UNK]": 4, "[CLS]": 5, "[SEP]": 6, "[MASK]": 7}
    assert counts["vocab_size"] == len(lines) == len(set(lines))
    assert counts["model_vocab_size"] % 8 == 0 and 0 <= counts["model_vocab_size"] - len(lines) < 8
    tokenizer = load_tokenizer(out)
    assert tokenizer.encode("alma").ids[0] == 5 and tokenizer.encode("alma").ids[-1] == 6


@pytest.mark.parametrize("method", ["sentencepiece", "tokenizers"])
def test_hungarian_accents_survive(tmp_path, corpus, method, run_vocab):
    out, counts = run_vocab(tmp_path, corpus, method=method, **SMALL[method])
    vocab = read_vocab(out / "vocab.txt")
    for char in "áőűÁŐŰ":
        assert char in vocab and "##" + char.lower() in vocab
    tokens = load_tokenizer(out).encode("Árvíztűrő fűzfa ősszel", add_special_tokens=False).tokens
    assert "[UNK]" not in tokens
    assert "".join(t.removeprefix("##") for t in tokens) == "Árvíztűrőfűzfaősszel"
    assert counts["sample_unk_rate"] == 0.0 and counts["sample_tokens_per_word"] >= 1.0


@pytest.mark.parametrize("method,lowercase", [("sentencepiece", False), ("tokenizers", True)])
def test_printable_ascii_and_script_punctuation_are_always_covered(tmp_path, corpus, method, lowercase, run_vocab):
    """The generated corpus has none of @ { \\ ' — „ ”: held-out text with them still has no [UNK]."""
    out, counts = run_vocab(tmp_path, corpus, method=method, lowercase=lowercase, **SMALL[method])
    vocab = read_vocab(out / "vocab.txt")
    required = [chr(c) for c in range(0x21, 0x7F) if not (lowercase and chr(c).isupper())] + list("–—„”«»…")
    assert [c for c in required if c not in vocab or "##" + c not in vocab] == []
    text = "E-mail: a@b.hu {x} C:\\út 'idézet' — „magyar” «x» ~^`|"
    assert "[UNK]" not in load_tokenizer(out).encode(text, add_special_tokens=False).tokens
    assert counts["characters_added"] > 2 * 20


@pytest.mark.parametrize("method,lowercase", [("sentencepiece", False), ("tokenizers", False), ("tokenizers", True)])
def test_transformers_loads_the_directory_and_tokenizes_like_the_pipeline(tmp_path, corpus, method, lowercase,
                                                                          run_vocab):
    transformers = pytest.importorskip("transformers")
    out, _ = run_vocab(tmp_path, corpus, method=method, lowercase=lowercase, strip_accents=lowercase, **SMALL[method])
    hf = transformers.BertTokenizerFast.from_pretrained(str(out))
    ours = load_tokenizer(out)
    for sentence in SENTENCES + (corpus / "part-00000.txt").read_text("utf-8").split("\n")[:20]:
        encoding = ours.encode(sentence)
        assert hf.tokenize(sentence) == encoding.tokens[1:-1]
        assert hf(sentence)["input_ids"] == encoding.ids
    assert hf.unk_token_id == read_vocab(out / "vocab.txt")["[UNK]"] == 101
    assert hf.tokenize("ŐSZ")[0].startswith("o" if lowercase else "Ő")


@pytest.mark.parametrize("method", ["sentencepiece", "tokenizers"])
def test_same_input_same_vocabulary(tmp_path, corpus, method, run_vocab):
    first, _ = run_vocab(tmp_path, corpus, "first", workers=1, method=method, **SMALL[method])
    second, _ = run_vocab(tmp_path, corpus, "second", workers=2, method=method, **SMALL[method])
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_tokenizers_training_is_deterministic_despite_upstream_hash_order(tmp_path, run_vocab):
    # many equal counts: upstream WordPieceTrainer picks different merges from run to run on such text
    corpus = tmp_path / "filter"
    corpus.mkdir()
    words = [a + b + c for a in "abcdefgh" for b in "ijklmnop" for c in "qrstuvwx"]
    (corpus / "part-00000.txt").write_text("\n".join(" ".join(words[i:i + 8]) for i in range(0, 512, 8)) + "\n\n")
    vocabs = {run_vocab(tmp_path, corpus, f"run{i}", method="tokenizers", vocab_size=300, min_frequency=1)[0]
              .joinpath("vocab.txt").read_bytes() for i in range(4)}
    assert len(vocabs) == 1


SUBPROCESS_VOCAB = """
import logging, sys
from pathlib import Path
from pipeline.stages import StageContext
from pipeline.stages.vocab import VocabConfig, run
corpus, out, shuffle = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "True"
out.mkdir()
ctx = StageContext(lang="hu", out_dir=out, inputs={"dedup": corpus, "filter": corpus}, cache_dir=out.parent / "cache",
                   workers=2, quiet=True, log=logging.getLogger("vocab"))
print(run(VocabConfig(vocab_size=600, input_sentence_size=500, shuffle_input_sentence=shuffle), ctx)["sentences"])
"""


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_corpus_over_input_sentence_size_gives_the_same_vocabulary_every_time(tmp_path, corpus, run_vocab, shuffle):
    """sentencepiece's own sampling differs from process to process whatever its seed: the stage samples by its
    own seeded draw, and still reads (and counts) every sentence."""
    vocabs, counts = set(), []
    for i in range(3):
        done = subprocess.run([sys.executable, "-c", SUBPROCESS_VOCAB, str(corpus), str(tmp_path / f"run{i}"),
                               str(shuffle)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        vocabs.add((tmp_path / f"run{i}" / "vocab.txt").read_bytes())
        counts.append(int(done.stdout.splitlines()[-1]))
    assert len(vocabs) == 1
    whole, whole_counts = run_vocab(tmp_path, corpus, "whole", **SMALL["sentencepiece"])
    assert whole.joinpath("vocab.txt").read_bytes() not in vocabs  # 500 sentences of the corpus's 1,600 or so
    assert counts == [whole_counts["sentences"]] * 3


@pytest.mark.parametrize("method,pattern", [
    ("sentencepiece",
     r"supports at most \d+ sentencepiece pieces, vocab.vocab_size is 200000: .*--set vocab.vocab_size=\d+"),
    ("tokenizers", r"supports only \d+ WordPiece tokens .*vocab.vocab_size is 200000: .*--set vocab.vocab_size=\d+")])
def test_vocabulary_larger_than_the_corpus_supports(tmp_path, corpus, method, pattern, run_vocab):
    with pytest.raises(DataError, match=pattern) as e:
        run_vocab(tmp_path, corpus, method=method, vocab_size=200000)
    assert str(e.value).startswith(str(corpus))
    assert not (tmp_path / "out" / "vocab.txt").exists()


@pytest.mark.parametrize("method,size,pattern", [
    ("sentencepiece", 20, r"vocab.vocab_size 20 is too small: covering 0.9999 of the characters takes \d+ pieces"),
    ("tokenizers", 150, r"vocab.vocab_size 150 leaves no room for merges")])
def test_vocabulary_too_small_for_the_characters(tmp_path, corpus, method, size, pattern, run_vocab):
    with pytest.raises(DataError, match=pattern):
        run_vocab(tmp_path, corpus, method=method, vocab_size=size)


@pytest.mark.parametrize("method", ["sentencepiece", "tokenizers"])
def test_empty_input(tmp_path, method, run_vocab):
    empty = tmp_path / "filter"
    empty.mkdir()
    (empty / "part-00000.txt").write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match="no text to train a vocabulary on"):
        run_vocab(tmp_path, empty, method=method)
    with pytest.raises(DataError, match=r"no part-\*\.txt files"):
        run_vocab(tmp_path, tmp_path / "cache", "out2", method=method)


def test_only_overlong_sentences(tmp_path, run_vocab):
    unsplit = tmp_path / "filter"
    unsplit.mkdir()
    (unsplit / "part-00000.txt").write_text(("szó " * 1100 + "\n\n") * 3, encoding="utf-8")
    with pytest.raises(DataError, match="every sentence is longer than 4192 bytes"):
        run_vocab(tmp_path, unsplit)


@pytest.mark.parametrize("method", ["sentencepiece", "tokenizers"])
def test_non_utf8_part_is_named(tmp_path, method, make_corpus, run_vocab):
    bad = make_corpus(tmp_path / "filter", documents=40)
    with open(bad / "part-00001.txt", "ab") as f:
        f.write("Első mondat.\nMásodik \xff mondat.\n\n".encode("utf-8").replace("\xff".encode(), b"\xff"))
    lines = (bad / "part-00001.txt").read_bytes().count(b"\n")
    with pytest.raises(DataError, match=rf"part-00001\.txt: line {lines - 1}: not UTF-8 \(byte 9 of the line\)"):
        run_vocab(tmp_path, bad, method=method, **SMALL[method])


def test_config_mistakes():
    with pytest.raises(ConfigError, match="^vocab_size: must be at least 1, got 0$"):
        VocabConfig(vocab_size=0)
    with pytest.raises(ConfigError, match="^character_coverage: "):
        VocabConfig(character_coverage=1.5)


# Unicode line separators other than "\n" (str.splitlines() splits there): inside a token on one line
SEPARATORS = ["\u2028", "\x85", "\u2029", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]


def test_vocab_txt_is_read_as_bert_tokenizers_read_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.tokenization_bert import load_vocab

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"a{s}b" for s in SEPARATORS), "\x1cend", "crlf",
              " leading", "last"]
    path = tmp_path / "vocab.txt"
    path.write_bytes("\n".join(tokens[:-2]).encode() + b"\r\n" + "\n".join(tokens[-2:]).encode() + b"\n")
    ours = read_vocab(path)
    assert ours == {token: i for i, token in enumerate(tokens)}
    assert ours == dict(load_vocab(str(path))) == transformers.BertTokenizer(str(path)).get_vocab()

    # lines the two readers of BERT vocabularies read differently: transformers' load_vocab splits at a lone "\r"
    # and keeps trailing whitespace, HF tokenizers' WordPiece.read_file does neither
    for line, what in [("cr\rlf", "holds a carriage return"), ("trailing ", "ends in whitespace"),
                       ("sep\u2028", "ends in whitespace")]:
        path.write_text("\n".join([*tokens[:5], line, "last"]) + "\n", encoding="utf-8")
        with pytest.raises(DataError, match=rf"vocab.txt: line 6: .* {what}"):
            read_vocab(path)
