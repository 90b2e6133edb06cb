"""pipeline/stages/hdf5/tokenize.py: the word cache gives exactly the ids of the tokenizer's own encode_batch, on text made to
break a per-character shortcut (accents composed and not, marks at a word's start, final sigma, dotted I, CJK,
control and zero-width characters, odd spaces, over-long words, special tokens spelled out) and on random
Unicode; also with a cache small enough to be dropped between batches, and for tokenizers of another make-up."""
from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from wiki2bert_core.wordpiece import special_token_ids, wordpiece_tokenizer
from pipeline.stages.hdf5.tokenize import WordCache, tokenize_documents

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TRICKY = [
    "Árvíztűrő tükörfúrógép, ÁRVÍZTŰRŐ TÜKÖRFÚRÓGÉP!",
    "A\u0301rvi\u0301ztu\u030bro\u030b decomposed, \u0301leading mark and e\u0301\u0323 two marks e\u0323\u0301",
    "ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ σοφός, İstanbul IŞIK ıi ǅemal ﬁnance ß ẞ",
    "中文字符测试，日本語のテキスト。한국어 텍스트 (hangul) ｆｕｌｌｗｉｄｔｈ",
    "tab\there\x0bvt\x0cff\u00a0nbsp\u2003em\u3000ideo\u200bzw\u200dzwj\u2028ls\u2029ps\x1c\x1d\x85nel",
    "ctrl\x00nul\x07bel\x1besc\ufffdrepl\u00adsoft\u200eLRM \U0001F600 emoji \U0001F1ED\U0001F1FA flags",
    "punct: a_b a-b a.b a,b (a) [a] {a} a/b a\\b a|b a~b a^b a`b a@b a#b a$b a%b a&b a*b a+b a=b a<b a>b",
    "more: «guillemets» „idézőjel” ‘single’ — dash – en … ellipsis ¿qué? ¡sí! 10€ 5£ ©®™ §¶ †‡ •",
    "[SEP] [MASK] [CLS] [PAD] [UNK] ##ab ## # ##",
    "double  spaces   and trailing spaces  ",
    " leading space",
    "x" * 150 + " " + "é" * 101 + " " + "y" * 100,
    "हिन्दी देवनागरी क्षत्रिय, العربية مرحبا, עברית שלום, ไทย ภาษา, ভাষা",
    "digits 0123456789 ١٢٣ ௧௨௩ ½ ² ⅷ Ⅻ, math ∑∫√∞≠≤ ≥, arrows →⇒",
]


def make_vocab(tokenizer_for_chars, lines: list[str]) -> dict[str, int]:
    """Specials, every character of the normalized lines, each as a ## piece too, and some longer pieces."""
    normalized = "".join(tokenizer_for_chars.normalizer.normalize_str(line) for line in lines)
    chars = sorted(set(normalized) - set(" \t\n"))
    longer = ["árvíz", "arviz", "##tűrő", "##turo", "tükör", "##fúró", "##gép", "σοφ", "##ός", "istanbul",
              "decomposed", "##posed", "double", "spaces", "##ing", "mark", "##s", "ab", "##ab", "a", "##b", "xx",
              "##xx", "##xxxx", "中文", "punct", "[SEP]", "##é"]
    tokens = SPECIALS + [t for t in dict.fromkeys(chars + ["##" + c for c in chars] + longer) if t not in SPECIALS]
    return {t: i for i, t in enumerate(tokens)}


def reference(tokenizer: Tokenizer, vocab: dict[str, int], sentences: list[str]) -> tuple[list[int], list[int]]:
    encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
    special = {vocab[t] for t in SPECIALS if t != "[UNK]"}
    ids = [vocab["[UNK]"] if i in special else i for e in encodings for i in e.ids]
    return ids, [len(e.ids) for e in encodings]


def random_unicode(rng: random.Random, n: int) -> list[str]:
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x4E80),
              (0xAC00, 0xAC80), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x0, 0x1F)]
    lines = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 60)):
            lo, hi = rng.choice(ranges)
            chars.append(" " if rng.random() < 0.2 else chr(rng.randint(lo, hi)))
        lines.append("".join(chars).replace("\n", " "))
    return lines


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_word_cache_equals_the_tokenizer(lowercase):
    lines = TRICKY + random_unicode(random.Random(7), 400)
    probe = wordpiece_tokenizer({t: i for i, t in enumerate(SPECIALS)}, lowercase=lowercase, strip_accents=lowercase)
    vocab = make_vocab(probe, lines)
    tokenizer = wordpiece_tokenizer(vocab, lowercase=lowercase, strip_accents=lowercase)
    expected_ids, expected_lengths = reference(tokenizer, vocab, lines)
    for max_chunks in (1 << 18, 8):  # the small cache is dropped before almost every batch
        cache = WordCache(tokenizer, special_token_ids(vocab), max_chunks=max_chunks)
        assert cache.by_chunk
        ids, lengths = [], []
        for start in range(0, len(lines), 50):  # several batches: later ones reuse (or drop) the cache
            flat, per_sentence = cache.encode(lines[start:start + 50])
            ids += flat.tolist()
            lengths += per_sentence.tolist()
        assert lengths == expected_lengths
        assert ids == expected_ids
    assert cache.interacting  # combining marks took the full tokenizer


def test_other_tokenizers_are_used_whole(tmp_path):
    vocab = make_vocab(wordpiece_tokenizer({t: i for i, t in enumerate(SPECIALS)}), TRICKY)
    tokenizer = wordpiece_tokenizer(vocab)
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # groups punctuation: not per character
    cache = WordCache(tokenizer, special_token_ids(vocab))
    assert not cache.by_chunk
    flat, lengths = cache.encode(TRICKY)
    assert (flat.tolist(), lengths.tolist()) == reference(tokenizer, vocab, TRICKY)


def test_tokenize_documents_offsets(tmp_path):
    vocab = make_vocab(wordpiece_tokenizer({t: i for i, t in enumerate(SPECIALS)}), TRICKY)
    tokenizer = wordpiece_tokenizer(vocab)
    (tmp_path / "t.txt").write_text("ab ab\n\u200b\nab\n\n\u200b\n\n" + "\n".join(TRICKY) + "\n", encoding="utf-8")
    docs = tokenize_documents(tmp_path / "t.txt", tokenizer, special_token_ids(vocab))
    expected, lengths = reference(tokenizer, vocab, ["ab ab", "ab"] + TRICKY)
    assert docs.ids.tolist() == expected and docs.ids.dtype == np.uint16
    assert np.diff(docs.sentence_starts).tolist() == [n for n in lengths if n]  # the zero-width line is dropped
    assert docs.document_starts.tolist() == [0, 2, 2 + sum(1 for n in lengths[2:] if n)]  # so is its document


# --- SpaceChunkCache: Unigram and byte-level BPE tokenizers ---------------------------------------------------------

def learnt(method: str, lines: list[str], lowercase: bool = False, strip_accents: bool = False) -> Tokenizer:
    from pipeline.tokenizer_files import learnt_tokenizer, trainer

    tokenizer = learnt_tokenizer(method, lowercase, strip_accents)
    characters = sorted(set("".join(lines)) - {" "})
    tokenizer.train_from_iterator(lines, trainer(method, len(characters) + 400, 1, characters))
    return tokenizer


def sentencepiece_unigram(lines: list[str], tmp_path) -> Tokenizer:
    """A SentencePiece Unigram model (nmt_nfkc's precompiled character map) as --tokenizer adopts a .model."""
    import sentencepiece as spm
    from pipeline.tokenizer_files import _from_sentencepiece

    (tmp_path / "text.txt").write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "text.txt"), model_prefix=str(tmp_path / "spm"),
                                   vocab_size=290, model_type="unigram", user_defined_symbols=["<mask>"],
                                   pad_id=3, character_coverage=1.0, minloglevel=2)
    return _from_sentencepiece(tmp_path / "spm.model", "test")


def unigram_or_bpe_reference(tokenizer: Tokenizer, special: dict[str, int], sentences: list[str]):
    encodings = tokenizer.encode_batch(sentences, add_special_tokens=False)
    others = {i for role, i in special.items() if role != "[UNK]"}
    return [special["[UNK]"] if i in others else i for e in encodings for i in e.ids], [len(e.ids) for e in encodings]


CHUNK_TRICKY = TRICKY + ["▁literal ▁ marker▁s", "a <mask> b<mask>c", "<s> </s> <pad> <unk>", "'s 're 've n't ’s",
                         "x,y. (z) 12.5% 1 000", "  ", "", "a", "İİ ΣΣ ΣΑΣ σς"]


@pytest.mark.parametrize("make", ["unigram", "unigram uncased", "bpe", "bpe uncased", "bpe without prefix space",
                                  "sentencepiece .model"])
def test_space_chunk_cache_equals_the_tokenizer(make, tmp_path):
    from pipeline.stages.hdf5.tokenize import SpaceChunkCache, splits_at_spaces

    lines = CHUNK_TRICKY + random_unicode(random.Random(11), 400)
    if make == "sentencepiece .model":
        tokenizer = sentencepiece_unigram(CHUNK_TRICKY * 20, tmp_path)
    else:
        tokenizer = learnt(make.split()[0], lines, lowercase="uncased" in make, strip_accents="uncased" in make)
        tokenizer.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        if "without prefix space" in make:  # ModernBERT's: no Ġ on a sentence's first word
            tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert splits_at_spaces(tokenizer)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    special = {role: vocab[t] for role, t in zip(("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"),
                                                 ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))}
    expected_ids, expected_lengths = unigram_or_bpe_reference(tokenizer, special, lines)
    for max_chunks in (1 << 18, 8):  # the small cache is dropped before almost every batch
        cache = SpaceChunkCache(tokenizer, special, max_chunks=max_chunks)
        ids, lengths = [], []
        for start in range(0, len(lines), 50):
            flat, per_sentence = cache.encode(lines[start:start + 50])
            ids += flat.tolist()
            lengths += per_sentence.tolist()
        assert lengths == expected_lengths
        assert ids == expected_ids
        chunked = [s for s in lines if not cache._whole(s, 1)[0]]  # the chunk path is taken where it can be
        assert len(chunked) > 15 and (max_chunks < 100 or len(cache.chunks.code) > 100)
    assert "▁" in cache.whole or make.startswith("bpe")  # a literal word-start marker takes the tokenizer whole


def test_tokenizers_whose_words_depend_on_the_first_are_not_chunked():
    from pipeline.stages.hdf5.tokenize import splits_at_spaces

    lines = CHUNK_TRICKY
    bpe = learnt("bpe", lines)
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Strip()])  # " chunk" would lose its Ġ
    unigram = learnt("unigram", lines)
    unigram.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    first = learnt("unigram", lines)  # with Strip, a stripped " chunk" is no longer the text's start: no ▁
    first.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    joined = learnt("unigram", lines)
    joined.pre_tokenizer = pre_tokenizers.Metaspace(split=False)  # a sentence is one piece sequence
    assert not any(splits_at_spaces(t) for t in (bpe, unigram, first, joined))
    assert splits_at_spaces(learnt("unigram", lines)) and splits_at_spaces(learnt("bpe", lines))
