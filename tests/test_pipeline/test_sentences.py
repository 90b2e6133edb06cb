"""Stage `sentences` and the splitters of pipeline/stages/sentences/splitters.py: boundaries around abbreviations, ordinals and numbers,
paragraph and article boundaries, the output format, determinism across workers, bad input."""
from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from pipeline.config import load_pipeline_config
from wiki2bert_core.errors import ConfigError, DataError
from pipeline.text_files import PARAGRAPHS, iter_documents, iter_records
from pipeline.runner import MANIFEST, run_stage
from pipeline.stages import InputLabel, StageContext
from pipeline.stages.sentences.stage import SentencesConfig, run
from pipeline.stages.sentences.splitters import QuntokenSplitter, RuleSplitter, check_quntoken, normalize_paragraph
from child_processes import children
from unspaced_text import JA, ZH, unspaced

try:
    check_quntoken()
    HAVE_QUNTOKEN = True
except DataError:
    HAVE_QUNTOKEN = False
needs_quntoken = pytest.mark.skipif(not HAVE_QUNTOKEN, reason="quntoken runs on Linux x86-64 only")

# (language, sentences): the splitter must return exactly these from the sentences joined by spaces.
RULE_CASES = [
    ("en", ["Dr. Smith arrived in the U.S. on Jan. 5, 2021.", "He paid $3.5 million for it, i.e. a lot.",
            "J. R. R. Tolkien wrote it."]),
    ("en", ["Mr. and Mrs. Brown live at No. 5 Baker St. in London.", "They moved there in 1999."]),
    ("en", ["Is this true?", "Yes!", "It is."]),
    ("en", ["He said \"Go home.\"", "Then he left."]),
    ("en", ["Prices rose by 2.5% in 2020 (see Fig. 3).", "Wages did not."]),
    ("en", ["Lt. Col. John A. Smith Jr. commanded the unit.", "He retired in 1950."]),
    ("en", ["See pp. 10–12 and vol. 2 for details.", "The appendix has more."]),
    ("en", ["Wait...", "Then it happened."]),
    ("en", ["The ship sailed at 5 p.m. on Monday.", "It arrived on Friday."]),
    ("hu", ["Dr. Kovács János 2021. márc. 5-én érkezett meg Budapestre.", "Pl. ez egy 3.5 méteres fa."]),
    ("hu", ["IV. Béla 1270. május 3-án halt meg.", "Utóda V. István lett."]),
    ("hu", ["A versenyen a 3. helyen végzett, kb. 200 induló közül.", "Ez nagy siker volt."]),
    ("hu", ["Az értékpapírt 2001. 02. 28-án bocsátották ki.", "A kamat 10%."]),
    ("hu", ["A függvény értéke 3.", "A hivatkozás három oszlopot tartalmaz."]),
    ("hu", ["Mit mondott a király?", "– Menjetek haza, mondta."]),
    ("hu", ["A döntőben a 27. Sampras–Agassi mérkőzést nézték.", "Az 5. Ferenc-templom is ott áll."]),
    ("hu", ["A Ganz Rt. Budapesten működött, címe Bp. Kossuth tér 5.", "Ott dolgozott."]),
    ("hu", ["Izsák elveszi Rebekát (2.) A fejezet vége.", "Új fejezet (IV.) jön.", "Vége (3)."]),
    ("de", ["Am 3. Oktober 1990 wurde Deutschland wiedervereinigt.", "Das war z. B. ein wichtiger Tag."]),
    ("fr", ["M. Dupont habite à Paris.", "Il travaille chez Renault."]),
    ("xx", ["Abc def ghi.", "Jkl mno pqr!", "Stu vwx yz?"]),
    ("zh", ["今天天气很好。", "我们去公园吧！"]),
    # after a CJK full stop, a quotation mark opens the next sentence unless it closes a quote of this one
    ("ja", ["彼は学校に行った。", "「明日も来る？」", "先生はそう聞いた。"]),
    ("ja", ["駅の名前は古い港に由来する。", '"みなと"という言葉が残った。']),
    ("ja", ['彼は"もう帰る。"', "そして駅へ向かった。"]),
    ("ja", ["ここで終わる。", "'引用'から始まる文。"]),
    ("zh", ['他说："我们走吧。"', '大家都同意了。', '"好的。"', '她回答。']),
    ("zh", ["他说：“我们走吧。”", "大家都同意了。", "“好的。”", "她回答。"]),
    ("ja", ["雪が降った（大雪）。", "『雪国』は小説だ。"]),
    # a particle after a closing quote or bracket continues the sentence (ja's continuation_particles)
    ("ja", ["彼は「明日も来る？」と言った。", "そして帰った。"]),
    ("ja", ["「明日も来る？」と彼は聞いた。", "「本当？」、と私は答えた。"]),
    ("ja", ["映画『君の名は。』は2016年に公開された。", "アニメ「けいおん！」が放送された。"]),
    ("ja", ["彼は「もう帰る！」って言った。", "「行く？」", "もし雨なら行かない。"]),
    # no split inside a bracket or quote that closes, nor after a parenthesis opened in the sentence
    ("ja", ["東京（詳細は後述。）は首都である。", "人口は多い。"]),
    ("ja", ["彼は「もう帰る。明日も来る。」と述べた。", "皆が驚いた。"]),
    ("ja", ["（詳細は後述。）", "東京は首都である。"]),
    ("zh", ["该语言（由吉多开发。）很流行。", "它很简单。"]),
    ("zh", ["他说：“我累了。我要回家。”", "他走了。"]),
    ("zh", ["这是结果（见下文。）。", "下一句。"]),
]


@pytest.mark.parametrize("language,expected", RULE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(RULE_CASES)])
def test_rule_splitter_boundaries(language, expected):
    joiner = "" if language in ("ja", "zh") else " "
    assert RuleSplitter(language).split_paragraph(joiner.join(expected)) == expected


@pytest.mark.parametrize("language,documents", [("ja", JA), ("zh", ZH)])
def test_unspaced_prose_is_split_into_its_sentences(language, documents):
    for sentences in documents.values():
        assert RuleSplitter(language).split_paragraph("".join(unspaced(sentences))) == unspaced(sentences)


def test_a_bracket_that_does_not_close_soon_does_not_hold_back_its_sentences():
    """No split inside a bracket only while it closes within BRACKET_LOOKAHEAD characters: an unclosed or far-closing
    bracket is split as before, so it cannot make a whole paragraph one sentence."""
    from pipeline.stages.sentences.splitters import BRACKET_LOOKAHEAD

    sentence = "これは説明の文である。"
    unclosed = "東京（とうきょう。" + sentence * 3
    assert RuleSplitter("ja").split_paragraph(unclosed) == ["東京（とうきょう。"] + [sentence] * 3
    count = BRACKET_LOOKAHEAD // len(sentence) + 2
    far = "注（" + sentence * count + "）。"
    split = RuleSplitter("ja").split_paragraph(far)
    assert len(split) >= count - 1 and "".join(split) == far
    near = "注（" + sentence * 3 + "）。"
    assert RuleSplitter("ja").split_paragraph(near) == [near]


def test_rule_splitter_extra_abbreviations_and_unknown_language():
    text = "Das Haus steht in der Hauptstr. Berlin ist groß."
    assert RuleSplitter("de").split_paragraph(text) == ["Das Haus steht in der Hauptstr.", "Berlin ist groß."]
    assert RuleSplitter("de", ["Hauptstr."]).split_paragraph(text) == [text]
    # no list for the language: generic rules still keep initials and numbers
    assert RuleSplitter("fat").split_paragraph("Kofi A. Annan ye 3.5 nyimpa. Ɔbaa no bae.") == [
        "Kofi A. Annan ye 3.5 nyimpa.", "Ɔbaa no bae."]


def test_rule_data_is_read_per_language(tmp_path, monkeypatch):
    from pipeline.stages.sentences import splitters

    rules = tmp_path / "rules.yaml"
    rules.write_text('"xx":\n  abbreviations: abc\n  ordinal_period: true\n  ordinal_determiners: der\n', encoding="utf-8")
    monkeypatch.setattr(splitters, "RULES_PATH", rules)
    splitters.language_rules.cache_clear()
    try:
        assert RuleSplitter("xx").split_paragraph("Mit abc. Bestem der 3. Mann. Ende.") == [
            "Mit abc. Bestem der 3. Mann.", "Ende."]
        rules.write_text('"xx":\n  abbrevations: abc\n', encoding="utf-8")
        splitters.language_rules.cache_clear()
        with pytest.raises(ConfigError, match="rules.yaml: xx: .*abbrevations"):
            RuleSplitter("xx")
    finally:
        splitters.language_rules.cache_clear()


def test_normalize_paragraph():
    assert normalize_paragraph("  a\u00a0b\tc\x00d\u2028e  ") == "a b c d e"
    assert normalize_paragraph("szó\u00adtag\u200b\ufeff") == "szótag"
    assert normalize_paragraph("x\ud800y") == "x\ufffdy"


@needs_quntoken
def test_quntoken_boundaries_and_paragraphs():
    paragraphs = [normalize_paragraph(p) for p in [
        "Dr. Kovács János 2021. márc. 5-én érkezett. Pl. ez egy 3.5 méteres fa. Az ún. trianoni béke 1920. június 4-én jött létre.",
        "A XX. századi magyar irodalom kiemelkedő alakja volt. Művei ma is népszerűek!",
        # quntoken joins this paragraph to the next one; the paragraph boundary must survive
        "Karakterek listája (@, &, <, >, !)",
        "Ha az előre meghatározott formátumot használja, a nevét idézőjelbe kell tenni.",
        # characters quntoken replaces with U+FFFD or deletes come back as they were (ZWJ excepted)
        "A 中国 név kínaiul van. A \ue000 magánhasználatú karakter, a\u200db összetett.",
        "Cím",
    ]]
    assert QuntokenSplitter().split(paragraphs) == [
        ["Dr. Kovács János 2021. márc. 5-én érkezett.", "Pl. ez egy 3.5 méteres fa.",
         "Az ún. trianoni béke 1920. június 4-én jött létre."],
        ["A XX. századi magyar irodalom kiemelkedő alakja volt.", "Művei ma is népszerűek!"],
        ["Karakterek listája (@, &, <, >, !)"],
        ["Ha az előre meghatározott formátumot használja, a nevét idézőjelbe kell tenni."],
        ["A 中国 név kínaiul van.", "A \ue000 magánhasználatú karakter, ab összetett."],
        ["Cím"],
    ]
    assert QuntokenSplitter().split([]) == []


@needs_quntoken
def test_quntoken_leaves_no_process_behind(monkeypatch):
    """quntoken.tokenize never waits for the shell of its pipe: it stayed a zombie until Python collected it, and
    a worker's last one outlived the worker (issue 37). Here the shell lingers after its output ends, so that a
    split that does not wait for it returns before it is gone."""
    class LingeringShell(subprocess.Popen):
        def __init__(self, args, *rest, shell=False, **kwargs):
            super().__init__(f"{args}; exec >&- 2>&-; sleep 0.3" if shell else args, *rest, shell=shell, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", LingeringShell)
    before = children(os.getpid())
    QuntokenSplitter().split(["Egy mondat. Még egy mondat."])
    assert [child for child in children(os.getpid()) if child not in before] == []


@needs_quntoken
def test_quntoken_output_that_does_not_match_its_input_is_an_error(monkeypatch):
    monkeypatch.setattr("pipeline.stages.sentences.splitters.run_quntoken", lambda text: ("Egy mondat.\n\n", ""))
    with pytest.raises(DataError, match="quntoken returned 10 non-space characters for 23"):
        QuntokenSplitter().split(["Egy mondat. Még egy mondat."])


@needs_quntoken
def test_article_left_empty_by_quntoken_is_skipped_with_its_title(tmp_path, make_ctx):
    extract = write_parts(tmp_path, [[article("Joiner", "\u200d"), article("Alma", "Az alma piros.")]])
    ctx = make_ctx(tmp_path, extract, lang="hu")
    assert run(SentencesConfig(splitter="quntoken"), ctx) == {
        "articles": 2, "documents": 1, "sentences": 1, "empty_articles": 1,
        "sources": {"wikipedia": {"documents": 1, "sentences": 1}}}
    assert (ctx.out_dir / "part-00000.txt").read_text(encoding="utf-8") == "Az alma piros.\n\n"
    assert [r.title for r in iter_records(ctx.out_dir / "part-00000.txt")] == ["Alma"]


def test_quntoken_unavailable_platform_is_a_clear_error(monkeypatch, tmp_path, make_ctx):
    monkeypatch.setattr("platform.system", lambda: "Darwin")
    monkeypatch.setattr("platform.machine", lambda: "arm64")
    ctx = make_ctx(tmp_path, write_parts(tmp_path, [[article("A", "Szöveg.")]]))
    with pytest.raises(DataError, match="Linux x86-64 binaries only .this is Darwin arm64.; use --set sentences.splitter=rules"):
        run(SentencesConfig(splitter="quntoken"), ctx)


# --- the stage ----------------------------------------------------------------------------------

def article(title: str, text: str) -> dict:
    return {"id": title, "title": title, "url": f"https://example.org/{title}", "text": text}


def write_parts(tmp_path: Path, parts: list[list[dict]]) -> Path:
    extract = tmp_path / "extract"
    extract.mkdir(parents=True, exist_ok=True)
    for i, articles in enumerate(parts):
        with open(extract / f"part-{i:05d}.jsonl", "w", encoding="utf-8") as f:
            for a in articles:
                f.write(json.dumps(a, ensure_ascii=False) + "\n")
    return extract


@pytest.fixture(scope="session")
def make_ctx(stage_context):
    def make_ctx(tmp_path: Path, extract: Path, workers: int = 1, lang: str = "en", name: str = "out") -> StageContext:
        return stage_context(tmp_path, {"extract": extract}, name, lang, workers)
    return make_ctx


def test_stage_writes_sentences_records_and_skips_empty_articles(tmp_path, make_ctx):
    extract = write_parts(tmp_path, [
        [article("First", "Dr. Who came. He left!\n\nA second paragraph without a period\n"),
         article("Empty", " \n\t\n"),
         article("Third", "One  more\u00a0sentence.") | {"source": "web", "id": "doc-3"}],
        [],
    ])
    ctx = make_ctx(tmp_path, extract)
    counts = run(SentencesConfig(), ctx)
    assert counts == {"articles": 3, "documents": 2, "sentences": 4, "empty_articles": 1,
                      "sources": {"web": {"documents": 1, "sentences": 1},
                                  "wikipedia": {"documents": 1, "sentences": 3}}}
    assert (ctx.out_dir / "part-00000.txt").read_text(encoding="utf-8") == (
        "Dr. Who came.\nHe left!\nA second paragraph without a period\n\nOne more sentence.\n\n")
    assert [(r.source, r.id, r.title) for r in iter_records(ctx.out_dir / "part-00000.txt")] == [
        ("wikipedia", "First", "First"), ("web", "doc-3", "Third")]
    assert (ctx.out_dir / "part-00001.txt").read_text(encoding="utf-8") == ""
    assert list(iter_documents(ctx.out_dir / "part-00000.txt"))[1] == ["One more sentence."]


def test_records_of_documents_not_from_the_dump_say_their_lines_and_paragraphs(tmp_path, make_ctx):
    text = "Home | News\nDr. Who came. He left!\n\n \n\u200b\nA second paragraph.\n\n\nLast line. Its end. Done."
    extract = write_parts(tmp_path, [[article("Web", text) | {"source": "web"}, article("Wiki", text)]])
    ctx = make_ctx(tmp_path, extract)
    run(SentencesConfig(), ctx)
    web, wiki = iter_records(ctx.out_dir / "part-00000.txt")
    assert web.extra == {PARAGRAPHS: [[1, 2], [1], [3]]}  # a line of a zero-width space is blank
    assert wiki.extra == {}  # the dump's records are as they were
    assert [len(d) for d in iter_documents(ctx.out_dir / "part-00000.txt")] == [7, 7]


def many_articles(n: int, seed_word: str) -> list[dict]:
    return [article(f"{seed_word} {i}", f"A {i}. cikk a(z) {seed_word} gyümölcsről szól. Dr. Kiss szerint pl. finom.\n"
                                        f"Második bekezdés a {i}. cikkben. A fa {i}.5 m magas!") for i in range(n)]


@pytest.mark.parametrize("splitter", ["rules", pytest.param("quntoken", marks=needs_quntoken)])
def test_output_identical_for_one_and_two_workers(tmp_path, splitter, monkeypatch, make_ctx):
    monkeypatch.setattr("pipeline.stages.sentences.stage.BATCH_CHARS", 500)  # several splitter calls per part
    extract = write_parts(tmp_path, [many_articles(40, w) for w in ("alma", "körte", "szilva")])
    outputs = []
    for workers in (1, 2):
        ctx = make_ctx(tmp_path, extract, workers=workers, lang="hu", name=f"out{workers}")
        counts = run(SentencesConfig(splitter=splitter), ctx)
        assert counts["documents"] == 120 and counts["sentences"] == 120 * 4
        outputs.append({p.name: p.read_bytes() for p in sorted(ctx.out_dir.iterdir())})
    assert outputs[0] == outputs[1]
    assert sorted(outputs[0]) == [f"part-0000{i}{s}" for i in range(3) for s in (".docs.jsonl", ".txt")]


def test_non_utf8_part_names_file_and_line(tmp_path, make_ctx):
    extract = write_parts(tmp_path, [[article("A", "Good text.")]])
    with open(extract / "part-00000.jsonl", "ab") as f:
        f.write(b'{"id": "2", "title": "B", "url": "", "text": "bad \xff byte"}\n')
    with pytest.raises(DataError, match=r"part-00000\.jsonl: line 2: not UTF-8"):
        run(SentencesConfig(), make_ctx(tmp_path, extract))


def test_record_without_text_names_file_and_line(tmp_path, make_ctx):
    extract = write_parts(tmp_path, [[article("A", "Good text."), {"id": "2", "title": "B"}]])
    with pytest.raises(DataError, match=r"part-00000\.jsonl: line 2: expected an object with string 'text'"):
        run(SentencesConfig(), make_ctx(tmp_path, extract))


@pytest.mark.parametrize("parts", [[], [[]], [[article("A", "\n \n")]]], ids=["no-parts", "empty-part", "no-text"])
def test_empty_input_is_an_error(tmp_path, parts, make_ctx):
    extract = write_parts(tmp_path, parts)
    with pytest.raises(DataError, match="extract"):
        run(SentencesConfig(), make_ctx(tmp_path, extract))


def test_runs_in_the_chain_with_the_hungarian_profile(tmp_path):
    """Through the runner with stages.yaml's hu profile: manifest, counts, the splitter of the profile."""
    lang_dir = tmp_path / "hu"
    write_parts(lang_dir, [[article("Alma", "Az alma gyümölcs. A fája 3.5 m magas, pl. a kertben.")]])
    pcfg = load_pipeline_config(Path(__file__).resolve().parents[2] / "stages.yaml", "hu",
                                [] if HAVE_QUNTOKEN else ["sentences.splitter=rules"])
    manifest = run_stage(pcfg, lang_dir, "sentences", {InputLabel("extract"): {"stage": "extract", "config_hash": "x",
                                                                                "outputs": {}}}, 1, True, logging.getLogger("wiki2bert"))
    assert manifest["config"]["splitter"] == ("quntoken" if HAVE_QUNTOKEN else "rules")
    assert manifest["counts"]["sentences"] == 2
    assert set(manifest["outputs"]) == {"part-00000.txt", "part-00000.docs.jsonl"}
    assert json.loads((lang_dir / "sentences" / MANIFEST).read_text())["counts"]["documents"] == 1
    assert (lang_dir / "sentences" / "part-00000.txt").read_text(encoding="utf-8") == (
        "Az alma gyümölcs.\nA fája 3.5 m magas, pl. a kertben.\n\n")


def test_quntoken_not_installed_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(DataError, match="quntoken is not installed"):
        check_quntoken()
