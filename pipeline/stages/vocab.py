"""Stage `vocab`: a WordPiece vocabulary trained on the deduplicated corpus, cased unless stages.yaml says otherwise;
or a Unigram or byte-level BPE tokenizer (`method` unigram, bpe), or a tokenizer adopted as it is (`tokenizer`,
`--tokenizer`): those are pipeline/tokenizer_files.py's.

Two WordPiece trainers (`method`):
- `sentencepiece` (default; the Hungarian recipe of TurkuNLP's WikiBERT): sentencepiece BPE trained on the text as
  BERT's basic tokenization splits it (WikiBERT runs BERT's BasicTokenizer first; we give sentencepiece equivalent
  normalization rules, `bert_normalization_rules`), so that a piece starting with `▁` is a word start in BERT's
  sense and no piece crosses punctuation; then converted to WordPiece with the rules of TurkuNLP's sent2wordpiece
  (`sentencepiece_to_wordpiece`, `bert_vocabulary`). These rules replace sentencepiece's default NFKC: the BERT
  tokenizer that uses the vocabulary does no NFKC, so pieces learned on NFKC text ("..." for "…") would not match.
- `tokenizers`: the HF `tokenizers` WordPiece trainer (what BertWordPieceTokenizer.train runs), with the pipeline's
  own normalizer and pre-tokenizer. Its upstream version is not deterministic (huggingface/tokenizers#1794: `##`
  ids are assigned in hash-map order and break ties between merges); we fix its alphabet and the ids of the `##`
  characters before training, which removes both sources of randomness (`_train_tokenizers`).

Several languages (the mix of `pipeline run --lang hu,fi,et`, pipeline/languages.py): one vocabulary for all, trained
on a sample of each language's sentences drawn by size^alpha (`alpha`, wiki2bert_core/mixture.py; sizes in words
as each language's filter counts them): a first pass counts each language's sentences, words and characters, a
second gives the trainer each sentence int(rate) times plus once more with probability frac(rate) (seeded), so
that the sample holds the languages in those shares and as many words as the largest language (sentencepiece's
memory follows its sample: no more than that language's own vocabulary takes). The characters that make
`character_coverage` of each language's own text are in the vocabulary whatever their share of the mix, so no
script of the mix is starved of letters; the counts give each language's [UNK] rate and tokens per word.

Both stream the corpus (sentencepiece reads sentences from an iterator and keeps them in memory, up to
`input_sentence_size`: that setting, not the corpus size, decides the stage's memory; HF tokenizers holds word
counts, which grow with the distinct words). Over that many sentences the stage samples them itself, each with
probability input_sentence_size / sentences from a generator seeded by `seed`, after a pass that counts them:
sentencepiece's own sampling differs from run to run whatever its seed. Outputs: vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json
(pipeline.wordpiece.write_tokenizer_dir); lowercasing and accent stripping are explicit and off for Hungarian.
"""
from __future__ import annotations

import collections
import dataclasses
import io
import itertools
import re
import unicodedata
from pathlib import Path
from typing import Iterable, Iterator, Literal

import numpy as np
import sentencepiece as spm
from tokenizers import normalizers, pre_tokenizers, trainers

from wiki2bert_core.errors import DataError, first_line, not_utf8
from pipeline.text_files import list_parts
from wiki2bert_core.config import SettingError, added_later, check_minimum
from wiki2bert_core.log import progress
from wiki2bert_core.mixture import DEFAULT_ALPHA, check_alpha, language_shares, rates
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.words import BERT_CJK, character_flags, count_words, recorded_chars_per_word
from pipeline.tokenizer_files import adopt, finish_learnt, fingerprints, learnt_tokenizer, trainer, write_vocab_file
from pipeline.vocab_extension import WordCounts, extend
from wiki2bert_core.wordpiece import (SPECIAL_TOKENS, load_tokenizer, padded_vocab_size, placeholder_token, read_vocab,
                                      special_token_ids, special_token_names, wordpiece_tokenizer, write_tokenizer_dir)

SENTENCEPIECE_CONTROL = ("<unk>", "<s>", "</s>")
WORD_START = "▁"  # sentencepiece's word-start marker (U+2581)
SENTENCEPIECE_MAX_SENTENCE_BYTES = 4192  # sentencepiece's max_sentence_length default: longer sentences are skipped
CHUNK_BYTES = 1 << 20
SAMPLE_SENTENCES = 1_000  # sentences tokenized with the result to report [UNK] rate and tokens per word


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    # sentencepiece (BPE converted as TurkuNLP's sent2wordpiece) or tokenizers (HF WordPiece): BERT's WordPiece; unigram
    # (SentencePiece's Unigram, as XLM-R and mmBERT) or bpe (byte-level BPE, as RoBERTa and ModernBERT): a Hugging Face
    # tokenizer with <s> <pad> </s> <unk> <mask> (ids 0-4), trained by `tokenizers` (docs/pipeline.md, Learnt
    # Unigram and byte-level BPE)
    method: Literal["sentencepiece", "tokenizers", "unigram", "bpe"] = "sentencepiece"
    # a tokenizer to adopt instead of learning one (`--tokenizer`): a Hugging Face tokenizer folder, a tokenizer.json,
    # a SentencePiece Unigram .model or a vocab.txt; `method` and the training settings then do not apply, and its
    # files' sha256 go into the manifest (a changed tokenizer runs vocab and what follows again)
    tokenizer: str | None = added_later(None)
    # sentencepiece: pieces before conversion (+105 special/unused, + missing characters); tokenizers, unigram, bpe:
    # the final size
    vocab_size: int = 32000
    lowercase: bool = False  # lowercase before training and tokenizing (uncased BERT)
    strip_accents: bool = False  # drop combining accents (NFD); true would turn ő into o
    unused_tokens: int = 100  # [unused0].. after [PAD], room for tokens added when fine-tuning (WordPiece methods)
    character_coverage: float = 0.9999  # sentencepiece: share of characters the vocabulary must cover
    # sentencepiece: sentences it trains on and holds in memory, 0 = all: the stage's memory is ~85 MiB plus ~4x the
    # sampled text (~170 B per 44-byte sentence, bench/vocab_memory.py; 2.1 GiB for 10M sentences of the 1 GB
    # rehearsal), whatever the corpus size. Over it, the stage samples them itself (seeded by `seed`), after a pass
    # that counts them
    input_sentence_size: int = 10_000_000
    shuffle_input_sentence: bool = True  # sentencepiece: sample at random (seeded), not the first ones
    seed: int = 12345  # the seed of the sample of `input_sentence_size` sentences and of sentencepiece's own draws
    min_frequency: int = 2  # tokenizers, bpe: merges seen fewer times are not made
    limit_alphabet: int = 1000  # tokenizers: the most frequent characters kept as the alphabet
    # characters the vocabulary holds (as a word and as ##) whatever the corpus, besides printable ASCII (always
    # held): the script's dashes and quotes; added on top of vocab_size, like the trained pieces' missing characters
    script_punctuation: str = "–—‘’‚“”„«»‹›…"
    # several languages: the vocabulary's training sentences hold each language in proportion to (its words) ** alpha
    # (wiki2bert_core/mixture.py: 1 keeps the languages' sizes, 0 makes them equal, XLM-R's 0.3 upsamples the small)
    alpha: float = added_later(DEFAULT_ALPHA)
    # with `tokenizer`: up to this many new vocabulary entries, for the words of the corpus (seen at least
    # `min_frequency` times) the tokenizer splits worst, by count x (pieces - 1) (pipeline/vocab_extension.py);
    # `pretrain phase1 --init` of the tokenizer's model initialises their embeddings from the mean of their pieces'
    extend_with: int = added_later(0)

    def __post_init__(self):
        check_alpha(self.alpha)
        check_minimum(self, 1, "vocab_size", "limit_alphabet")
        check_minimum(self, 0, "unused_tokens", "input_sentence_size", "seed", "min_frequency", "extend_with")
        if self.extend_with and self.tokenizer is None:
            raise SettingError("extend_with", "extends an adopted tokenizer: give one with --tokenizer "
                                              "(vocab.tokenizer), or leave vocab.extend_with at 0")
        if not 0.0 < self.character_coverage <= 1.0:
            raise SettingError("character_coverage", f"{self.character_coverage} is not in (0, 1]")


def run(config: VocabConfig, ctx: StageContext) -> StageCounts:
    if ctx.several_languages:
        corpus = _MixedSentences(config, ctx)
    else:
        corpus = _CorpusSentences(list_parts(ctx.inputs["dedup"], ".txt"), quiet=ctx.quiet)
    added = 0
    original = None  # the adopted tokenizer, where the stage extends it
    if config.tokenizer is not None:
        adopted, kind = adopt(Path(config.tokenizer), ctx.out_dir, config.lowercase, config.strip_accents)
        ctx.log.info("vocab: adopted the %s tokenizer %s", kind, config.tokenizer)
        if config.extend_with:
            _extend(config, adopted, corpus, ctx)
            original = adopted
        else:
            for _ in corpus.batches():  # the sentences counted, the sample for the figures below
                pass
    elif config.method in ("unigram", "bpe"):
        kind = config.method
        _train_learnt(config, corpus, ctx)
    else:
        kind = "wordpiece"
        train = _train_sentencepiece if config.method == "sentencepiece" else _train_tokenizers
        trained = train(config, corpus, ctx)
        required = _required_characters(config, corpus.characters)
        tokens = bert_vocabulary(trained, config.unused_tokens, required_characters=required)
        added = len(tokens) - len(bert_vocabulary(trained, config.unused_tokens, add_characters=False))
        write_tokenizer_dir(ctx.out_dir, tokens, lowercase=config.lowercase, strip_accents=config.strip_accents)
    vocab = read_vocab(ctx.out_dir / "vocab.txt")
    special = special_token_ids(vocab, special_token_names(ctx.out_dir))
    ctx.log.info("vocab: %d tokens (%d missing characters added), unknown token %d", len(vocab), added,
                 special["[UNK]"])
    unk_rate, tokens_per_word, languages = _quality(load_tokenizer(ctx.out_dir), special["[UNK]"], corpus, ctx)
    extension = {}
    if original is not None:
        before = _quality(original, special["[UNK]"], corpus, ctx)[1]
        extension = {"extension": {"tokens_added": len(vocab) - original.get_vocab_size(with_added_tokens=True),
                                   "sample_tokens_per_word_before": before}}
        ctx.log.info("vocab: tokens per word of the held-out sample: %s %.4g, extended %.4g (%+.1f%%)",
                     config.tokenizer, before, tokens_per_word,
                     100 * (tokens_per_word - before) / before if before else 0.0)
    learnt_by_sentencepiece = config.tokenizer is None and config.method == "sentencepiece"
    return StageCounts({
        "vocab_size": len(vocab),
        "model_vocab_size": padded_vocab_size(len(vocab)),
        "sentences": corpus.sentences,
        "characters_added": added,
        "sample_unk_rate": unk_rate,
        "sample_tokens_per_word": tokens_per_word,
        "special_token_ids": special,
        "tokenizer_kind": kind,
        **({"sentences_too_long": corpus.too_long} if learnt_by_sentencepiece else {}),
        **extension,
    }, languages=languages)


def _quality(tokenizer, unk_id: int, corpus: _CorpusSentences, ctx: StageContext
             ) -> tuple[float, float, dict[str, dict] | None]:
    """The [UNK] rate and tokens per word of the corpus's sample, and each language's counts (several languages)."""
    if isinstance(corpus, _MixedSentences):
        languages = corpus.counts(tokenizer, unk_id)
        return *_rates(*(sum(c[f"sample_{key}"] for c in languages.values()) for key in ("unks", "tokens", "words"))),\
            languages
    chars_per_word = recorded_chars_per_word(ctx.config_by_language("filter").get(ctx.lang))
    return *_rates(*_sample_quality(tokenizer, unk_id, corpus.sample, chars_per_word)), None


def _extend(config: VocabConfig, tokenizer, corpus: _CorpusSentences, ctx: StageContext) -> None:
    """The adopted tokenizer in ctx.out_dir extended by up to `extend_with` entries for the words of the corpus, but
    its sample (the held-out text of the figures), it splits worst (pipeline/vocab_extension.py)."""
    where = f"--tokenizer {config.tokenizer}"
    counts = WordCounts(tokenizer, where)
    for batch in corpus.batches():
        counts.add(batch, corpus.held_out())
    unk_id = special_token_ids(tokenizer.get_vocab(with_added_tokens=True), special_token_names(ctx.out_dir))["[UNK]"]
    extended, new = extend(tokenizer, counts.counts, config.extend_with, config.min_frequency, unk_id, where)
    extended.save(str(ctx.out_dir / "tokenizer.json"))
    write_vocab_file(ctx.out_dir, extended)
    spelled = extended.decoder.decode if extended.decoder else "".join  # byte-level BPE's Ġ...Ã© as text
    shown = ", ".join(repr(spelled([entry.token])) for entry in new[:10]) + (", ..." if len(new) > 10 else "")
    ctx.log.info("vocab: extended by %d tokens (of vocab.extend_with %d; %d distinct words counted): %s", len(new),
                 config.extend_with, len(counts.counts), shown)


def _train_learnt(config: VocabConfig, corpus: _CorpusSentences, ctx: StageContext) -> None:
    """`vocab.method` unigram or bpe: trained on the sentences (several languages: the sample) by `tokenizers`, with
    the characters _required_characters names as Unigram's initial alphabet (byte-level BPE has every byte)."""
    tokenizer = learnt_tokenizer(config.method, config.lowercase, config.strip_accents)
    alphabet = sorted(set(_required_characters(config, corpus.characters)))
    ctx.log.info("vocab: training tokenizers %s, %d tokens", config.method, config.vocab_size)
    tokenizer.train_from_iterator(corpus.batches(), trainer(config.method, config.vocab_size, config.min_frequency,
                                                            alphabet))
    corpus.check_not_empty()
    finish_learnt(tokenizer, ctx.out_dir)


def bert_vocabulary(tokens: Iterable[str], unused_tokens: int = 100, add_characters: bool = True,
                    required_characters: str = "") -> list[str]:
    """[PAD], [unused0].., [UNK], [CLS], [SEP], [MASK], then `tokens`, then every character of the tokens and of
    `required_characters` that is missing as a word start or as a `##` continuation (without both, a word using it
    would become [UNK]); duplicates dropped, first occurrence kept."""
    head = [SPECIAL_TOKENS[0], *map(placeholder_token, range(unused_tokens)), *SPECIAL_TOKENS[1:]]
    vocab = list(dict.fromkeys([*head, *tokens]))
    if not add_characters:
        return vocab
    present = set(vocab)
    chars = sorted({c for token in vocab[len(head):] for c in token.removeprefix("##")} | set(required_characters))
    vocab += [t for c in chars for t in (c, "##" + c) if t not in present]
    return vocab


def _required_characters(config: VocabConfig, characters: str = "") -> str:
    """Printable ASCII, the script's punctuation and `characters`, as the tokenizer normalizes them (lowercased when
    it lowercases)."""
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=config.strip_accents, lowercase=config.lowercase)
    text = normalizer.normalize_str("".join(map(chr, range(0x21, 0x7F))) + config.script_punctuation + characters)
    return "".join(c for c in text if not c.isspace())


def sentencepiece_to_wordpiece(pieces: Iterable[str]) -> list[str]:
    """sent2wordpiece's rules: drop <unk>, <s>, </s>; a piece starting with ▁ loses it (a word start), every other
    piece gets ## (a continuation); the bare ▁ piece, empty once converted, is dropped."""
    tokens = []
    for piece in pieces:
        if piece in SENTENCEPIECE_CONTROL:
            continue
        token = piece[len(WORD_START):] if piece.startswith(WORD_START) else "##" + piece
        if token:
            tokens.append(token)
    return tokens


class _CorpusSentences:
    """The dedup stage's sentences (non-blank lines), read ~1 MiB at a time, checked to be UTF-8, with a progress
    bar; counts them and keeps the first SAMPLE_SENTENCES for the quality figures."""

    def __init__(self, parts: list[Path], quiet: bool, label: str = "vocab: read"):
        self.parts, self.quiet, self.label = parts, quiet, label
        self.sentences = self.too_long = 0
        self.sample: list[str] = []
        self.characters = ""  # characters the vocabulary must hold besides those of its pieces

    def batches(self) -> Iterator[list[str]]:
        """The sentences in batches; a whole pass leaves the counts of what it read."""
        self.sentences = self.too_long = 0
        self.sample = []
        with progress(sum(p.stat().st_size for p in self.parts), self.label, "B", quiet=self.quiet) as bar:
            for path in self.parts:
                line_no = 0
                with open(path, "rb") as f:
                    while lines := f.readlines(CHUNK_BYTES):
                        data = b"".join(lines)
                        try:
                            text = data.decode("utf-8")
                        except UnicodeDecodeError as e:
                            raise not_utf8(path, data, e, line_no + 1) from None
                        line_no += len(lines)
                        bar.update(len(data))
                        # BERT's normalizer drops NUL; sentencepiece cannot have a rule for it (a C string's end)
                        sentences = [s for s in text.replace("\x00", "").split("\n") if s and not s.isspace()]
                        self._count(sentences)
                        yield sentences

    def at_most(self) -> int:
        """A bound on the sentences a pass yields, found without decoding the files."""
        return _lines(self.parts)

    def _count(self, lines: list[str]) -> None:
        self.sentences += len(lines)
        limit = SENTENCEPIECE_MAX_SENTENCE_BYTES
        self.too_long += sum(1 for line in lines if len(line) > limit // 4 and len(line.encode()) > limit)
        if len(self.sample) < SAMPLE_SENTENCES:
            self.sample += lines[:SAMPLE_SENTENCES - len(self.sample)]

    def held_out(self) -> set[str]:
        """The sentences the quality figures are measured on (so far: the first batches fill the sample)."""
        return set(self.sample)

    def check_not_empty(self) -> None:
        if self.sentences == 0:
            raise DataError(f"{self.parts[0].parent}: no text to train a vocabulary on (all parts are empty)")


class _MixedSentences(_CorpusSentences):
    """The sentences of several languages (each one's dedup output) sampled by size^alpha (module docstring): a first
    pass measures each language, `batches()` yields the sample, the same every time."""

    def __init__(self, config: VocabConfig, ctx: StageContext):
        self.dirs = ctx.by_language("dedup")
        filters = ctx.config_by_language("filter")
        self.chars_per_word = {lang: recorded_chars_per_word(filters.get(lang)) for lang in self.dirs}
        self.seed = config.seed
        super().__init__([part for d in self.dirs.values() for part in list_parts(d, ".txt")], ctx.quiet)
        self.measured = {lang: self._measure(lang, config.character_coverage) for lang in self.dirs}
        words = {lang: m["words"] for lang, m in self.measured.items()}
        self.shares = language_shares(words, config.alpha)
        self.rates = rates(words, self.shares, max(words.values()))
        self.characters = "".join(sorted({c for m in self.measured.values() for c in m["characters"]}))
        ctx.log.info("vocab: sample of %s", ", ".join(f"{lang} {self.shares[lang]:.1%} (x{self.rates[lang]:.3g})"
                                                      for lang in self.dirs))

    def _measure(self, lang: str, coverage: float) -> dict:
        """Sentences, words and the characters that make `coverage` of the text of a language, with its first
        SAMPLE_SENTENCES sentences."""
        reader = _CorpusSentences(list_parts(self.dirs[lang], ".txt"), self.quiet, f"vocab: measure {lang}")
        code_counts = np.zeros(0x110000, dtype=np.int64)
        words = 0.0
        for batch in reader.batches():
            text = "\n".join(batch)
            code_counts += np.bincount(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32), minlength=0x110000)
            words += len(text.split()) if self.chars_per_word[lang] is None else count_words(text, self.chars_per_word[lang])
        code_counts[[ord(c) for c in " \t\n\r\x0b\x0c"]] = 0
        order = np.argsort(-code_counts, kind="stable")
        covered = np.cumsum(code_counts[order])
        needed = int(np.searchsorted(covered, coverage * covered[-1])) + 1 if covered[-1] else 0
        return {"sentences": reader.sentences, "words": words, "sample": reader.sample,
                "characters": "".join(chr(int(code)) for code in order[:needed])}

    def held_out(self) -> set[str]:
        return {sentence for m in self.measured.values() for sentence in m["sample"]}

    def batches(self) -> Iterator[list[str]]:
        self.sentences = self.too_long = 0
        for lang, directory in self.dirs.items():
            rng = np.random.default_rng([self.seed, *lang.encode("utf-8")])
            whole, fraction = divmod(self.rates[lang], 1.0)
            for batch in _CorpusSentences(list_parts(directory, ".txt"), self.quiet, f"vocab: read {lang}").batches():
                copies = int(whole) + (rng.random(len(batch)) < fraction)
                sampled = [sentence for sentence, n in zip(batch, copies) for _ in range(n)]
                self._count(sampled)
                yield sampled

    def at_most(self) -> int:
        return sum(m["sentences"] * int(np.ceil(self.rates[lang])) for lang, m in self.measured.items())

    def counts(self, tokenizer, unk_id: int) -> dict[str, dict]:
        """Each language's sentences and words, its share of the sample and rate, the [UNK] rate and tokens per word
        of its first SAMPLE_SENTENCES sentences, and the characters its coverage needed."""
        counts = {}
        for lang, m in self.measured.items():
            unks, tokens, words = _sample_quality(tokenizer, unk_id, m["sample"], self.chars_per_word[lang])
            unk_rate, tokens_per_word = _rates(unks, tokens, words)
            counts[lang] = {"sentences": m["sentences"], "words": round(m["words"]),
                            "sample_share": round(self.shares[lang], 6), "rate": round(self.rates[lang], 6),
                            "sample_unk_rate": unk_rate, "sample_tokens_per_word": tokens_per_word,
                            "sample_unks": unks, "sample_tokens": tokens, "sample_words": round(words, 2),
                            "coverage_characters": len(m["characters"])}
        return counts


# --- sentencepiece -------------------------------------------------------------------------------------------------

def _train_sentencepiece(config: VocabConfig, corpus: _CorpusSentences, ctx: StageContext) -> list[str]:
    failure: list[BaseException] = []

    def sentences() -> Iterator[str]:
        # sentencepiece turns an exception raised here into a RuntimeError; keep the original to re-raise
        try:
            yield from _training_sentences(config, corpus)
        except BaseException as e:
            failure.append(e)
            raise

    model = io.BytesIO()
    spm.set_random_generator_seed(config.seed)
    ctx.log.info("vocab: training sentencepiece BPE, %d pieces", config.vocab_size)
    rules = ctx.scratch() / "bert_basic_tokenization.tsv"  # the runner removes it, also after a kill
    rules.write_text(bert_normalization_rules(config.lowercase, config.strip_accents), encoding="utf-8")
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(), model_writer=model, model_type="bpe", vocab_size=config.vocab_size,
            character_coverage=config.character_coverage, input_sentence_size=0, normalization_rule_tsv=str(rules),
            max_sentence_length=SENTENCEPIECE_MAX_SENTENCE_BYTES, num_threads=ctx.workers, minloglevel=2)
    except RuntimeError as e:
        if failure:
            raise failure[0] from None
        corpus.check_not_empty()
        raise _sentencepiece_error(e, config, corpus.parts[0].parent) from None
    if corpus.too_long:
        ctx.log.warning("vocab: sentencepiece skipped %d sentences longer than %d bytes (is sentence splitting "
                        "working for this language?)", corpus.too_long, SENTENCEPIECE_MAX_SENTENCE_BYTES)
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return sentencepiece_to_wordpiece(processor.id_to_piece(list(range(processor.get_piece_size()))))


def _training_sentences(config: VocabConfig, corpus: _CorpusSentences) -> Iterator[str]:
    """The corpus's sentences, or at most `input_sentence_size` of them: the first ones, or (shuffle_input_sentence)
    each with probability input_sentence_size / sentences, drawn by a generator seeded by `seed` (a first pass
    counts the sentences where the files' lines may be more than the cap)."""
    cap, rate = config.input_sentence_size, 1.0
    if cap and config.shuffle_input_sentence and corpus.at_most() > cap:
        for _ in corpus.batches():  # counts them
            pass
        rate = min(1.0, cap / corpus.sentences)
    rng = np.random.default_rng(config.seed)
    given = 0
    for batch in corpus.batches():  # read to the end even once `cap` are given: the counts are of every sentence
        if rate < 1.0:
            batch = [sentence for sentence, draw in zip(batch, rng.random(len(batch))) if draw < rate]
        if cap:
            batch = batch[:max(0, cap - given)]
        given += len(batch)
        yield from batch


def _lines(parts: list[Path]) -> int:
    """At least the lines of the files (so their sentences, the non-blank lines), counted without decoding."""
    lines = 0
    for path in parts:
        with open(path, "rb") as f:
            lines += 1 + sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(CHUNK_BYTES), b""))
    return lines


def _sentencepiece_error(error: RuntimeError, config: VocabConfig, corpus_dir: Path) -> DataError:
    message = str(error)
    if m := re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message):
        return DataError(
            f"{corpus_dir}: the corpus supports at most {m[2]} sentencepiece pieces, vocab.vocab_size is {m[1]}: "
            f"use a smaller vocabulary (e.g. --set vocab.vocab_size={_round_down(int(m[2]))}) or more text")
    if m := re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message):
        return DataError(
            f"{corpus_dir}: vocab.vocab_size {m[1]} is too small: covering {config.character_coverage} of the "
            f"characters takes {m[2]} pieces; raise vocab.vocab_size or lower vocab.character_coverage")
    if "sentences_.empty()" in message:
        return DataError(f"{corpus_dir}: every sentence is longer than {SENTENCEPIECE_MAX_SENTENCE_BYTES} bytes, "
                             "which sentencepiece skips (is sentence splitting working for this language?)")
    return DataError(f"{corpus_dir}: sentencepiece training failed ({first_line(error)})")


def _round_down(n: int) -> int:
    """A round vocabulary size at most n (for a suggestion): 23461 -> 23000, 431 -> 430."""
    step = 10 ** max(0, len(str(n)) - 2)
    return max(1, n // step * step)


def bert_normalization_rules(lowercase: bool, strip_accents: bool) -> str:
    """sentencepiece normalization rules (TSV: source code point, tab, target code points, in hex) that do to each
    character what BertNormalizer and BertPreTokenizer do: control and format characters removed, whitespace to a
    space, punctuation and CJK characters set apart by spaces (so that no piece crosses a BERT word boundary),
    then the optional accent stripping (NFD, combining marks dropped) and lowercasing. sentencepiece applies them
    in C++ while it reads the sentences, at no measurable cost (the same in Python was a large share of training time).
    Outside the CJK blocks, only planes 0, 1 and 14 hold characters that these rules change."""
    cjk = set(np.flatnonzero(character_flags() & BERT_CJK).tolist())
    rules = [f"{code:X}\t20 {code:X} 20\n" for code in sorted(cjk)]
    for code in itertools.chain(range(1, 0x20000), range(0xE0000, 0xE1000)):
        if code == 0x0A or code in cjk:  # "\n" never reaches sentencepiece
            continue
        char = chr(code)
        category = unicodedata.category(char)
        if category in ("Cn", "Cs") or (category[0] == "L" and not lowercase and not strip_accents):
            continue
        if char in "\t\r" or category in ("Zs", "Zl", "Zp"):
            target = " "
        elif code == 0xFFFD or category[0] == "C":
            target = ""
        elif category[0] == "P" or (code < 128 and not char.isalnum()):
            target = f" {char} "
        else:
            target = char
            if strip_accents:
                target = "".join(c for c in unicodedata.normalize("NFD", target) if unicodedata.category(c) != "Mn")
            if lowercase:
                target = target.lower()
        if target != char:
            rules.append(f"{code:X}\t{' '.join(f'{ord(c):X}' for c in target)}\n")
    return "".join(rules)


# --- tokenizers ----------------------------------------------------------------------------------------------------

def _train_tokenizers(config: VocabConfig, corpus: _CorpusSentences, ctx: StageContext) -> list[str]:
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=config.strip_accents, lowercase=config.lowercase)
    code_counts = np.zeros(0x110000, dtype=np.int64)
    for batch in corpus.batches():  # also checks UTF-8, which the Rust reader reports without a file name
        code_counts += np.bincount(np.frombuffer("".join(batch).encode("utf-32-le"), dtype=np.uint32),
                                   minlength=0x110000)
    corpus.check_not_empty()
    raw_counts = {chr(code): int(code_counts[code]) for code in np.flatnonzero(code_counts)}
    alphabet = _alphabet(raw_counts, normalizer, config.limit_alphabet)
    head = bert_vocabulary([], config.unused_tokens, add_characters=False)
    # Registering every "##c" up front gives it a fixed id; the trainer would otherwise create them in hash-map
    # order, and ids break ties between equally frequent merges. The alphabet is fixed for the same reason
    # (its own cut at limit_alphabet sorts ties unstably).
    trainer = trainers.WordPieceTrainer(
        vocab_size=config.vocab_size, min_frequency=config.min_frequency, show_progress=False,
        special_tokens=head + ["##" + c for c in alphabet], initial_alphabet=alphabet,
        limit_alphabet=len(alphabet), continuing_subword_prefix="##")
    if len(head) + 2 * len(alphabet) >= config.vocab_size:
        raise DataError(
            f"{corpus.parts[0].parent}: vocab.vocab_size {config.vocab_size} leaves no room for merges: the special "
            f"tokens and the {len(alphabet)} characters (each also as ##) take {len(head) + 2 * len(alphabet)}; "
            "raise vocab.vocab_size or lower vocab.limit_alphabet")
    # the pipeline's own tokenizer (normalizer, pre-tokenizer) with a placeholder vocabulary, retrained
    tokenizer = wordpiece_tokenizer({token: i for i, token in enumerate(head)}, lowercase=config.lowercase,
                                    strip_accents=config.strip_accents)
    ctx.log.info("vocab: training tokenizers WordPiece, %d tokens", config.vocab_size)
    if isinstance(corpus, _MixedSentences):  # the sample, not the files
        tokenizer.train_from_iterator(corpus.batches(), trainer)
    else:
        tokenizer.train([str(p) for p in corpus.parts], trainer)
    trained = tokenizer.get_vocab()
    if len(trained) < config.vocab_size:
        raise DataError(
            f"{corpus.parts[0].parent}: the corpus supports only {len(trained)} WordPiece tokens with "
            f"min_frequency {config.min_frequency}, vocab.vocab_size is {config.vocab_size}: use a smaller "
            f"vocabulary (e.g. --set vocab.vocab_size={_round_down(len(trained))}) or more text")
    return sorted(trained, key=trained.get)[len(head):]


def _alphabet(raw_counts: dict[str, int], normalizer, limit: int) -> list[str]:
    """The `limit` most frequent characters after normalization (ties by code point), as the trainer counts them."""
    counts: collections.Counter[str] = collections.Counter()
    for raw, n in raw_counts.items():
        for char in normalizer.normalize_str(raw):
            if not char.isspace():
                counts[char] += n
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return sorted(char for char, _ in ranked[:limit])


# --- quality figures -----------------------------------------------------------------------------------------------

_BERT_TEXT = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                        lowercase=False)
_BERT_WORDS = pre_tokenizers.BertPreTokenizer()


def _sample_quality(tokenizer, unk_id: int, sample: list[str], chars_per_word: float | None
                    ) -> tuple[int, int, float]:
    """[UNK]s, tokens and words of the first sentences of the corpus: words as BERT splits them, punctuation
    included, whatever the tokenizer (a Unigram or BPE tokenizer's own words keep punctuation on them, which would
    make its tokens per word incomparable), or, where the filter counted words of unspaced scripts
    (`chars_per_word`, from its config), as the filter counted them (BERT makes each Han character a word)."""
    encodings = tokenizer.encode_batch(sample, add_special_tokens=False)
    tokens = sum(len(e.ids) for e in encodings)
    words = (sum(len(_BERT_WORDS.pre_tokenize_str(_BERT_TEXT.normalize_str(s))) for s in sample)
             if chars_per_word is None else sum(count_words(s, chars_per_word) for s in sample))
    unks = sum(e.ids.count(unk_id) for e in encodings)
    return unks, tokens, words


def _rates(unks: int, tokens: int, words: float) -> tuple[float, float]:
    """The [UNK] share of the tokens and the tokens per word."""
    return round(unks / max(tokens, 1), 5), round(tokens / max(words, 1), 4)


STAGE = Stage("vocab", VocabConfig, run, inputs=("dedup", "filter"), tools=("sentencepiece", "tokenizers"),
              sources=lambda config: fingerprints(config.tokenizer))
