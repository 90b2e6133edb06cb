"""Document text -> flat WordPiece ids (in memory, or streamed to disk as TokenFiles), each distinct word sent through
the tokenizer once.

BERT's tokenization (HF `BertNormalizer` + `BertPreTokenizer` + `WordPiece`) works character by character up to
the word: normalizing a text is normalizing each character (clean-up, accent stripping, lowercasing, padding of
CJK characters all act on one character), the pre-tokenizer splits at whitespace and around each punctuation
character, and WordPiece then sees each word alone. A space is a boundary for all three, so the ids of a text
are the ids of its space-separated chunks one after the other. Instead of the tokenizer's per-sentence machinery
(offsets, alignments, one `Encoding` per sentence), `WordCache` therefore:
- looks each chunk ("Isten," "(1912)") up in a chunk -> pieces cache (frequencies are Zipfian: most chunks
  were seen before);
- turns only new chunks into words with a table of each character's normalized, pre-tokenized form (made by
  asking the tokenizer itself, so the answers are the tokenizer's whatever its Unicode tables) and
  `str.translate`, and looks those up in a word -> pieces cache;
- sends only new words to the tokenizer's own WordPiece model.
The ids are exactly the tokenizer's: a chunk holding a character whose form could interact with its neighbours
(combining marks, which Unicode normalization reorders) or an added token's text goes through the full tokenizer
alone, and tokenizers of any other make-up are used whole (`tests/test_pipeline/test_tokenize.py` checks both paths against
`Tokenizer.encode_batch` on adversarial text and random Unicode). Both caches are bounded (MAX_CACHED_CHUNKS).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import json
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import write_json
from pipeline.text_files import iter_documents
from pipeline.stages.hdf5.instances import TokenizedDocuments

BATCH_SENTENCES = 8192
MAX_CACHED_CHUNKS = 1 << 18  # ~40 MB of cached text; the caches start afresh past this: memory stays flat
_EMPTY, _BREAK = 0, 1  # codes of "" (two spaces in a row) and of the sentence break "\n"


def token_batches(path: Path, tokenizer: Tokenizer, special_ids: dict[str, int]) \
        -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A document-text file as (ids, tokens of each sentence, sentences of each document), ~BATCH_SENTENCES
    sentences at a time: sentences without tokens and documents without sentences are dropped, and special
    tokens spelled out in the text ("[SEP]") become [UNK]. Ids are uint16 when the vocabulary allows (BERT
    vocabularies are ~30k): half the memory and disk of int32."""
    encoder = (SpaceChunkCache if splits_at_spaces(tokenizer) else WordCache)(tokenizer, special_ids)
    dtype = id_dtype(tokenizer)
    batch: list[str] = []
    doc_sizes: list[int] = []
    for doc in itertools.chain(iter_documents(path), [None]):
        if doc is not None:
            batch.extend(doc)
            doc_sizes.append(len(doc))
        if batch and (doc is None or len(batch) >= BATCH_SENTENCES):
            flat, lengths = encoder.encode(batch)
            kept = np.add.reduceat((lengths > 0).astype(np.int64), np.cumsum([0] + doc_sizes[:-1]))
            yield flat.astype(dtype), lengths[lengths > 0], kept[kept > 0]
            batch, doc_sizes = [], []


def id_dtype(tokenizer: Tokenizer) -> np.dtype:
    return np.dtype(np.uint16 if tokenizer.get_vocab_size(with_added_tokens=True) <= 1 << 16 else np.int32)


def tokenize_documents(path: Path, tokenizer: Tokenizer, special_ids: dict[str, int]) -> TokenizedDocuments:
    """A whole document-text file in memory (see token_batches; the hdf5 stage streams them to TokenFiles)."""
    batches = list(token_batches(path, tokenizer, special_ids))
    ids = np.concatenate([b[0] for b in batches]) if batches else np.zeros(0, id_dtype(tokenizer))
    return TokenizedDocuments(ids, _offsets([b[1] for b in batches]), _offsets([b[2] for b in batches]))


def _offsets(length_parts: list[np.ndarray]) -> np.ndarray:
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


class TokenFiles:
    """A shard's tokens on disk, written a batch at a time and read a window of documents at a time, so that
    memory does not grow with the shard: raw arrays of the ids, of each sentence's first token (+ the end), of
    each document's first sentence and first token (+ the ends), and meta.json (dtype and counts)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def write(self, batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], dtype: np.dtype) -> dict:
        """Store token_batches' output; returns the counts of documents, sentences and tokens."""
        self.directory.mkdir(parents=True)
        tokens = sentences = documents = 0
        names = ("ids", "sentence_tokens", "document_sentences", "document_tokens")
        with contextlib.ExitStack() as stack:
            ids_file, sentence_tokens, document_sentences, document_tokens = (
                stack.enter_context(open(self.directory / f"{name}.bin", "wb")) for name in names)
            for ids, lengths, sizes in batches:
                starts = tokens + np.cumsum(lengths) - lengths
                first_sentences = np.cumsum(sizes) - sizes
                ids_file.write(ids.tobytes())
                sentence_tokens.write(starts.astype("<i8").tobytes())
                document_sentences.write((sentences + first_sentences).astype("<i8").tobytes())
                document_tokens.write(starts[first_sentences].astype("<i8").tobytes())
                tokens, sentences, documents = tokens + len(ids), sentences + len(lengths), documents + len(sizes)
            for f, end in ((sentence_tokens, tokens), (document_sentences, sentences), (document_tokens, tokens)):
                f.write(np.array([end], "<i8").tobytes())
        counts = {"documents": documents, "sentences": sentences, "input_tokens": tokens}
        write_json(self.directory / "meta.json", {"dtype": np.dtype(dtype).str, **counts})
        return counts

    def windows(self, max_tokens: int) -> list[tuple[int, int]]:
        """Runs of whole documents [first, end) of at most max_tokens tokens each (or one document)."""
        starts = self._read("document_tokens", 0, None)
        if starts[-1] <= max_tokens:
            return [(0, len(starts) - 1)]
        bounds, first_token = [0], starts[0]
        for d in range(1, len(starts) - 1):
            if starts[d + 1] - first_token > max_tokens:
                bounds.append(d)
                first_token = starts[d]
        return list(zip(bounds, bounds[1:] + [len(starts) - 1]))

    def read(self, first: int, end: int, margin: int = 0) -> TokenizedDocuments:
        """Documents first..end-1, their offsets counted from their first sentence and token. The ids are the middle
        of an array with `margin` zeros on each side (their `.base`, which TokenRows takes without a second copy)."""
        document_sentences = self._read("document_sentences", first, end + 1)
        s0, s1 = int(document_sentences[0]), int(document_sentences[-1])
        sentence_tokens = self._read("sentence_tokens", s0, s1 + 1)
        t0, t1 = int(sentence_tokens[0]), int(sentence_tokens[-1])
        dtype = np.dtype(json.loads((self.directory / "meta.json").read_text(encoding="utf-8"))["dtype"])
        padded = np.zeros(t1 - t0 + 2 * margin, dtype=dtype)
        ids = padded[margin:margin + t1 - t0]
        with open(self.directory / "ids.bin", "rb") as f:
            f.seek(t0 * dtype.itemsize)
            if f.readinto(ids) != ids.nbytes:
                raise DataError(f"{self.directory / 'ids.bin'}: shorter than its meta.json says")
        return TokenizedDocuments(ids, sentence_tokens - t0, document_sentences - s0)

    def _read(self, name: str, first: int, end: int | None) -> np.ndarray:
        count = -1 if end is None else end - first
        return np.fromfile(self.directory / f"{name}.bin", dtype="<i8", count=count, offset=first * 8).astype(np.int64)


class WordCache:
    """encode(sentences) -> (flat ids, tokens per sentence), equal to the tokenizer's encode_batch without
    special tokens, with the special ids other than [UNK] spelled out in the text turned into [UNK].

    Two caches: space-separated chunks of the raw text ("Isten," "(1912)") -> pieces, and the words that
    normalizing and pre-tokenizing new chunks gives -> pieces. Only new words reach the WordPiece model."""

    def __init__(self, tokenizer: Tokenizer, special_ids: dict[str, int], max_chunks: int = MAX_CACHED_CHUNKS):
        self.tokenizer = tokenizer
        self.unk_id = special_ids["[UNK]"]
        self.special = np.array([i for t, i in special_ids.items() if t != "[UNK]"], dtype=np.int32)
        self.max_chunks = max_chunks
        self.by_chunk = _acts_per_character(tokenizer)
        self.model_only = Tokenizer(tokenizer.model)
        self.continues_word: np.ndarray | None = None  # by id: the piece continues a word ("##...")
        self.added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        self.table: dict[int, str] = {ord("\n"): " \n "}  # character -> its normalized, pre-tokenized form
        self.interacting: set[str] = set()  # characters whose chunks take the full tokenizer
        self.needs_full = _any_of(self.added, self.interacting)
        self.chunks, self.words = _Pieces(), _Pieces()

    def encode(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not self.by_chunk:
            return self._encode_full(sentences)
        if len(self.chunks.code) > self.max_chunks:
            self.chunks, self.words = _Pieces(), _Pieces()
        codes, new = self.chunks.codes(" \n ".join(sentences).split(" "))
        if new:
            self._tokenize_new_chunks(new)
        return self.chunks.gather(codes, len(sentences))

    def _tokenize_new_chunks(self, new: list[str]) -> None:
        codes = np.arange(len(self.chunks.code) - len(new), len(self.chunks.code))
        joined = "\n".join(new)
        self._learn_characters(set(joined))
        full = np.zeros(len(new), dtype=bool)
        if self.needs_full is not None and (hits := [m.start() for m in self.needs_full.finditer(joined)]):
            ends = np.cumsum([len(c) + 1 for c in new])
            full[np.searchsorted(ends, hits, side="right")] = True
            self.chunks.add(codes[full], *self._encode_full([new[i] for i in np.flatnonzero(full)]))
            joined = "\n".join(new[i] for i in np.flatnonzero(~full))
        if not full.all():
            word_codes, new_words = self.words.codes(joined.translate(self.table).split(" "))
            if new_words:
                ids, counts = self._word_pieces(new_words)
                self.words.add(np.arange(len(self.words.code) - len(new_words), len(self.words.code)), ids, counts)
            self.chunks.add(codes[~full], *self.words.gather(word_codes, int((~full).sum())))

    def _word_pieces(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """WordPiece ids of the words, concatenated, and the number for each word. One encoding without offsets
        (encode_batch_fast); a word's pieces are its first (never a continuation piece: words hold no "##", the
        pre-tokenizer splits at "#") and the continuation pieces after it."""
        if self.continues_word is None:
            prefix = self.tokenizer.model.continuing_subword_prefix
            vocab = self.model_only.get_vocab()
            self.continues_word = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
            self.continues_word[[i for t, i in vocab.items() if t.startswith(prefix)]] = True
        encoding = self.model_only.encode_batch_fast([words], is_pretokenized=True, add_special_tokens=False)[0]
        ids = np.array(encoding.ids, dtype=np.int32)
        firsts = np.flatnonzero(~self.continues_word[ids])
        if len(firsts) != len(words):
            raise AssertionError(f"WordPiece gave {len(firsts)} first pieces for {len(words)} words")
        return self._unk_specials(ids), np.diff(firsts, append=len(ids))

    def _encode_full(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        return self._unk_specials(flat), lengths

    def _unk_specials(self, ids: np.ndarray) -> np.ndarray:
        ids[np.isin(ids, self.special)] = self.unk_id
        return ids

    def _learn_characters(self, characters: set[str]) -> None:
        """Add the characters not yet in the table, as the tokenizer's normalizer and pre-tokenizer treat them."""
        normalizer = self.tokenizer.normalizer
        for c in characters:
            if ord(c) in self.table or c in self.interacting:
                continue
            normalized = normalizer.normalize_str(c) if normalizer is not None else c
            if any(unicodedata.category(n)[0] == "M" or unicodedata.category(n) == "Cn"
                   or unicodedata.combining(n) for n in normalized):
                self.interacting.add(c)  # combining marks reorder with their neighbours under NFD
                self.needs_full = _any_of(self.added, self.interacting)
            else:
                self.table[ord(c)] = "".join(map(self._pre_tokenized, normalized))

    def _pre_tokenized(self, c: str) -> str:
        words = [w for w, _ in self.tokenizer.pre_tokenizer.pre_tokenize_str(f"a{c}a")]
        if words == ["a", "a"]:
            return " "  # whitespace: a word boundary
        if words == ["a", c, "a"]:
            return f" {c} "  # punctuation: a word of its own
        if words == [f"a{c}a"]:
            return c
        raise AssertionError(f"pre-tokenizer splits {c!r} in an unexpected way: {words}")


class SpaceChunkCache:
    """encode(sentences) -> (flat ids, tokens per sentence), as WordCache's, for a Unigram or BPE tokenizer whose words
    start at spaces and whose normalizer does not act across one (splits_at_spaces): SentencePiece's Metaspace, or a
    byte-level pre-tokenizer (GPT-2's split: `Ġ` on each word after a space; RoBERTa's also on the first word,
    ModernBERT's not).

    For such a tokenizer, a sentence of non-empty chunks joined by single spaces encodes as its first chunk alone
    and each later one with its space before it (" chunk") do one by one: normalizing acts within each (Unicode's
    normalization forms, lowercasing and accent stripping do not reach over a space; whitespace-collapsing
    replacements and stripping leave such a sentence as it is), each gets the word start the sentence gave it
    (Metaspace makes the space, or the first word's prefix, a `▁`; byte-level BPE's split takes the space into the
    word as `Ġ`), and no word's pieces depend on another's. So each distinct chunk is encoded once (a Zipfian text
    repeats most). Each character is first tried as a chunk between two others (`a c a`): one that does not encode
    there as `a`, ` c` and ` a` do alone (a literal `▁`, a character normalized to a space or to nothing), whitespace
    other than single spaces between chunks, and an added token's text send their sentence through the tokenizer
    whole. tests/test_pipeline/test_tokenize.py checks the ids against the tokenizer's encode_batch on adversarial
    text and random Unicode."""

    def __init__(self, tokenizer: Tokenizer, special_ids: dict[str, int], max_chunks: int = MAX_CACHED_CHUNKS):
        self.tokenizer = tokenizer
        self.unk_id = special_ids["[UNK]"]
        self.special = np.array([i for t, i in special_ids.items() if t != "[UNK]"], dtype=np.int32)
        self.max_chunks = max_chunks
        self.added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        self.known: set[str] = {" ", "\n"}  # characters tried (and the sentence break of encode's joined text)
        self.whole: set[str] = set()  # characters whose sentences take the tokenizer whole
        self.needs_whole = _any_of(self.added, self.whole)
        self.chunks = _Pieces()

    def encode(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if len(self.chunks.code) > self.max_chunks:
            self.chunks = _Pieces()
        text = "\n".join(sentences)
        self._learn_characters(set(text) - self.known)
        whole = self._whole(text, len(sentences))
        chunked = [s for s, w in zip(sentences, whole) if not w] if whole.any() else sentences
        codes, new = self.chunks.codes(_CHUNKS.findall("\n".join(chunked) if whole.any() else text))
        if new:  # one encoding, each chunk a word of it that the tokenizer normalizes and pre-tokenizes alone
            encoding = self.tokenizer.encode(new, is_pretokenized=True, add_special_tokens=False)
            ids = np.array(encoding.ids, dtype=np.int32)
            counts = np.bincount(np.array(encoding.word_ids, dtype=np.int64), minlength=len(new))
            self.chunks.add(np.arange(len(self.chunks.code) - len(new), len(self.chunks.code)), ids, counts)
        flat, lengths = self.chunks.gather(codes, len(chunked)) if chunked else (np.zeros(0, np.int32),
                                                                                   np.zeros(0, np.int64))
        if whole.any():
            flat, lengths = _interleave(whole, (flat, lengths), self._encode_whole(
                [s for s, w in zip(sentences, whole) if w]))
        flat[np.isin(flat, self.special)] = self.unk_id
        return flat, lengths

    def _whole(self, text: str, sentences: int) -> np.ndarray:
        """Which of the "\n"-joined sentences of `text` the tokenizer takes whole: a space at an end or two in a row,
        a character that does not encode alike alone, an added token's text."""
        found = [m.start() for m in _ODD_SPACES.finditer(text)]
        if self.needs_whole is not None:
            found += [m.start() for m in self.needs_whole.finditer(text)]
        whole = np.zeros(sentences, dtype=bool)
        if found:
            breaks = np.flatnonzero(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == ord("\n"))
            whole[np.searchsorted(breaks, found)] = True
        return whole

    def _encode_whole(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())), lengths

    def _learn_characters(self, characters: set[str]) -> None:
        encode = self.tokenizer.encode_batch_fast
        for c in sorted(characters):
            self.known.add(c)
            a, later_a, alone, between = (e.ids for e in encode(["a", " a", f" {c}", f"a {c} a"],
                                                                add_special_tokens=False))
            if c.isspace() or not alone or between != a + alone + later_a:
                self.whole.add(c)
        self.needs_whole = _any_of(self.added, self.whole)


def splits_at_spaces(tokenizer: Tokenizer) -> bool:
    """Whether SpaceChunkCache's reasoning holds for the tokenizer: a Unigram or BPE model (no BPE dropout), a
    Metaspace pre-tokenizer that splits and always puts `▁` before a word (with "first", a " chunk" stripped by the
    normalizer would lose it: `▁` goes only where the text started), or a byte-level one with GPT-2's split (a space before the first word or not, but then no stripping,
    which would take a later chunk's space); normalizers that act within a word (Unicode normalization forms,
    lowercasing, accent stripping, SentencePiece's precompiled character map), strip the ends, or replace runs of
    whitespace; no truncation or padding."""
    spec = json.loads(tokenizer.to_str())
    model, pre, normalizer = spec["model"], spec["pre_tokenizer"] or {}, spec["normalizer"]
    if model["type"] not in ("Unigram", "BPE") or model.get("dropout") or spec["truncation"] or spec["padding"]:
        return False
    if pre.get("type") == "Sequence" and all(p["type"] == "WhitespaceSplit" for p in pre["pretokenizers"][:-1]):
        pre = pre["pretokenizers"][-1]  # XLM-R's: words split at whitespace first, then Metaspace's
    steps = normalizer["normalizers"] if normalizer and normalizer["type"] == "Sequence" else [normalizer]
    if pre.get("type") == "Metaspace":
        fits = pre.get("split", True) and pre.get("prepend_scheme", "always") == "always"
    else:
        fits = pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and \
            (pre.get("add_prefix_space") or not any(step and step["type"] == "Strip" for step in steps))
    return bool(fits) and all(step is None or step["type"] in _WITHIN_WORDS or _replaces_whitespace(step)
                              for step in steps)


_ODD_SPACES = re.compile(r"^ | $|  ", re.MULTILINE)
_CHUNKS = re.compile(r"\n| ?[^ \n]+")  # a sentence's first chunk, " chunk" for each later one, "\n" between sentences
_WITHIN_WORDS = ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Strip", "Precompiled")
_WHITESPACE_RUNS = (" {2,}", r"\s+", " +", r"\s{2,}")


def _replaces_whitespace(step: dict) -> bool:
    """A Replace of a run of whitespace (by a space): nothing to replace in single-spaced text."""
    return step["type"] == "Replace" and step["pattern"].get("Regex") in _WHITESPACE_RUNS and step["content"] == " "


def _interleave(second: np.ndarray, first: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Two groups' (flat ids, lengths) merged in sentence order: `second` marks the sentences of `other`."""
    lengths = np.zeros(len(second), np.int64)
    lengths[~second], lengths[second] = first[1], other[1]
    starts = np.cumsum(lengths) - lengths
    flat = np.empty(int(lengths.sum()), np.int32)
    for mask, (ids, group_lengths) in ((~second, first), (second, other)):
        flat[np.repeat(starts[mask] - (np.cumsum(group_lengths) - group_lengths), group_lengths)
             + np.arange(len(ids))] = ids
    return flat, lengths


class _Pieces:
    """key -> code -> pieces (a slice of one flat id array). Codes 0 and 1 are "" and the sentence break "\n",
    both without pieces; the caller adds the pieces of the unseen keys that `codes` reports."""

    def __init__(self):
        # an unseen key gets the next code from the default factory: no Python call per key, even for new ones
        self.code = collections.defaultdict(itertools.count(2).__next__, {"": _EMPTY, "\n": _BREAK})
        self.ids = np.zeros(0, np.int32)
        self.starts = np.zeros(2, np.int64)
        self.counts = np.zeros(2, np.int64)

    def codes(self, keys: list[str]) -> tuple[np.ndarray, list[str]]:
        """The keys' codes, unseen keys getting the next ones; and the unseen keys in code order."""
        known = len(self.code)
        codes = np.fromiter(map(self.code.__getitem__, keys), dtype=np.int64, count=len(keys))
        return codes, list(itertools.islice(self.code, known, None))

    def add(self, codes: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> None:
        """The pieces of the keys `codes`: concatenated in `ids`, `counts` of them for each key."""
        if len(self.starts) < len(self.code):
            grow = max(len(self.code), 2 * len(self.starts)) - len(self.starts)
            self.starts = np.concatenate([self.starts, np.zeros(grow, np.int64)])
            self.counts = np.concatenate([self.counts, np.zeros(grow, np.int64)])
        self.starts[codes] = len(self.ids) + np.cumsum(counts) - counts
        self.counts[codes] = counts
        self.ids = np.concatenate([self.ids, ids])

    def gather(self, codes: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
        """The pieces of a run of keys as one flat array, and the number of pieces in each group of keys
        (groups are separated by the break code)."""
        counts, starts = self.counts[codes], self.starts[codes]
        ends = np.cumsum(counts)
        flat = self.ids[np.repeat(starts - ends + counts, counts) + np.arange(ends[-1] if len(ends) else 0)]
        per_group = np.bincount(np.cumsum(codes == _BREAK), weights=counts, minlength=groups).astype(np.int64)
        return flat, per_group


def _any_of(strings: list[str], characters: set[str]) -> re.Pattern | None:
    """A pattern matching any of the strings or characters; None for none."""
    alternatives = [re.escape(t) for t in strings] + [re.escape(c) for c in sorted(characters)]
    return re.compile("|".join(alternatives)) if alternatives else None


def _acts_per_character(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer is made of the parts the module doc describes (else WordCache uses it whole)."""
    added_ok = all(not t.normalized and not any(c.isspace() for c in t.content)
                   for t in tokenizer.get_added_tokens_decoder().values())
    return isinstance(tokenizer.normalizer, (type(None), normalizers.BertNormalizer)) \
        and isinstance(tokenizer.pre_tokenizer, pre_tokenizers.BertPreTokenizer) \
        and isinstance(tokenizer.model, models.WordPiece) and tokenizer.truncation is None \
        and tokenizer.padding is None and added_ok
