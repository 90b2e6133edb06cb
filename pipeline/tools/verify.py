"""`pipeline verify`: check HDF5 pretraining files (NVIDIA's layout) row by row, vectorised, and summarise them.

The vocabulary comes from --vocab, else from the `vocab.txt` of the data directory the file belongs to
(wiki2bert_core/variant_dir.py: the hdf5 stage writes one into each variant directory, with `variant.json`; when
the directory has a `variant.json`, the shapes and the number of masked positions are checked against its
parameters too, and the share of rows labelled random next whose B comes from A's own document is reported as the
hdf5 stage measured it on the instance plan: the rows alone do not say which document a segment came from).

Rows are checked as variant.json's sequence kind says (wiki2bert_core/variant_dir.py): segment-pair, `[CLS] A [SEP] B
[SEP]` with segment ids 0 then 1 (also where there is no variant.json: NVIDIA's), or doc-sentences, `[CLS] sentences
[SEP]` with one [SEP], at the end, segment ids and next-sentence labels all 0.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np

from wiki2bert_core.errors import DataError, first_line
from wiki2bert_core.hdf5_format import (INPUT_IDS, INPUT_MASK, MASKED_LM_IDS, MASKED_LM_POSITIONS, NEXT_SENTENCE_LABELS,
                                       SEGMENT_IDS, SUFFIXES, layout_problems, out_of_range, read_rows,
                                       used_positions)
from wiki2bert_core.utf8_paths import utf8_names
from wiki2bert_core.variant_dir import (DOC_SENTENCES, PARAMS_FILE, SEGMENT_PAIR, VariantParams, data_dir_of, own_vocab,
                                        read_record)
from wiki2bert_core.wordpiece import read_vocab, special_token_ids, special_token_names

BLOCK_CELLS = 1 << 22  # rows are checked in blocks of about this many input_ids cells
# how the values out of range (hdf5_format.out_of_range) are reported; those of input_mask and masked_lm_positions
# fall under the stricter checks of _check_rows (1s then 0s; positions inside the real tokens)
RANGE_PROBLEMS = {INPUT_IDS: "input_ids outside the vocabulary", MASKED_LM_IDS: "masked_lm_ids outside the vocabulary",
                  SEGMENT_IDS: "segment_ids other than 0 and 1",
                  NEXT_SENTENCE_LABELS: "next_sentence_labels other than 0 and 1"}


@dataclasses.dataclass
class Stats:
    """Sums over the rows of one (max_seq_length, max_predictions_per_seq, sequence kind) group of files."""
    files: int = 0
    instances: int = 0
    real_tokens: int = 0
    short: int = 0  # rows with padding
    eligible: int = 0  # real tokens that are not [CLS]/[SEP]
    masked: int = 0
    masked_as_mask: int = 0
    masked_same: int = 0
    masked_other: int = 0
    random_next: int = 0
    random_next_own_document: int = 0  # as variant.json records it: rows labelled random whose B is from A's document
    recorded_instances: int = 0  # rows of the files variant.json has that record for
    full_predictions: int = 0  # rows with max_predictions_per_seq predictions

    def add(self, other: Stats) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass(frozen=True)
class _Vocab:
    size: int
    special: dict[str, int]


@dataclasses.dataclass
class VerifyReport:
    files: list[Path]
    problems: list[str]
    stats: dict[tuple[int, int, str], Stats]  # (max_seq_length, max_predictions_per_seq, sequence kind) -> sums

    @property
    def ok(self) -> bool:
        return bool(self.files) and not self.problems


def verify_path(path: Path, vocab: Path | None = None) -> VerifyReport:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    files = utf8_names(sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())) if path.is_dir() \
        else [path]
    report = VerifyReport(files, [], {})
    if not files:
        report.problems.append(f"{path}: no {'/'.join(SUFFIXES)} files")
    given = (Path(vocab) / "vocab.txt" if Path(vocab).is_dir() else Path(vocab)) if vocab else None
    vocabs, records = {}, {}  # loaded once per path
    for file in files:
        try:
            data_dir = data_dir_of(file)
            vocab_file = given or own_vocab(data_dir)
            if vocab_file is None:
                report.problems.append(f"{file}: no vocab.txt in its data directory ({data_dir}); pass --vocab")
                continue
            if vocab_file not in vocabs:
                vocabs[vocab_file] = _load_vocab(vocab_file)
            if data_dir not in records:
                records[data_dir] = read_record(data_dir)
            record = records[data_dir]
            params = VariantParams.from_dict(record, data_dir / PARAMS_FILE) if record is not None else None
            shape, stats, problems = verify_file(file, vocabs[vocab_file], params)
            if stats is not None:
                _add_recorded(stats, file, data_dir, record)
        except DataError as e:
            report.problems.append(str(e))
            continue
        report.problems.extend(f"{file}: {p}" for p in problems)
        if stats is not None:
            report.stats.setdefault(shape, Stats()).add(stats)
    return report


def verify_file(path: Path, vocab: _Vocab, params: VariantParams | None = None
                ) -> tuple[tuple[int, int, str] | None, Stats | None, list[str]]:
    """((max_seq_length, max_predictions_per_seq, sequence kind), statistics, problems) of one file; `params` are
    those of its variant directory (none: NVIDIA's segment pairs)."""
    try:
        with h5py.File(path, "r") as f:
            problems = _check_layout(f, params)
            if problems:
                return None, None, problems
            n, width = f[INPUT_IDS].shape
            preds = f[MASKED_LM_POSITIONS].shape[1]
            stats, counts = Stats(files=1), {}
            block = max(1, BLOCK_CELLS // max(1, width))
            for start in range(0, n, block):
                arrays = read_rows(f, slice(start, start + block))
                _check_rows(arrays, start, vocab, params, counts, stats)
    except (OSError, KeyError, ValueError, RuntimeError) as e:
        return None, None, [f"cannot read the file ({first_line(e)})"]
    problems = [f"{count:,} row{'s' if count > 1 else ''}: {what} (first: row {first})"
                for what, (count, first) in counts.items()]
    return (width, preds, SEGMENT_PAIR if params is None else params.sequence_kind), stats, problems


def _check_layout(f: h5py.File, params: VariantParams | None) -> list[str]:
    """The layout's problems (hdf5_format.layout_problems), then widths other than variant.json's."""
    problems = layout_problems(f)
    if not problems and params is not None:
        for name, key in ((INPUT_IDS, "max_seq_length"), (MASKED_LM_POSITIONS, "max_predictions_per_seq")):
            if f[name].shape[1] != getattr(params, key):
                problems.append(f"{name}: width {f[name].shape[1]}, but variant.json says {key} {getattr(params, key)}")
    return problems


def _check_rows(a: dict[str, np.ndarray], start: int, vocab: _Vocab, params: VariantParams | None, counts: dict,
                stats: Stats) -> None:
    ids, mask, seg = a[INPUT_IDS].astype(np.int64), a[INPUT_MASK], a[SEGMENT_IDS]
    positions, labels, nsp = a[MASKED_LM_POSITIONS].astype(np.int64), a[MASKED_LM_IDS], a[NEXT_SENTENCE_LABELS]
    n, width = ids.shape
    cls_id, sep_id, mask_id = vocab.special["[CLS]"], vocab.special["[SEP]"], vocab.special["[MASK]"]
    specials = np.array([vocab.special[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")])
    rows = np.arange(n)
    pos = np.arange(width)[None, :]
    paired = params is None or params.sequence_kind == SEGMENT_PAIR

    def bad(what: str, where: np.ndarray) -> None:
        """Count the rows where `where` ([rows] or [rows, cells]) is true, under the message `what`."""
        hits = np.flatnonzero(where.any(axis=1) if where.ndim == 2 else where)
        if len(hits):
            count, first = counts.get(what, (0, start + int(hits[0])))
            counts[what] = (count + len(hits), first)

    length = mask.sum(axis=1, dtype=np.int64)
    real = pos < length[:, None]
    bad("input_mask is not 1s followed by 0s", mask != real)
    if paired:
        bad("fewer than 5 real tokens ([CLS] A [SEP] B [SEP])", length < 5)
    else:
        bad("fewer than 3 real tokens ([CLS] sentences [SEP])", length < 3)
    for found in out_of_range(a, vocab.size, width):
        if found.dataset in RANGE_PROBLEMS:
            bad(RANGE_PROBLEMS[found.dataset], np.isin(rows, found.rows))
    bad("input_ids[0] is not [CLS]", ids[:, 0] != cls_id)
    bad("input_ids not 0 in the padding", (ids != 0) & ~real)
    bad("segment_ids not 0 in the padding", (seg != 0) & ~real)
    is_b = (seg == 1) & real if paired else np.zeros_like(real)
    has_b = is_b.any(axis=1)
    b_start = np.where(has_b, is_b.argmax(axis=1), np.maximum(length, 1))  # without B, A's [SEP] is the last token
    if paired:
        bad("segment_ids not 0s then 1s", is_b[:, :-1] & ~is_b[:, 1:] & real[:, 1:])
        bad("no segment B (segment_ids 1)", ~has_b)
        bad("segment A has no tokens between [CLS] and [SEP]", has_b & (b_start < 3))
        bad("segment B has no tokens before the last [SEP]", has_b & (b_start > length - 2))
    else:
        bad("segment_ids not 0 (doc-sentences: one segment)", (seg != 0) & real)
        bad("next_sentence_labels not 0 (doc-sentences: no next sentence)", nsp != 0)
    last = np.clip(length - 1, 0, width - 1)
    bad("no [SEP] at the end of segment A", has_b & (ids[rows, np.clip(b_start - 1, 0, width - 1)] != sep_id))
    bad("no [SEP] at the last real token", ids[rows, last] != sep_id)

    used = used_positions(positions)  # readers stop at the first unused slot
    k = used.sum(axis=1)
    bad("no masked positions", k == 0)
    bad("masked_lm_positions has a 0 ([CLS]) before a later masked position", used[:, 1:] & ~used[:, :-1])
    bad("masked_lm_ids not 0 after the last masked position", ~used & (labels != 0))
    bad("masked_lm_positions not sorted", (positions[:, 1:] <= positions[:, :-1]) & used[:, 1:] & used[:, :-1])
    bad("masked position outside the real tokens", used & ((positions < 0) | (positions >= length[:, None])))
    bad("masked position on [SEP]", used & ((positions == (b_start - 1)[:, None]) | (positions == last[:, None])))
    bad("masked_lm_ids holds a special token ([PAD]/[CLS]/[SEP]/[MASK])", used & np.isin(labels, specials))

    inside = used & (positions > 0) & (positions < width)
    m_rows, m_slots = np.nonzero(inside)
    m_pos = positions[m_rows, m_slots]
    is_masked = np.zeros((n, width), dtype=bool)
    is_masked[m_rows, m_pos] = True
    structural = (pos == 0) | (pos == (b_start - 1)[:, None]) | (pos == last[:, None])
    bad("special token inside a segment, not at a masked position",
        np.isin(ids, specials) & real & ~structural & ~is_masked)

    if params is not None:
        expected = np.minimum(positions.shape[1],
                              np.maximum(1, np.rint(length * params.masked_lm_prob).astype(np.int64)))
        wrong = k > expected if params.whole_word_masking else k != expected
        bad(f"number of masked positions is not min(max_pred, round(length * {params.masked_lm_prob}))", wrong)

    current, label = ids[m_rows, m_pos], labels[m_rows, m_slots]
    stats.instances += n
    stats.real_tokens += int(length.sum())
    stats.short += int((length < width).sum())
    stats.eligible += int(np.maximum(length - (3 if paired else 2), 0).sum())
    stats.masked += int(k.sum())
    stats.masked_as_mask += int((current == mask_id).sum())
    stats.masked_same += int((current == label).sum())
    stats.masked_other += int(((current != mask_id) & (current != label)).sum())
    stats.random_next += int((nsp == 1).sum())
    stats.full_predictions += int((k == positions.shape[1]).sum())


def _add_recorded(stats: Stats, file: Path, data_dir: Path, record: dict | None) -> None:
    """What the hdf5 stage measured on the instance plan and no row shows: the document each segment came from."""
    recorded = (record or {}).get("random_next_own_document")
    if isinstance(recorded, dict):
        name = file.resolve().relative_to(data_dir.resolve()).as_posix()
        if isinstance(recorded.get(name), int):
            stats.random_next_own_document += recorded[name]
            stats.recorded_instances += stats.instances


def _load_vocab(vocab_file: Path) -> _Vocab:
    vocab = read_vocab(vocab_file)
    return _Vocab(len(vocab), special_token_ids(vocab, special_token_names(Path(vocab_file).parent)))


def format_report(report: VerifyReport) -> str:
    lines = [f"checked {len(report.files):,} file{'s' if len(report.files) != 1 else ''}"]
    for (width, preds, kind), s in sorted(report.stats.items()):
        instances = max(1, s.instances)
        masked = max(1, s.masked)
        lines += [
            f"seq_len {width}, max_pred {preds}{', ' + kind if kind == DOC_SENTENCES else ''}: {s.files:,} "
            f"file{'s' if s.files != 1 else ''}",
            f"  instances            {s.instances:,}",
            f"  mean real length     {s.real_tokens / instances:.1f} of {width}",
            f"  short (padded) rows  {s.short / instances:.3f}",
            f"  masked share         {s.masked / max(1, s.eligible):.4f} of eligible tokens "
            f"({s.full_predictions / instances:.3f} of rows at the cap of {preds})",
            f"  [MASK]/same/random   {s.masked_as_mask / masked:.3f} / {s.masked_same / masked:.3f} / "
            f"{s.masked_other / masked:.3f}",
        ]
        if kind == DOC_SENTENCES:
            lines.append("  sequences            whole sentences of one document; segment ids and NSP labels 0")
        else:
            lines += [
                f"  NSP random next      {s.random_next / instances:.3f}",
                "  random next from A's own document  " + (
                    f"{s.random_next_own_document / s.recorded_instances:.4f} ({s.random_next_own_document:,} "
                    f"rows; from variant.json)" if s.recorded_instances else "unknown (no record in variant.json)"),
            ]
    if report.problems:
        lines.append(f"{len(report.problems)} problem{'s' if len(report.problems) > 1 else ''}:")
        lines += [f"  {p}" for p in report.problems]
    else:
        lines.append("OK: no problems")
    return "\n".join(lines)
