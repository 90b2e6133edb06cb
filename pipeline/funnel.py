"""The funnel: each source's documents through the stages, read from the finished stages' counts (StageCounts, as
their manifests record them). The one reader of `pipeline status`'s tables and `pipeline report`'s funnel.

FIGURES declares every count it reads, by stage; the runner checks each stage's result against it
(check_counts), so a stage that stops returning one fails its run instead of blanking a column. A work directory
made before a stage counted something reads as blanks (None), never as an error.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.stages import StageCounts
from pipeline.text_files import WIKIPEDIA_SOURCE as WIKIPEDIA


@dataclasses.dataclass(frozen=True)
class Figure:
    """A count the funnel reads: `key` of stage `stage`'s counts, for all sources together (total), for each source
    (per_source: a one-language run's), for each language (per_language: the mix of several languages)."""
    stage: str
    key: str
    total: bool = False
    per_source: bool = False
    per_language: bool = False


FIGURES = (
    Figure("extract", "pages", total=True),  # the dump's: one source, wikipedia
    Figure("extract", "articles", total=True),
    Figure("extract", "skipped", total=True),  # pages not made articles, by reason
    Figure("corpus", "documents", total=True, per_source=True),
    Figure("corpus", "too_long", per_source=True),  # left out: longer than corpus.max_document_bytes
    Figure("corpus", "duplicate_ids", per_source=True),  # documents whose record id repeats an earlier one's
    Figure("sentences", "documents", per_source=True),
    Figure("filter", "documents_kept", total=True, per_source=True),
    Figure("filter", "documents_written", total=True, per_source=True),
    Figure("dedup", "documents_kept", total=True, per_source=True),
    Figure("dedup", "removed", per_source=True),
    *(Figure("shard", key, total=True, per_source=True) for key in ("training_documents", "test_documents")),
    *(Figure("shard", key, per_source=True) for key in ("documents", "tokens", "rehydrated_tokens", "weight",
                                                          "training_tokens", "training_share")),
    *(Figure("shard", key, per_language=True) for key in ("documents", "tokens", "weight", "target_share",
                                                          "training_tokens", "training_share")),
    *(Figure("vocab", key, per_language=True) for key in ("sample_share", "sample_unk_rate",
                                                          "sample_tokens_per_word", "coverage_characters")),
)


def check_counts(stage: str, counts: StageCounts, several_languages: bool) -> None:
    """RuntimeError naming each count of FIGURES that `stage`'s result lacks (a stage of the mix of several
    languages owes its per-language counts, one of a one-language run its per-source ones)."""
    if not isinstance(counts, StageCounts):
        raise RuntimeError(f"stage {stage} returned {type(counts).__name__}, not StageCounts")
    missing = []
    for figure in (f for f in FIGURES if f.stage == stage):
        if figure.total and figure.key not in counts.totals:
            missing.append(figure.key)
        for scope, wanted, by in (("sources", figure.per_source and not several_languages, counts.sources),
                                  ("languages", figure.per_language and several_languages, counts.languages)):
            if wanted:
                missing += [f"{scope}.{name}.{figure.key}" for name, c in (by or {}).items() if figure.key not in c]
                missing += [] if by else [scope]
    if missing:
        raise RuntimeError(f"stage {stage} returned no {', '.join(dict.fromkeys(missing))}, which the funnel reads "
                           "(pipeline/funnel.py: FIGURES)")


class Funnel:
    """The counts of the finished stages ({stage: manifest}, those of one directory), read by FIGURES."""

    def __init__(self, manifests: dict[str, dict | None]):
        self.counts = {stage: StageCounts.from_dict(m.get("counts")) for stage, m in manifests.items() if m}
        # a dump extracted by an earlier run is no source of the sentences stage that read only corpora
        read = (manifests.get("sentences") or {}).get("inputs", {"extract": None})
        self.dump_read = "extract" in self.counts and "extract" in read

    def total(self, stage: str, key: str) -> Any:
        """The count for all sources together; None where the stage is not done or did not count it."""
        self._declared(stage, key, "total")
        return self.counts[stage].totals.get(key) if stage in self.counts else None

    def by_source(self, stage: str, key: str) -> dict[str, Any]:
        """{source: its count} of the sources the stage counted it for; the dump's stages count wikipedia alone."""
        self._declared(stage, key, "per_source", "total")
        if stage not in self.counts:
            return {}
        counts = self.counts[stage]
        if counts.sources is None and stage == "extract":
            return {WIKIPEDIA: counts.totals[key]} if key in counts.totals else {}
        return {name: c[key] for name, c in (counts.sources or {}).items() if key in c}

    def by_language(self, stage: str) -> dict[str, dict[str, Any]]:
        """{language: its counts} of a stage of the mix of several languages; {} for any other."""
        return (self.counts[stage].languages or {}) if stage in self.counts else {}

    def source_rows(self) -> list[dict[str, Any]]:
        """One row per source: documents read (extract's articles, the corpus stage's documents), the corpus
        stage's documents left out as too long and those whose record id repeats (these two columns only where the
        corpus stage counted them), documents with text (sentences), after the filter (the documents it wrote: a
        long one cut into pieces counts once a piece), duplicates (removed by dedup), kept (what the shard stage
        took in) and their tokens, those tokens rehydrated (each document as many times as its cluster size asks: a
        column only where shard.rehydrate was on), weight, and the training split's tokens and share (None where a
        stage is not done, or made before it counted per source). Empty when no stage recorded per-source counts (a
        work directory made before sources existed)."""
        if not any(self.counts[s].sources for s in ("corpus", "sentences", "shard") if s in self.counts):
            return []
        read = {**(self.by_source("extract", "articles") if self.dump_read else {}),
                **self.by_source("corpus", "documents")}
        corpus = {column: by for column, key in (("too long", "too_long"), ("repeated ids", "duplicate_ids"))
                  if (by := self.by_source("corpus", key))}
        columns = {"read": read, **corpus, "with text": self.by_source("sentences", "documents"),
                   "after filter": self.by_source("filter", "documents_written"),
                   "duplicates": self.by_source("dedup", "removed"), "kept": self.by_source("shard", "documents"),
                   "kept tokens": self.by_source("shard", "tokens"),
                   "rehydrated tokens": self.by_source("shard", "rehydrated_tokens"),
                   "weight": self.by_source("shard", "weight"),
                   "training tokens": self.by_source("shard", "training_tokens"),
                   "training share": self.by_source("shard", "training_share")}
        if not any(value is not None for value in columns["rehydrated tokens"].values()):
            del columns["rehydrated tokens"]
        names = set(read) | set(columns["with text"]) | set(columns["kept"])
        return [{"source": name, **{column: values.get(name) for column, values in columns.items()}}
                for name in sorted(names, key=lambda n: (n != WIKIPEDIA, n))]

    def document_steps(self) -> list[tuple[str, dict[str, int], int]]:
        """(label, documents per source, total) of each step the finished stages counted, in stage order."""
        steps = [("pages", "extract", "pages"), ("articles", "extract", "articles"),
                 ("corpus documents", "corpus", "documents"), ("documents kept", "filter", "documents_kept"),
                 ("documents written (long ones cut)", "filter", "documents_written"),
                 ("documents kept by dedup", "dedup", "documents_kept"),
                 ("training documents (weights repeat some)", "shard", "training_documents"),
                 ("test documents", "shard", "test_documents")]
        rows = [(label, self.by_source(stage, key), self.total(stage, key)) for label, stage, key in steps]
        kept = self.total("filter", "documents_kept")
        return [(label, by, total) for label, by, total in rows if total is not None
                and not (label.startswith("documents written") and total == kept)]

    def _declared(self, stage: str, key: str, *scopes: str) -> None:
        if not any(f.stage == stage and f.key == key and any(getattr(f, s) for s in scopes) for f in FIGURES):
            raise KeyError(f"{stage}.{key} is not in FIGURES")


def source_table(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Funnel.source_rows as text: counts with thousands separators, the share in percent, blanks for None."""
    def text(key: str, value) -> str:
        if value is None:
            return ""
        if key == "training share":
            return f"{value:.1%}"
        return f"{value:g}" if key == "weight" else f"{value:,}" if isinstance(value, int) else str(value)

    return [{key: text(key, value) for key, value in row.items()} for row in rows]


def language_table(funnel: Funnel) -> list[dict[str, str]]:
    """The languages of the mix's shard stage (a run of several languages) as text: documents, tokens (each
    document once), weight, the share aimed at, the training tokens and their share; [] for a one-language run."""
    return [{"language": lang, "documents": f"{c['documents']:,}", "tokens": f"{c['tokens']:,}",
             "weight": f"{c['weight']:g}", "target share": f"{c['target_share']:.1%}",
             "training tokens": f"{c['training_tokens']:,}", "training share": f"{c['training_share']:.1%}"}
            for lang, c in funnel.by_language("shard").items()]
