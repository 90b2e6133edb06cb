"""Tokenizers besides the vocab stage's learnt WordPiece: one adopted with `--tokenizer` (a Hugging Face tokenizer
folder, a tokenizer.json, a SentencePiece Unigram .model or a vocab.txt) and the Unigram (SentencePiece's, as XLM-R
and mmBERT use) and byte-level BPE (ModernBERT's) tokenizers that `vocab.method` learns; each written as a tokenizer
directory that transformers' AutoTokenizer loads: tokenizer.json, tokenizer_config.json, special_tokens_map.json, and
vocab.txt (every token, added ones included, one a line by id: what the rest of the pipeline and pretraining index).

A tokenizer's special tokens are known by their role (wiki2bert_core/wordpiece.py): from a folder's
special_tokens_map.json, else by their spelling, BERT's (`[CLS]`) or RoBERTa's (`<s>`). One without a token for a
role, or whose lowercasing disagrees with `vocab.lowercase`, is refused with one line naming what does not fit.
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from wiki2bert_core.errors import ConfigError, DataError, first_line
from wiki2bert_core.files import atomic_write, sha256_file, write_json
from wiki2bert_core.wordpiece import (ROBERTA_SPECIAL_TOKENS, SPECIAL_TOKENS, SPECIAL_TOKENS_FILE, SPECIAL_TOKENS_MAP,
                                      names_by_spelling, read_vocab, special_token_names, transformers_name,
                                      wordpiece_tokenizer, write_tokenizer_files)

KINDS = {models.WordPiece: "wordpiece", models.Unigram: "unigram", models.BPE: "bpe"}
# the special tokens of a learnt Unigram or BPE tokenizer, in XLM-R's order (<s> 0, <pad> 1, </s> 2, <unk> 3), <mask> 4
LEARNT_SPECIAL = [ROBERTA_SPECIAL_TOKENS[role] for role in ("[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]")]
_SENTENCEPIECE_UNIGRAM = 1  # ModelProto.TrainerSpec.model_type


def tokenizer_kind(tokenizer: Tokenizer, where: Path | str) -> str:
    """wordpiece, unigram or bpe; DataError naming `where` for another model (WordLevel)."""
    kind = KINDS.get(type(tokenizer.model))
    if kind is None:
        raise DataError(f"{where}: a {type(tokenizer.model).__name__} tokenizer; wordpiece, unigram or bpe "
                        "tokenizers only")
    return kind


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases (BertNormalizer's flag, or a Lowercase step)."""
    def walk(normalizer) -> bool:
        if isinstance(normalizer, normalizers.Sequence):
            return any(walk(child) for child in normalizer)
        return isinstance(normalizer, normalizers.Lowercase) or \
            (isinstance(normalizer, normalizers.BertNormalizer) and normalizer.lowercase)
    return walk(tokenizer.normalizer)


def source_files(source: Path) -> list[Path]:
    """The files of a --tokenizer source that make the tokenizer (their sha256 goes into the vocab stage's
    manifest: a changed tokenizer runs vocab and what follows again)."""
    source = Path(source)
    if not source.is_dir():
        return [source]
    return [source / name for name in ("tokenizer.json", "vocab.txt", SPECIAL_TOKENS_FILE, "tokenizer_config.json")
            if (source / name).is_file()] + sorted(source.glob("*.model"))


def fingerprints(source: str | None) -> dict:
    """{tokenizer:<file>: {path, sha256}} of a --tokenizer source (the stage's run says what is wrong with one that
    cannot be read)."""
    if source is None:
        return {}
    try:
        return {f"tokenizer:{path.name}": {"path": str(path), "sha256": sha256_file(path)}
                for path in source_files(Path(source))}
    except OSError as e:
        return {"tokenizer": f"{source}: {first_line(e)}"}


def adopt(source: Path, out_dir: Path, lowercase: bool | None, strip_accents: bool,
          flag: str = "--tokenizer") -> tuple[Tokenizer, str]:
    """Write the tokenizer `source` (given by `flag`) as a tokenizer directory `out_dir`; returns it and its kind.
    DataError naming `source` for one that cannot be read, ConfigError for one that does not fit (another tokenizer,
    or vocab.lowercase, fixes it). `lowercase` None: whatever the tokenizer does (a vocab.txt: cased)."""
    source = Path(source)
    where = f"{flag} {source}"
    if not source.exists():
        raise ConfigError(f"{where}: does not exist")
    folder = source if source.is_dir() else None
    files = source_files(source)
    json_file = next((f for f in files if f.name == "tokenizer.json" or (folder is None and f.suffix == ".json")), None)
    model_file = next((f for f in files if f.suffix == ".model"), None)
    vocab_file = next((f for f in files if f.suffix == ".txt"), None)
    if json_file is not None:
        tokenizer = _load(json_file, where)
    elif model_file is not None:
        tokenizer = _from_sentencepiece(model_file, where)
    elif vocab_file is not None:
        vocab = read_vocab(vocab_file)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "vocab.txt").write_bytes(vocab_file.read_bytes())
        write_tokenizer_files(out_dir, vocab, lowercase=bool(lowercase), strip_accents=strip_accents)
        return wordpiece_tokenizer(vocab, bool(lowercase), strip_accents), "wordpiece"
    else:
        raise ConfigError(f"{where}: no tokenizer.json, SentencePiece .model or vocab.txt in it")
    kind = tokenizer_kind(tokenizer, where)
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    names = special_token_names(folder) if folder is not None and (folder / SPECIAL_TOKENS_FILE).is_file() \
        else names_by_spelling(vocab)
    missing = [f"{transformers_name(role)} ({_spellings(role, names)})" for role in SPECIAL_TOKENS
               if names.get(role) not in vocab]
    if missing:
        raise ConfigError(f"{where}: no {', no '.join(missing)} in its vocabulary")
    if lowercase is not None and lowercases(tokenizer) != lowercase:
        raise ConfigError(f"{where}: {'lowercases' if lowercases(tokenizer) else 'keeps the case of'} the text, but "
                          f"vocab.lowercase is {str(lowercase).lower()}; "
                          f"set vocab.lowercase={str(not lowercase).lower()}")
    write_tokenizer_dir(out_dir, tokenizer, names, folder)
    return tokenizer, kind


def _spellings(role: str, names: dict[str, str]) -> str:
    return names[role] if role in names else f"{role} or {ROBERTA_SPECIAL_TOKENS[role]}"


def _load(path: Path, where: str) -> Tokenizer:
    """The tokenizer.json `path` without the padding and truncation it may be saved with (sentence-transformers
    models' pad and cut every encoding to 128 or 256 tokens): the pipeline encodes each sentence whole and unpadded."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises plain Exceptions
        raise DataError(f"{where}: cannot load {path.name} ({first_line(e)})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _from_sentencepiece(path: Path, where: str) -> Tokenizer:
    """A SentencePiece Unigram model as a `tokenizers` Unigram tokenizer: its pieces and scores, its normalization
    (the precompiled character map, runs of spaces as one), its word-start marker ▁."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # protobuf's DecodeError
        raise DataError(f"{where}: not a SentencePiece model ({first_line(e)})") from None
    if proto.trainer_spec.model_type != _SENTENCEPIECE_UNIGRAM:
        raise DataError(f"{where}: a SentencePiece model of type {proto.trainer_spec.model_type}; give a Unigram "
                        "model, or the tokenizer.json of a BPE one")
    tokenizer = Tokenizer(models.Unigram([(p.piece, p.score) for p in proto.pieces], unk_id=proto.trainer_spec.unk_id,
                                         byte_fallback=proto.trainer_spec.byte_fallback))
    steps = [normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)] \
        if proto.normalizer_spec.precompiled_charsmap else []
    tokenizer.normalizer = normalizers.Sequence(steps + [normalizers.Replace(Regex(" {2,}"), " ")])
    prepend = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=prepend)
    tokenizer.decoder = decoders.Metaspace(prepend_scheme=prepend)
    control = [p.piece for p in proto.pieces if p.type in (2, 3, 4)]  # UNKNOWN, CONTROL and USER_DEFINED pieces
    tokenizer.add_special_tokens(control)
    names = names_by_spelling(tokenizer.get_vocab(with_added_tokens=True))
    if "[CLS]" in names and "[SEP]" in names:
        _add_post_processor(tokenizer, names)
    return tokenizer


def _add_post_processor(tokenizer: Tokenizer, names: dict[str, str]) -> None:
    """`<s> A </s>` and `<s> A </s> </s> B </s>` (RoBERTa's pairs), with the tokenizer's own spellings."""
    cls, sep = names["[CLS]"], names["[SEP]"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))])


def write_tokenizer_dir(out_dir: Path, tokenizer: Tokenizer, names: dict[str, str], folder: Path | None = None,
                        model_max_length: int = 512) -> None:
    """tokenizer.json, special_tokens_map.json (`names`: role -> token), tokenizer_config.json (that of `folder`, an
    adopted Hugging Face folder, when it has one) and vocab.txt into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    special = {name: names[role] for name, role in SPECIAL_TOKENS_MAP.items()}
    if names["[CLS]"] != "[CLS]":  # RoBERTa's names the sequence's ends as bos and eos too
        special |= {"bos_token": names["[CLS]"], "eos_token": names["[SEP]"]}
    write_json(out_dir / SPECIAL_TOKENS_FILE, special)
    if folder is not None and (folder / "tokenizer_config.json").is_file():
        (out_dir / "tokenizer_config.json").write_bytes((folder / "tokenizer_config.json").read_bytes())
    else:
        write_json(out_dir / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
            "clean_up_tokenization_spaces": False, **special})
    write_vocab_file(out_dir, tokenizer)


def write_vocab_file(out_dir: Path, tokenizer: Tokenizer) -> None:
    """vocab.txt into `out_dir`: every token of the tokenizer, added ones included, one a line by id."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokens = [tokenizer.id_to_token(i) for i in range(size)]
    if None in tokens:
        raise DataError(f"{out_dir / 'tokenizer.json'}: no token has id {tokens.index(None)}: ids must run from 0 "
                        f"to {size - 1}")
    with atomic_write(out_dir / "vocab.txt") as f:
        f.write("".join(token + "\n" for token in tokens))
    vocab = read_vocab(out_dir / "vocab.txt")
    if len(vocab) != size:
        raise DataError(f"{out_dir / 'vocab.txt'}: a token contains a line break")


def learnt_tokenizer(method: str, lowercase: bool, strip_accents: bool) -> Tokenizer:
    """The untrained tokenizer of `vocab.method` unigram (SentencePiece's: NFKC, whitespace runs as one space,
    Metaspace ▁) or bpe (byte-level, as RoBERTa's and ModernBERT's: NFC, a space before the first word so that
    every word starts with Ġ)."""
    steps = [normalizers.NFKC() if method == "unigram" else normalizers.NFC()]
    if strip_accents:
        steps += [normalizers.NFD(), normalizers.StripAccents(), normalizers.NFC()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if method == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        steps += [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
    else:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
    tokenizer.normalizer = normalizers.Sequence(steps)
    return tokenizer


def trainer(method: str, vocab_size: int, min_frequency: int, alphabet: list[str]):
    """The `tokenizers` trainer of `vocab.method` unigram or bpe, the special tokens first (LEARNT_SPECIAL)."""
    if method == "unigram":
        return trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=LEARNT_SPECIAL, unk_token="<unk>",
                                       initial_alphabet=alphabet, show_progress=False)
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=LEARNT_SPECIAL,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def finish_learnt(tokenizer: Tokenizer, out_dir: Path) -> None:
    """A trained Unigram or BPE tokenizer, with its post-processor, written as a tokenizer directory."""
    names = {role: ROBERTA_SPECIAL_TOKENS[role] for role in SPECIAL_TOKENS}
    _add_post_processor(tokenizer, names)
    write_tokenizer_dir(out_dir, tokenizer, names)
