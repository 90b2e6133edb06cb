"""Stage `filter`: each TurkuNLP rule triggered by a crafted document (and in order), language identification,
report.json, determinism across workers, bad input."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from wiki2bert_core.errors import ConfigError, DataError
from pipeline.text_files import WIKIPEDIA_SOURCE, DocumentRecord, iter_documents, records_path, write_document, write_record
from pipeline.runner import config_hash, run_stage
from pipeline.stages.filter import REASONS, DocumentChecker, FilterConfig, run
from pipeline.words import UNSPACED_LETTER
from unspaced_text import GARBAGE_JA, GARBAGE_REASONS, GARBAGE_ZH, JA, ZH, unspaced

HU = "abcdefghijklmnopqrstuvwxyzáéíóöúüőű"
GOOD = [  # 5 sentences, 58 words of plain Hungarian prose
    "A kis falu a folyó partján fekszik, és sok régi ház található benne.",
    "A lakosok többsége a mezőgazdaságból él, de egyre többen dolgoznak a közeli városban.",
    "A templomot a tizennyolcadik században építették, és azóta többször felújították.",
    "Nyáron sok turista érkezik, akik a környék erdeiben és a hegyekben kirándulnak.",
    "Az iskolában körülbelül száz gyerek tanul, a tanárok nagy része helyi lakos.",
]
ENGLISH = [
    "The small village lies on the bank of the river, and many old houses can be found there.",
    "Most of the people living there work in farming, but more of them commute to the nearby town.",
    "The church was built in the eighteenth century and has been restored several times since then.",
    "In summer many tourists arrive to walk in the forests and the hills around the village.",
]


def suffixed(suffix: str) -> list[str]:
    return [s[:-1] + suffix for s in GOOD]


# reason -> a document that passes every earlier check and fails this one
CRAFTED = {
    "avg_words": ["Igen."] * 10,
    "min_sentences": GOOD[:2],
    "max_sentences": ["Ez egy rövid magyar mondat."] * 1001,
    "min_tokens": ["Ez egy nagyon jó mondat.", "Az is egy másik mondat.", "Ez lesz majd a harmadik mondat."],
    "max_tokens": [GOOD[1]] * 900,
    "no_word_ratio": GOOD + ["12 34 56 78.", "90 12 34 56."],
    "punct_ratio": suffixed(" (!), [?]; ..."),
    "upper_ratio": suffixed(" NATO ENSZ USA."),
    "digit_ratio": suffixed(" 1234567890."),
    "foreign_ratio": suffixed(" ñandú çççç."),
    "min_words": ["Ez itt egy kicsit hosszabb mondat.", "A második mondat is ilyen hosszú.",
                  "Harmadik mondat lesz ez itt.", "Negyedik mondat is van itt."],
    "language": ENGLISH,
}


@pytest.fixture(scope="module")
def checker():
    return DocumentChecker(FilterConfig(word_chars=HU), "hu", check_language=True)


def test_good_document_passes(checker):
    assert checker.reason(GOOD) == 0


@pytest.mark.parametrize("reason", list(CRAFTED))
def test_each_rule_is_the_reason_of_its_crafted_document(checker, reason):
    assert REASONS[checker.reason(CRAFTED[reason]) - 1] == reason


def test_first_failing_check_is_the_reason(checker):
    # too few sentences and too many digits: min_sentences comes first
    assert REASONS[checker.reason(CRAFTED["digit_ratio"][:2]) - 1] == "min_sentences"


def test_null_threshold_turns_a_check_off():
    checker = DocumentChecker(FilterConfig(word_chars=HU, max_digit_ratio=None), "hu", check_language=False)
    assert checker.reason(CRAFTED["digit_ratio"]) == 0


def test_without_word_chars_any_letter_makes_a_word_and_foreign_check_is_off():
    checker = DocumentChecker(FilterConfig(), "hu", check_language=False)
    assert checker.reason(CRAFTED["foreign_ratio"]) == 0
    assert checker.reason(["Привет, это довольно длинное предложение на русском языке здесь."] * 5) == 0


def test_langdetect_is_one_config_value_away():
    checker = DocumentChecker(FilterConfig(word_chars=HU, langid="langdetect"), "hu", check_language=True)
    assert checker.reason(GOOD) == 0
    assert REASONS[checker.reason(ENGLISH) - 1] == "language"


# --- languages written without spaces ------------------------------------------------------------------------------

STAGES_YAML = Path(__file__).resolve().parents[2] / "stages.yaml"


def profile_checker(lang: str) -> DocumentChecker:
    return DocumentChecker(load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"], lang, check_language=True)


def reason_name(code: int) -> str:
    return "kept" if code == 0 else REASONS[code - 1]


@pytest.mark.parametrize("lang,documents", [("ja", JA), ("zh", ZH)])
def test_unspaced_prose_is_kept_with_its_profile(lang, documents):
    checker = profile_checker(lang)
    assert {title: reason_name(checker.reason(unspaced(s))) for title, s in documents.items()} == {
        title: "kept" for title in documents}


@pytest.mark.parametrize("lang,documents", [("ja", GARBAGE_JA), ("zh", GARBAGE_ZH)])
def test_unspaced_garbage_is_still_dropped_with_its_profile(lang, documents):
    checker = profile_checker(lang)
    assert {title: reason_name(checker.reason(s if title in ("English", "日本語") else unspaced(s)))
            for title, s in documents.items()} == {title: GARBAGE_REASONS[title] for title in documents}


@pytest.mark.parametrize("lang,documents", [("ja", JA), ("zh", ZH)])
def test_profile_chars_per_word_is_the_word_length_of_a_hand_segmentation(lang, documents):
    chars_per_word = load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"].chars_per_word
    words = [w for sentences in documents.values() for s in sentences for w in s.split() if UNSPACED_LETTER.search(w)]
    assert chars_per_word == pytest.approx(sum(len(UNSPACED_LETTER.findall(w)) for w in words) / len(words), abs=0.05)


def test_counting_unspaced_scripts_leaves_spaced_text_decisions_alone(checker):
    """With chars_per_word set, text without letters of unspaced scripts is counted exactly as TurkuNLP counts it."""
    unspaced_checker = DocumentChecker(FilterConfig(word_chars=HU, chars_per_word=1.7), "hu", check_language=True)
    for document in [GOOD, ENGLISH, *CRAFTED.values()]:
        assert unspaced_checker.reason(document) == checker.reason(document)


def test_chars_per_word_must_be_positive():
    with pytest.raises(ConfigError, match=r"--set filter.chars_per_word=0: filter\.chars_per_word: must be positive"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["filter.chars_per_word=0"])


def test_work_made_before_chars_per_word_existed_stays_current():
    """Left null, chars_per_word is not in the config hash: the Hungarian filter hashes as without the field (the
    hash since filter.dedup moved to the dedup stage), so work made before it existed is not re-run."""
    before = "3343c086f9d9e9ba9de6ce70cca465d0ee1d09b4e5765919195bd62fd229963e"
    assert config_hash(FilterConfig(word_chars=HU)) == before
    assert config_hash(FilterConfig(word_chars=HU, chars_per_word=1.7)) != before


# --- the stage ----------------------------------------------------------------------------------

def write_parts(directory: Path, parts: list[list[tuple[str, list[str]]]], titles: bool = True) -> Path:
    """The sentences stage's output: document text and its records (titles left empty where `titles` is false)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, docs in enumerate(parts):
        text_path = directory / f"part-{i:05d}.txt"
        with open(text_path, "w", encoding="utf-8") as f, open(records_path(text_path), "w", encoding="utf-8") as r:
            for n, (title, sentences) in enumerate(docs):
                write_document(f, sentences)
                write_record(r, DocumentRecord(WIKIPEDIA_SOURCE, str(n), title if titles else ""))
    return directory


@pytest.fixture(scope="session")
def make_ctx(stage_context):
    def make_ctx(tmp_path: Path, sentences_dir: Path, workers: int = 1, lang: str = "hu", name: str = "out"):
        return stage_context(tmp_path, {"sentences": sentences_dir}, name, lang, workers)
    return make_ctx


def variant(i: int) -> list[str]:
    return [s.replace("kis falu", f"{i}. falu") for s in GOOD]


def corpus() -> list[list[tuple[str, list[str]]]]:
    return [
        [("Falu", GOOD), ("Rövid", CRAFTED["min_sentences"]), ("Angol", ENGLISH), ("Falu 1", variant(1))],
        [("Számok", CRAFTED["digit_ratio"]), ("Falu másolat", [s.upper().lower() for s in GOOD]),
         ("Falu 2", variant(2)), ("Falu 1 újra", ["  " + s for s in variant(1)])],
        [],
        [("Falu 3", variant(3)), ("Falu másolat 2", GOOD), ("Igen", CRAFTED["avg_words"]), ("Falu 3 újra", variant(3))],
    ]


def test_stage_keeps_good_documents_and_their_copies_and_reports(tmp_path, make_ctx):
    """Copies stay: duplicates are the dedup stage's."""
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", corpus()))
    counts = run(FilterConfig(word_chars=HU), ctx)
    assert counts == {"documents_in": 12, "documents_kept": 8, "sentences_kept": 40, "dropped_avg_words": 1,
                      "dropped_min_sentences": 1, "dropped_digit_ratio": 1, "dropped_language": 1}
    kept = [doc for i in range(4) for doc in iter_documents(ctx.out_dir / f"part-{i:05d}.txt")]
    assert kept == [GOOD, variant(1), [s.upper().lower() for s in GOOD], variant(2), variant(1), variant(3), GOOD,
                    variant(3)]
    assert (ctx.out_dir / "part-00002.txt").read_text() == ""
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["documents"] == {"in": 12, "kept": 8, "dropped": 4}
    assert report["sentences"] == {"in": 20 + 2 + 4 + 5 + 20 + 10, "kept": 40, "dropped": 21}
    assert list(report["dropped"]) == ["avg_words", "min_sentences", "digit_ratio", "language"]
    assert report["dropped"]["language"]["examples"] == ["Angol"]
    assert report["language_check"] == "py3langid: hu"


def test_examples_are_limited_and_fall_back_to_document_numbers_for_untitled_documents(tmp_path, make_ctx):
    docs = [(f"Rövid {i}", CRAFTED["min_sentences"]) for i in range(4)] + [("Falu", GOOD)]
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [docs], titles=False))
    run(FilterConfig(word_chars=HU, examples=2), ctx)
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["dropped"]["min_sentences"] == {"documents": 4, "sentences": 8, "examples": [
        "part-00000.txt document 1", "part-00000.txt document 2"]}


def test_output_identical_for_one_and_two_workers(tmp_path, make_ctx):
    sentences_dir = write_parts(tmp_path / "sentences", corpus())
    outputs = []
    for workers in (1, 2):
        ctx = make_ctx(tmp_path, sentences_dir, workers=workers, name=f"out{workers}")
        run(FilterConfig(word_chars=HU), ctx)
        outputs.append({p.name: p.read_bytes() for p in sorted(ctx.out_dir.iterdir())})
    assert outputs[0] == outputs[1]


def test_langid_none_keeps_other_languages(tmp_path, make_ctx):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", corpus()))
    assert run(FilterConfig(word_chars=HU, langid="none"), ctx)["documents_kept"] == 9
    assert json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))["language_check"] == "off"


def test_language_unknown_to_identifier_skips_the_check_with_a_note(tmp_path, caplog, make_ctx):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[("Falu", GOOD), ("Angol", ENGLISH)]]), lang="fat")
    with caplog.at_level(logging.WARNING, logger="wiki2bert"):
        counts = run(FilterConfig(), ctx)
    assert counts["documents_kept"] == 2
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["language_check"].startswith("skipped: py3langid does not know language 'fat'")
    assert "does not know language 'fat'" in caplog.text


def test_non_utf8_part_names_file_and_line(tmp_path, make_ctx):
    sentences_dir = write_parts(tmp_path / "sentences", [[("Falu", GOOD)]])
    with open(sentences_dir / "part-00000.txt", "ab") as f:
        f.write(b"J\xf3 mondat.\n\n")
    with pytest.raises(DataError, match=r"part-00000\.txt: line 7: not UTF-8"):
        run(FilterConfig(word_chars=HU), make_ctx(tmp_path, sentences_dir))


@pytest.mark.parametrize("parts", [[], [[]]], ids=["no-parts", "empty-part"])
def test_empty_input_is_an_error(tmp_path, parts, make_ctx):
    with pytest.raises(DataError, match="sentences"):
        run(FilterConfig(), make_ctx(tmp_path, write_parts(tmp_path / "sentences", parts)))


def test_everything_dropped_is_an_error_with_the_reasons(tmp_path, make_ctx):
    sentences_dir = write_parts(tmp_path / "sentences", [[("Angol", ENGLISH), ("Rövid", GOOD[:2])]])
    with pytest.raises(DataError, match=r"all 2 documents were dropped \(min_sentences 1, language 1\)"):
        run(FilterConfig(word_chars=HU), make_ctx(tmp_path, sentences_dir))


def test_runs_in_the_chain_with_the_hungarian_profile(tmp_path):
    lang_dir = tmp_path / "hu"
    write_parts(lang_dir / "sentences", [[("Falu", GOOD), ("Angol", ENGLISH), ("Idegen", CRAFTED["foreign_ratio"])]])
    pcfg = load_pipeline_config(Path(__file__).resolve().parents[2] / "stages.yaml", "hu")
    manifest = run_stage(pcfg, lang_dir, "filter", {"sentences": {"stage": "sentences", "config_hash": "x",
                                                                  "outputs": {}}}, 2, True, logging.getLogger("wiki2bert"))
    assert manifest["config"]["word_chars"] == HU
    assert manifest["counts"] == {"documents_in": 3, "documents_kept": 1, "sentences_kept": 5,
                                  "dropped_foreign_ratio": 1, "dropped_language": 1}
    assert set(manifest["outputs"]) == {"part-00000.txt", "part-00000.docs.jsonl", "report.json"}
