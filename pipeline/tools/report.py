"""`pipeline report`: a one-page HTML report with PNG figures of what a work directory's finished stages made: pages
-> articles -> documents kept (and why the others were dropped: tokens per reason, and a table per source and reason
with examples), duplicates (per source, the cluster sizes, the largest clusters with a sample of their members side
by side), each source's documents and token shares (the Wikipedia dump and the corpora, before and after the shard
stage's weights), sentences and tokens per document, real tokens per instance for each HDF5 variant (the padding
share), masked-LM and NSP statistics (`pipeline verify`) and the vocabulary's coverage of the test split. A variant
of whole document sentences (sequence kind doc-sentences) is labelled so, and has no NSP figures.

It reads only the stages' finished outputs and manifests, and judges them as `pipeline status` does but by the
manifests alone (no --dump/--set/--config: a stage done with other settings still describes the data it made):
a stage whose files are missing or changed since it finished, or whose inputs are, is not current. Its figures are
left out, and the page and the exit code (1) say which and why; so do they for an HDF5 file `pipeline verify`
cannot read."""
from __future__ import annotations

import html
import re
from pathlib import Path

import h5py
import numpy as np

from wiki2bert_core.charts import new_figure, save_png
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write, read_json
from wiki2bert_core.hdf5_format import INPUT_MASK
from wiki2bert_core.variant_dir import DOC_SENTENCES, held_out_split, training_files
from wiki2bert_core.wordpiece import load_tokenizer, read_vocab, special_token_ids, special_token_names
from pipeline.runner import DONE, MANIFEST, StageState, stage_state
from pipeline.funnel import Funnel, language_table, source_table
from pipeline.stages import stage_by_name
from pipeline.text_files import PIECE
from pipeline.tools.verify import format_report, verify_path
from pipeline.words import count_words, recorded_chars_per_word

DOCUMENT_SAMPLE = 20000  # documents whose tokens are counted (the first ones of the corpus vocab and shard read)


def write_report(lang_dir: Path, out_dir: Path) -> tuple[Path, list[str], list[str]]:
    """Writes report.html and its PNGs into `out_dir`; returns the HTML's path and the problems the page names: a
    line for each stage that is not current, and for each HDF5 file `pipeline verify` finds wrong (both empty when
    all it reports on is current). DataError if no stage has finished."""
    lang_dir = Path(lang_dir)
    states = _recorded_states(lang_dir)
    if not states:
        raise DataError(f"{lang_dir}: no finished stages (no */{MANIFEST}); run `pipeline run` first")
    done = {name: st.manifest for name, st in states.items() if st.state == DONE}
    not_current = [f"{lang_dir / name}: {st.state} ({st.reason})" for name, st in states.items() if st.state != DONE]
    damaged: list[str] = []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    headline, sections = [], []
    funnel = Funnel(done)
    if "filter" in done:
        sections.append(_funnel(funnel, lang_dir, out_dir, headline))
        sections.append(_filter_scores(lang_dir, done["filter"], out_dir))
    if "dedup" in done:
        sections.append(_duplicates(lang_dir, out_dir, headline))
    if sources := funnel.source_rows():
        sections.append(_sources(sources, out_dir))
    sections.append(_languages(funnel))
    if "dedup" in done and "vocab" in done:
        sections.append(_documents(lang_dir, out_dir, headline))
    if "hdf5" in done:
        sections += [_variant(d, out_dir, headline, damaged) for d in sorted((lang_dir / "hdf5").iterdir())
                     if d.is_dir()]
    if "shard" in done and "vocab" in done:
        sections.append(_coverage(lang_dir, headline, recorded_chars_per_word((done.get("filter") or {}).get("config"))))
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in headline)
    stale = ("<h2>Not current</h2><p>These stages' files, or their inputs, are missing or changed since they "
             "finished; their figures are left out (<code>pipeline run</code> makes them again):</p><ul>"
             + "".join(f"<li>{html.escape(line)}</li>" for line in not_current) + "</ul>") if not_current else ""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>wiki2bert data report: {lang_dir}</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}img{width:49%}"
            "td{padding:2px 12px}pre{background:#f4f4f4;padding:8px}</style></head><body>"
            f"<h1>Data report: {html.escape(str(lang_dir))}</h1><p>stages done: {', '.join(done) or 'none'}</p>"
            f"{stale}<h2>Headline figures</h2><table>{rows}</table>{''.join(sections)}</body></html>")
    path = out_dir / "report.html"
    with atomic_write(path) as f:
        f.write(page)
    return path, not_current, damaged


def _recorded_states(lang_dir: Path) -> dict[str, StageState]:
    """The state of each stage of `lang_dir` with a manifest, and of the stages they read there (judged by the
    manifests alone)."""
    known: dict[Path, StageState] = {}
    for manifest in sorted(lang_dir.glob(f"*/{MANIFEST}")):
        try:
            stage_by_name(manifest.parent.name)
        except KeyError:  # not a stage's directory
            continue
        stage_state(None, lang_dir, manifest.parent.name, known)
    return {stage_dir.name: state for stage_dir, state in known.items() if stage_dir.parent == lang_dir}


def _img(path: Path) -> str:
    return f"<img src='{html.escape(path.name)}' alt='{html.escape(path.stem)}'>"


def _funnel(funnel: Funnel, lang_dir: Path, out_dir: Path, headline: list) -> str:
    """Documents through the stages (the dump's pages and articles, the corpora's documents, kept by the filter,
    by dedup, in the shards) and the filter's drops: tokens per reason, each bar split by source where the
    manifests count per source."""
    steps = funnel.document_steps()
    chart = _stacked_bars(steps, "Documents through the stages, by source", "documents", out_dir / "funnel.png")
    report = read_json(Path(lang_dir) / "filter" / "report.json")
    per_source = report.get("sources") or {"all sources": report}
    reasons = sorted(report.get("dropped", {}).items(), key=lambda kv: (kv[1].get("tokens", 0),
                                                                         kv[1].get("documents", 0)), reverse=True)
    drops = [(f"{reason} ({d.get('documents', 0):,} doc.)",
              {name: figures.get("dropped", {}).get(reason, {}).get("tokens", 0)
               for name, figures in per_source.items()}, d.get("tokens", 0)) for reason, d in reasons]
    why = _stacked_bars(drops, "Dropped by the filter: tokens per reason", "tokens (documents; lines, by line rules)",
                        out_dir / "dropped.png")
    headline += [(name, f"{total:,}") for name, _, total in steps]
    skipped = ", ".join(f"{k} {v:,}" for k, v in (funnel.total("extract", "skipped") or {}).items())
    skipped = f"<p>dump pages not made articles: {html.escape(skipped)}</p>" if skipped else ""
    return f"<h2>Pages to documents</h2>{skipped}{_img(chart)}{_img(why)}{_drops_table(report)}"


def _filter_scores(lang_dir: Path, manifest: dict, out_dir: Path) -> str:
    """Per rule set, the distribution of each measure a rule of it looks at over its documents (the filter's
    scores), the rule's threshold drawn in: what a changed threshold would keep or drop."""
    from pipeline.stages.filter.rules import RuleSet

    config = manifest.get("config", {})
    scores = sorted((lang_dir / "filter" / "scores").glob("part-*.npz"))
    if not scores or "rule_sets" not in config:  # a filter run before scores were stored
        return ""
    measured: dict[str, dict[str, list[np.ndarray]]] = {}  # rule set -> measure -> values of its documents
    for path in scores:
        with np.load(path) as part:
            for index, source in enumerate(part["sources"]):
                name = config["rules"].get(str(source), config["rules"]["default"])
                mine = part["source"] == index
                for column in part.files:
                    if column.startswith("m:"):
                        measured.setdefault(name, {}).setdefault(column[2:], []).append(part[column][mine])
    figures = []
    for name, columns in measured.items():
        checks = [(reason, measure, above, limit) for reason, measure, above, limit
                  in RuleSet(**config["rule_sets"][name]).checks(config.get("long_documents", "split"), False)
                  if measure in columns and measure != "line_rules"]
        if not checks:
            continue
        import matplotlib.pyplot as plt

        cols = 4
        rows = -(-len(checks) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), dpi=100, squeeze=False)
        fig.suptitle(f"Filter scores, rule set {name}: each rule's measure over the documents, its threshold in red")
        for ax, (reason, measure, above, limit) in zip(axes.flat, checks):
            values = np.concatenate(columns[measure])
            values = values[np.isfinite(values)]
            failing = int((values > limit).sum() if above else (values < limit).sum())
            if len(values):  # the 1% longest tail (15,000-word articles) drawn at the right edge
                values = np.minimum(values, max(np.percentile(values, 99), limit) * 1.1)
            ax.hist(values, bins=40, color="C0")
            ax.axvline(limit, color="red")
            ax.set_title(f"{measure} ({'max' if above else 'min'} {limit:g}: {failing:,} fail)", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(checks):]:
            ax.axis("off")
        figures.append(_img(save_png(fig, out_dir / f"filter_scores_{name}.png")))
    return ("<h2>Filter scores</h2><p>Each rule's measure over the documents of the sources its rule set judges, "
            "its threshold in red and how many documents fail it (a document counts for each rule it fails, "
            "though only its first failing rule is its reason); a changed threshold is decided from these "
            "stored scores without measuring again.</p>" + "".join(figures)) if figures else ""


def _stacked_bars(bars: list[tuple[str, dict[str, int], int]], title: str, xlabel: str, path: Path) -> Path:
    """Horizontal bars (label, value per source, total), the first at the top, each split by source in one colour
    a source; a bar whose sources do not add up to its total (counted before sources were) is one "all sources"
    bar."""
    sources = list(dict.fromkeys(name for _, by, total in bars if sum(by.values()) == total for name in by))
    labels = [label for label, _, _ in bars][::-1]
    fig, ax = new_figure(title)
    left = np.zeros(len(bars))
    for colour, name in enumerate([*sources, "all sources"]):
        values = np.array([by.get(name, 0) if sum(by.values()) == total else total * (name == "all sources")
                           for _, by, total in bars][::-1], dtype=float)
        if values.any():
            ax.barh(labels, values, left=left, color=f"C{colour}", label=name)
            left += values
    if len(sources) > 1:
        ax.set_xlim(0, left.max() * 1.4)  # room for the legend right of the longest bar
        ax.legend(loc="lower right")
    ax.set_xlabel(xlabel)
    return save_png(fig, path)


def _drops_table(report: dict) -> str:
    """The filter's drops per source and reason (documents, sentences, tokens and the share of the source's tokens),
    with examples; sources in report.json order, reasons in the order the filter checks them."""
    rows = []
    for source, figures in report.get("sources", {}).items():
        tokens_in = max(1, figures.get("tokens", {}).get("in", 0))
        for reason, d in figures.get("dropped", {}).items():
            examples = "<br>".join(f"<b>{html.escape(e.get('document', ''))}</b>: {html.escape(e.get('text', ''))}"
                                   for e in d.get("examples", [])[:2])
            rows.append(f"<tr><td>{html.escape(source)} ({html.escape(figures.get('rule_set', ''))})</td>"
                        f"<td>{html.escape(reason)}</td><td>{d['documents']:,}</td><td>{d['sentences']:,}</td>"
                        f"<td>{d['tokens']:,}</td><td>{d['tokens'] / tokens_in:.2%}</td>"
                        f"<td><small>{examples}</small></td></tr>")
    if not rows:
        return ""
    cut = report.get("long_documents", {})
    return ("<h3>Dropped per source and reason</h3><p>a document's reason is the first rule it fails; line rules "
            "drop sentences of documents that may be kept (documents 0). Long documents cut into pieces: "
            f"{cut.get('documents_cut', 0):,} into {cut.get('pieces', 0):,} ({html.escape(cut.get('mode', ''))})</p>"
            "<table><tr><th>source (rule set)</th><th>reason</th><th>documents</th><th>sentences</th>"
            "<th>tokens</th><th>of the source's tokens</th><th>examples</th></tr>" + "".join(rows) + "</table>")


def _table(rows: list[dict[str, str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in rows[0]) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row.values()) + "</tr>"
                      for row in rows) + "</table>")


def _languages(funnel: Funnel) -> str:
    """The mix of a run of several languages: each language's share aimed at and in the training split (`pipeline
    status` prints the same), and its vocabulary figures on its first sentences ([UNK] rate, tokens per word), so
    a script starved of vocabulary shows."""
    shares = language_table(funnel)
    rows = [{"language": lang, "vocabulary sample share": f"{c['sample_share']:.1%}",
             "[UNK] rate": f"{c['sample_unk_rate']:.4%}", "tokens per word": f"{c['sample_tokens_per_word']:.3f}",
             "characters for coverage": f"{c['coverage_characters']:,}"}
            for lang, c in funnel.by_language("vocab").items()]
    if not shares and not rows:
        return ""
    return ("<h2>Languages</h2>" + (f"<p>the training split's languages (shard.alpha, shard.language_weights)</p>"
                                    f"{_table(shares)}" if shares else "")
            + (f"<p>the vocabulary on each language's first sentences (vocab.alpha)</p>{_table(rows)}" if rows else ""))


def _sources(rows: list[dict], out_dir: Path) -> str:
    """Each source's documents through the stages, and its share of the kept tokens before and after the weights
    (`pipeline status` prints the same table)."""
    table = _table(source_table(rows))
    shares = [r for r in rows if r["kept tokens"] is not None and r["training tokens"] is not None]
    if not shares:
        return f"<h2>Sources</h2>{table}"
    bars = [("kept tokens", "kept tokens", "C0"), ("rehydrated tokens", "rehydrated (shard.rehydrate)", "C1"),
            ("training tokens", "training tokens (weighted)", "C2")]
    bars = [bar for bar in bars if all(r.get(bar[0]) is not None for r in shares)]
    fig, ax = new_figure("Token share of each source, kept and in training")
    y = np.arange(len(shares))
    height = 0.8 / len(bars)
    for n, (key, label, color) in enumerate(bars):
        tokens = np.array([r[key] for r in shares], dtype=float)
        ax.barh(y + 0.4 - height * (n + 0.5), tokens / max(1.0, tokens.sum()), height=height, color=color,
                label=label)
    ax.set_yticks(y, [f"{r['source']} (weight {r['weight']:g})" for r in shares])
    ax.set_xlabel("share of tokens (whitespace-separated)")
    ax.legend()
    png = save_png(fig, out_dir / "source_shares.png")
    return (f"<h2>Sources</h2><p>documents read, with text after sentence splitting, written by the filter (a long "
            f"one cut into pieces counts once a piece), removed as duplicates, kept (what the shard stage took in); "
            f"tokens kept, repeated by their cluster size where shard.rehydrate is on, and in the training split "
            f"after the weights (shard.weights)</p>{table}{_img(png)}")


def _documents(lang_dir: Path, out_dir: Path, headline: list) -> str:
    tokenizer = load_tokenizer(Path(lang_dir) / "vocab")
    sentences, tokens = [], []
    for part in sorted((Path(lang_dir) / "dedup").glob("part-*.txt")):
        with open(part, encoding="utf-8") as f:
            doc: list[str] = []
            for line in f:
                if line.strip():
                    doc.append(line.rstrip("\n"))
                elif doc:
                    sentences.append(len(doc))
                    if len(tokens) < DOCUMENT_SAMPLE:
                        tokens.append(sum(len(e.ids) for e in tokenizer.encode_batch(doc, add_special_tokens=False)))
                    doc = []
            if doc:
                sentences.append(len(doc))
    if not sentences:
        return "<h2>Documents</h2><p>no documents were kept</p>"
    figures = []
    for values, what, name in ((sentences, "sentences", "sentences_per_document.png"),
                               (tokens, "WordPiece tokens", "tokens_per_document.png")):
        fig, ax = new_figure(f"{what[0].upper()}{what[1:]} per document")
        ax.hist(values, bins=np.logspace(np.log10(max(1, min(values))), np.log10(max(values) + 1), 40), color="C0")
        ax.set_xscale("log")
        ax.set_xlabel(f"{what} per document (log scale)")
        ax.set_ylabel("documents")
        figures.append(save_png(fig, out_dir / name))
    headline += [("sentences per document (median)", f"{np.median(sentences):.0f}"),
                 ("tokens per document (median)", f"{np.median(tokens):.0f}")]
    sample = f" (tokens: first {len(tokens):,} documents)" if len(tokens) < len(sentences) else ""
    return f"<h2>Documents</h2><p>{len(sentences):,} documents{sample}</p>{''.join(_img(p) for p in figures)}"


def _duplicates(lang_dir: Path, out_dir: Path, headline: list) -> str:
    """The dedup stage's report.json: documents and tokens per source, the cluster sizes, and the largest clusters
    (and the largest with near duplicates) with their members side by side."""
    report = read_json(Path(lang_dir) / "dedup" / "report.json")
    documents, clusters = report["documents"], report["clusters"]
    headline += [("exact / near duplicates removed", f"{documents['exact']:,} / {documents['near']:,}"),
                 ("duplicate clusters (largest)", f"{clusters['count']:,} ({clusters['largest']:,})")]
    rows = "".join(f"<tr><td>{html.escape(source)}</td>" + "".join(f"<td>{row[key]:,}</td>" for key in (
        "documents_in", "documents_kept", "exact", "near", "tokens_in", "tokens_kept")) + "</tr>"
        for source, row in report["sources"].items())
    table = ("<table><tr><th>source</th><th>documents in (pieces of long ones counted each)</th><th>kept</th>"
             f"<th>exact duplicates</th><th>near duplicates</th><th>tokens in</th><th>kept</th></tr>{rows}</table>")
    figure = ""
    if clusters["sizes"]:
        fig, ax = new_figure("Duplicate clusters by size (documents per cluster)")
        ax.bar(list(clusters["sizes"]), list(clusters["sizes"].values()), color="C1")
        ax.set_xlabel("cluster size")
        ax.set_ylabel("clusters")
        figure = _img(save_png(fig, out_dir / "cluster_sizes.png"))
    shown = "".join(f"<h3>{title}</h3>" + "".join(_cluster_table(c) for c in report[key]) for key, title in (
        ("largest_clusters", "Largest clusters"), ("near_duplicate_clusters", "Largest clusters with near duplicates"))
        if report.get(key))
    return (f"<h2>Duplicates</h2><p>{documents['in']:,} documents in, {documents['kept']:,} kept: "
            f"{documents['exact']:,} exact and {documents['near']:,} near duplicates removed, in "
            f"{clusters['count']:,} clusters</p>{table}{figure}{shown}")


def _cluster_table(cluster: dict) -> str:
    """One cluster's members side by side: the kept copy first, each with its similarity to it."""
    heads = "".join(f"<th>{html.escape(m['title'] or m['id'])}<br><small>{html.escape(m['source'])} "
                    f"{html.escape(m['id'])}{f' piece {m[PIECE]}' if PIECE in m else ''}: {m['duplicate']}, "
                    f"Jaccard {m['jaccard']:.2f}</small></th>" for m in cluster["members"])
    texts = "".join(f"<td style='vertical-align:top'>{html.escape(m['text'] or '')}</td>" for m in cluster["members"])
    return (f"<p>{cluster['size']:,} documents</p><table style='table-layout:fixed;width:100%'><tr>{heads}</tr>"
            f"<tr>{texts}</tr></table>")


def _variant(variant_dir: Path, out_dir: Path, headline: list, damaged: list) -> str:
    report = verify_path(variant_dir)
    if report.problems or not report.stats:
        damaged += report.problems
        problems = "\n".join(report.problems[:10])
        return f"<h2>HDF5 variant {html.escape(variant_dir.name)}</h2><pre>{html.escape(problems)}</pre>"
    files = held_out_split(variant_dir) or training_files(variant_dir)[:4]
    lengths = np.concatenate([_real_lengths(p) for p in files])
    (width, preds, kind), stats = max(report.stats.items(), key=lambda kv: kv[1].instances)
    label = f"seq_len {width}" + (f" {kind}" if kind == DOC_SENTENCES else "")  # pairs: as before there were kinds
    padding = 1 - stats.real_tokens / max(1, stats.instances * width)
    fig, ax = new_figure(f"Real tokens per instance, {label}, max_pred {preds}")
    ax.hist(lengths, bins=min(64, width), color="C2")
    ax.axvline(lengths.mean(), color="k", ls="--", lw=1, label=f"mean {lengths.mean():.0f}")
    ax.set_xlabel(f"real (non-padding) tokens of {width} positions")
    ax.set_yscale("log")  # full rows would dwarf the rest
    ax.set_ylabel(f"instances ({files[0].parent.name} split, log scale)")
    ax.legend()
    png = save_png(fig, out_dir / f"real_tokens_{re.sub('[ -]', '_', label)}.png")
    headline += [(f"{label}: instances", f"{stats.instances:,}"),
                 (f"{label}: padding share", f"{padding:.1%}"),
                 (f"{label}: masked share of eligible tokens", f"{stats.masked / max(1, stats.eligible):.4f}")]
    if kind == DOC_SENTENCES:
        kind_note = "whole consecutive sentences of one document, no sentence pairs (segment ids and NSP labels 0); "
    else:
        headline.append((f"{label}: NSP random next", f"{stats.random_next / max(1, stats.instances):.3f}"))
        kind_note = ""
    verify = format_report(report)
    return (f"<h2>HDF5 variant: {label}, max_pred {preds}</h2><p>{html.escape(variant_dir.name)}: {kind_note}"
            f"padding share {padding:.1%}</p>{_img(png)}<pre>{html.escape(verify)}</pre>")


def _real_lengths(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[INPUT_MASK][:].sum(1)


def _coverage(lang_dir: Path, headline: list, chars_per_word: float | None) -> str:
    """Unknown-token rate and tokens per word of the test split; words as BERT splits them, or as the filter counted
    them where it counted words of unspaced scripts (`chars_per_word`, pipeline.words.count_words)."""
    vocab_dir = Path(lang_dir) / "vocab"
    unk = special_token_ids(read_vocab(vocab_dir / "vocab.txt"), special_token_names(vocab_dir))["[UNK]"]
    tokenizer = load_tokenizer(vocab_dir)
    total = unknown = words = 0
    for shard in sorted((Path(lang_dir) / "shard").glob("test_*.txt")):
        lines = [line for line in shard.read_text(encoding="utf-8").splitlines() if line.strip()]
        for encoding in tokenizer.encode_batch(lines, add_special_tokens=False):
            total += len(encoding.ids)
            unknown += encoding.ids.count(unk)
            if chars_per_word is None:
                words += len(set(w for w in encoding.word_ids if w is not None))
        if chars_per_word is not None:
            words += sum(count_words(line, chars_per_word) for line in lines)
    rate = unknown / max(1, total)
    headline += [("unknown-token rate (test split)", f"{rate:.4%}"),
                 ("tokens per word (test split)", f"{total / max(1, words):.3f}")]
    return (f"<h2>Vocabulary coverage</h2><p>test split: {total:,} tokens, {unknown:,} [UNK] ({rate:.4%}), "
            f"{total / max(1, words):.3f} tokens per word; vocabulary {len(read_vocab(vocab_dir / 'vocab.txt')):,}"
            f" tokens</p>")

