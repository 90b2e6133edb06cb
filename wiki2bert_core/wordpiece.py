"""A WordPiece vocabulary file and the HF `tokenizers` tokenizer that matches BERT's own tokenization; the special
tokens and word pieces of a tokenizer directory of any kind.

Used by the `vocab` stage (to write tokenizer.json) and the `hdf5` stage (to encode text); special-token
ids always come from the vocabulary file, never from constants (Google's [UNK] is 100, TurkuNLP's 101).

Every tokenizer directory (the vocab stage's, a variant's) holds a vocab.txt: its tokens, added ones included, one a
line by id. A Unigram or byte-level BPE tokenizer (`tokenizer.json`) names its special tokens in
special_tokens_map.json (`<s>`, `</s>`, `<mask>`, ...); they are known here by their role, spelled as BERT's token
plays it (`[CLS]` is the role of XLM-R's `<s>`): the keys of special_token_ids, of variant.json's
special_token_ids and of the masking's ids.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import re
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from wiki2bert_core.errors import DataError, first_line
from wiki2bert_core.files import atomic_write, write_json

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# what write_tokenizer_dir writes: a directory with these files is a self-contained tokenizer
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# transformers' names of the special tokens (special_tokens_map.json, tokenizer_config.json)
SPECIAL_TOKENS_MAP = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                      "mask_token": "[MASK]"}
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
# the roles' spelling in RoBERTa's and XLM-R's tokenizers (and those the vocab stage learns by unigram or bpe)
ROBERTA_SPECIAL_TOKENS = {"[PAD]": "<pad>", "[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>", "[MASK]": "<mask>"}
# what a role falls back to in a special_tokens_map.json that leaves it out (RoBERTa's names both)
_FALLBACK_NAMES = {"cls_token": "bos_token", "sep_token": "eos_token"}


@contextlib.contextmanager
def one_tokenizer_thread():
    """One core per worker process: --workers decides the parallelism (tokenizers reads this variable at each call)."""
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous


_PLACEHOLDER = re.compile(r"\[unused\d+\]")


def placeholder_token(i: int) -> str:
    """The i-th `[unusedN]` placeholder of a BERT vocabulary (Google's and ours): room for tokens added later, e.g.
    when fine-tuning; no text is tokenized to it."""
    return f"[unused{i}]"


def is_placeholder(token: str) -> bool:
    return _PLACEHOLDER.fullmatch(token) is not None


_SPECIAL_IN_TEXT = re.compile(r"\[(%s)\]" % "|".join(t[1:-1] for t in SPECIAL_TOKENS))


def neutralize_special_tokens(text: str) -> str:
    """Text with each literal special token ("[MASK]") spaced out ("[ MASK ]"). BERT's tokenization splits at
    punctuation, so our data tokenizer gives both spellings the same pieces ("[", "mask", "]"); transformers'
    tokenizers, which match special tokens in the text before anything else, then give those pieces too instead of
    the special token: training and inference read the text alike."""
    return _SPECIAL_IN_TEXT.sub(r"[ \1 ]", text)


def read_vocab(path: Path) -> dict[str, int]:
    r"""token -> id from a vocab.txt: one token per line, id = line number, as BERT tokenizers read it. Lines end at
    "\n" (or "\r\n") only: other Unicode line separators (U+2028, U+0085, \x1c, ...) are part of a token, which
    str.splitlines() would break in two, shifting every later id. Where the two BERT readers disagree (a lone "\r":
    transformers' load_vocab ends the line there, HF tokenizers' WordPiece.read_file does not; trailing whitespace:
    load_vocab keeps it, read_file strips it), the file is refused, as are empty and repeated tokens."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 (byte {e.start})") from None
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's "\n"
        lines.pop()
    vocab: dict[str, int] = {}
    for line_no, token in enumerate(lines):
        token = token.removesuffix("\r")
        where = f"{path}: line {line_no + 1}"
        if not token:
            raise DataError(f"{where}: empty token")
        if "\r" in token:
            raise DataError(f"{where}: {token!r} holds a carriage return, which BERT tokenizers read differently "
                            f"(one token or two)")
        # Unicode White_Space (str.isspace() but for \x1c-\x1f): what read_file's trim_end strips
        if token[-1].isspace() and token[-1] not in "\x1c\x1d\x1e\x1f":
            raise DataError(f"{where}: {token!r} ends in whitespace, which BERT tokenizers read differently "
                            f"(kept or stripped)")
        if token in vocab:
            raise DataError(f"{where}: duplicate token {token!r}")
        vocab[token] = line_no
    names = special_token_names(path.parent)
    missing = [names.get(role, transformers_name(role)) for role in SPECIAL_TOKENS if names.get(role) not in vocab]
    if missing:
        raise DataError(f"{path}: special tokens missing from the vocabulary: {', '.join(missing)}")
    return vocab


def transformers_name(role: str) -> str:
    """transformers' name of a role: [MASK] -> mask_token."""
    return next(name for name, token in SPECIAL_TOKENS_MAP.items() if token == role)


def special_token_names(directory: Path) -> dict[str, str]:
    """role -> the token playing it in the tokenizer of `directory`: as its special_tokens_map.json names them
    (transformers' names; cls_token and sep_token default to bos_token and eos_token), BERT's own where it has no
    such file. A role the file leaves out is missing from the result."""
    path = Path(directory) / SPECIAL_TOKENS_FILE
    if not path.is_file():
        return {token: token for token in SPECIAL_TOKENS}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a JSON object of special tokens ({e})") from None
    names = {}
    for name, role in SPECIAL_TOKENS_MAP.items():
        value = record.get(name, record.get(_FALLBACK_NAMES.get(name, name)))
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            names[role] = value
    return names


def names_by_spelling(vocab: dict[str, int]) -> dict[str, str]:
    """role -> BERT's spelling where `vocab` (token -> id) has it, else RoBERTa's where it has that; a role spelled
    neither way is missing from the result."""
    return {role: spelling for role in SPECIAL_TOKENS
            for spelling in [next((s for s in (role, ROBERTA_SPECIAL_TOKENS[role]) if s in vocab), None)] if spelling}


def added_token_ids(directory: Path) -> list[int]:
    """The ids of the added tokens of the tokenizer.json in `directory` ([] without one): tokens matched in the
    text before the model sees it (special ones and those added for a task), never drawn as random replacements."""
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        return []
    try:
        return sorted(int(token["id"]) for token in json.loads(path.read_text(encoding="utf-8"))["added_tokens"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise DataError(f"{path}: cannot read its added tokens ({first_line(e)})") from None


def vocab_difference(path: Path, reference: Path) -> str | None:
    """How the vocab.txt at `path` differs from the one at `reference` in tokens and ids (None if it does not):
    `N tokens against M` or the first line that differs."""
    if Path(path).read_bytes() == Path(reference).read_bytes():
        return None
    tokens, theirs = list(read_vocab(path)), list(read_vocab(reference))
    if tokens == theirs:
        return None
    line = next((i for i, (a, b) in enumerate(zip(tokens, theirs)) if a != b), None)
    return (f"{len(tokens)} tokens against {len(theirs)}" if line is None else
            f"line {line + 1}: {tokens[line]!r} against {theirs[line]!r}")


def padded_vocab_size(n: int, multiple: int = 8) -> int:
    """The model's vocabulary size for a vocabulary of `n` tokens: rounded up to a multiple of 8, so the embedding
    and decoder GEMMs use tensor cores (the vocab stage records it, pretraining builds its model with it)."""
    if n < 1:
        raise ValueError(f"vocabulary size must be positive, got {n}")
    return -(-n // multiple) * multiple


def special_token_ids(vocab: dict[str, int], names: dict[str, str] | None = None) -> dict[str, int]:
    """role -> id, the tokens playing the roles named by `names` (special_token_names; default BERT's own)."""
    return {role: vocab[names[role] if names else role] for role in SPECIAL_TOKENS}


def word_start_marker(tokens) -> str:
    """The marker a word's first piece starts with in a Unigram or BPE vocabulary: `▁` (SentencePiece's Metaspace)
    or `Ġ` (byte-level BPE's space), whichever more of its tokens start with; "" if neither (then, as for
    WordPiece, only `##` pieces continue a word)."""
    counts = {marker: sum(1 for t in tokens if t.startswith(marker)) for marker in ("\u2581", "\u0120")}
    marker = max(counts, key=counts.get)
    return marker if counts[marker] else ""


def wordpiece_tokenizer(vocab: dict[str, int], lowercase: bool = False, strip_accents: bool = False) -> Tokenizer:
    """BERT's BasicTokenizer + WordPiece as a Rust tokenizer; lowercasing and accent stripping are explicit."""
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                           max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=strip_accents, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tokenizer


def load_tokenizer(vocab_dir_or_file: Path, lowercase: bool = False, strip_accents: bool = False) -> Tokenizer:
    """The tokenizer of a `vocab` stage directory (its tokenizer.json), or one built from a bare vocab.txt."""
    path = Path(vocab_dir_or_file)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        try:
            return Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as e:  # the Rust side raises plain Exceptions
            raise DataError(f"{path / 'tokenizer.json'}: cannot load tokenizer ({e})") from None
    vocab_file = path / "vocab.txt" if path.is_dir() else path
    return wordpiece_tokenizer(read_vocab(vocab_file), lowercase=lowercase, strip_accents=strip_accents)


def write_tokenizer_dir(directory: Path, tokens: list[str], lowercase: bool = False, strip_accents: bool = False,
                        model_max_length: int = 512) -> dict[str, int]:
    """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json into `directory`, so that
    both load_tokenizer(directory) and transformers' BertTokenizerFast.from_pretrained(directory) load the same
    tokenizer. Returns the vocabulary (token -> id) read back from the written vocab.txt."""
    directory = Path(directory)
    with atomic_write(directory / "vocab.txt") as f:
        f.write("".join(token + "\n" for token in tokens))
    vocab = read_vocab(directory / "vocab.txt")
    if len(vocab) != len(tokens):
        raise DataError(f"{directory / 'vocab.txt'}: a token contains a line break")
    write_tokenizer_files(directory, vocab, lowercase, strip_accents, model_max_length)
    return vocab


def write_tokenizer_files(directory: Path, vocab: dict[str, int], lowercase: bool = False,
                          strip_accents: bool = False, model_max_length: int = 512) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json for the vocab.txt in `directory`."""
    directory = Path(directory)
    wordpiece_tokenizer(vocab, lowercase=lowercase, strip_accents=strip_accents).save(str(directory / "tokenizer.json"))
    write_json(directory / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "strip_accents": strip_accents,
        "tokenize_chinese_chars": True, "model_max_length": model_max_length, **SPECIAL_TOKENS_MAP})
    write_json(directory / "special_tokens_map.json", SPECIAL_TOKENS_MAP)


def copy_tokenizer_files(source: Path, target: Path) -> list[str]:
    """Copy the tokenizer files `source` has into the directory `target`; returns their names."""
    copied = [name for name in TOKENIZER_FILES if (Path(source) / name).is_file()]
    for name in copied:
        shutil.copyfile(Path(source) / name, Path(target) / name)
    return copied


def tokenizer_from_json(tokenizer_json: str, built: Tokenizer | None = None) -> Tokenizer:
    """The tokenizer of a worker task, which carries it as JSON: built once per process and kept (one at a time);
    `built`, a stage's own tokenizer of that JSON, is kept instead, so that the stage's process and the workers
    forked from it do not build it again."""
    if built is not None or tokenizer_json not in _TOKENIZERS:
        _TOKENIZERS.clear()
        _TOKENIZERS[tokenizer_json] = built or Tokenizer.from_str(tokenizer_json)
    return _TOKENIZERS[tokenizer_json]


_TOKENIZERS: dict[str, Tokenizer] = {}
