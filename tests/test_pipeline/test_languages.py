"""Runs of several languages (`pipeline run --lang hu,ru,el`, pipeline/languages.py): each language's own stages as a
one-language run makes them, one vocabulary, shards and HDF5 mixed by size^alpha, one test split per language; and
the refusals of bad flags, one line each."""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from tokenizers import Tokenizer

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import MANIFEST
from wiki2bert_core.mixture import language_shares
from wiki2bert_core.variant_dir import MIXTURE_FILE, file_language, read_params
from pipeline.config import load_pipeline_config
from pipeline.languages import load_languages_config, run_languages
from pipeline.runner import run_stages
from pipeline.tools.sample_dump import write_sample_dump

REPO = Path(__file__).resolve().parents[2]
STAGES_YAML = REPO / "stages.yaml"
SETTINGS = ["vocab.vocab_size=3000", "shard.num_shards=4", "hdf5.dupe_factor=2", "extract.articles_per_part=50",
            "hdf5.variants=[{max_seq_length: 128, max_predictions_per_seq: 20}, "
            "{max_seq_length: 128, max_predictions_per_seq: 20, sequence_kind: doc-sentences}]"]
# three scripts (Latin, Cyrillic, Greek) and three sizes
ARTICLES = {"hu": 150, "ru": 60, "el": 25}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("dumps")
    return {lang: write_sample_dump(base / lang, articles, 3, language=lang) for lang, articles in ARTICLES.items()}


def run_mix(workdir: Path, dumps: dict[str, Path], *settings: str, workers: int = 1) -> Path:
    """Every stage of a run of the languages of `dumps`; returns the mix's directory."""
    mix = load_languages_config(STAGES_YAML, list(dumps), [*SETTINGS, *settings],
                                [f"{lang}={dump}" for lang, dump in dumps.items()], [])
    order = next(iter(mix.languages.values())).stage_order
    run_languages(mix, workdir, order, workers=workers, quiet=True)
    return workdir / mix.lang


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, dumps) -> Path:
    """The work directory of a run of hu, ru and el with the default alpha (0.3)."""
    workdir = tmp_path_factory.mktemp("mixed")
    run_mix(workdir, dumps)
    return workdir


def training_tokens(mix_dir: Path) -> dict[str, dict[str, int]]:
    """Each language's WordPiece tokens in its training shards (tokenized here: "shard"), and its real tokens in the
    training HDF5 files (input_mask) of each variant (by sequence kind)."""
    tokenizer = Tokenizer.from_file(str(mix_dir / "vocab" / "tokenizer.json"))
    tokens = collections.defaultdict(collections.Counter)
    for path in sorted((mix_dir / "shard").glob("training_*.txt")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        tokens["shard"][file_language(path)] += sum(len(e.ids) for e in tokenizer.encode_batch(
            lines, add_special_tokens=False))
    for variant in (mix_dir / "hdf5").glob("hdf5_*"):
        for path in sorted(variant.glob("training/*.hdf5")):
            with h5py.File(path, "r") as f:
                tokens[read_params(variant).sequence_kind][file_language(path)] += int(f["input_mask"][:].sum())
    return {kind: dict(counts) for kind, counts in tokens.items()}


def shares(tokens: dict[str, int]) -> dict[str, float]:
    return {lang: n / sum(tokens.values()) for lang, n in sorted(tokens.items())}


@pytest.mark.slow
def test_token_shares_per_language_follow_size_to_the_alpha(mixed, dumps, tmp_path):
    """alpha 1, 0.5 and 0.3 over the same languages' outputs (only shard and hdf5 run again): each language's share
    of the training tokens is size^alpha / sum, size being its training documents' tokens each once (the alpha-1
    shards), within half a point (about a document of these small corpora) in the shards and in the HDF5 files of
    whole sentences (doc-sentences), within 1.5 points in those of sentence pairs, whose random next segments add
    tokens of the language's other documents at a rate of its own (docs/pipeline.md)."""
    workdir = tmp_path / "w"
    shutil.copytree(mixed, workdir)
    measured = {0.3: training_tokens(workdir / "el+hu+ru")}
    for alpha in (1.0, 0.5):
        mix_dir = run_mix(workdir, dumps, f"shard.alpha={alpha}")
        measured[alpha] = training_tokens(mix_dir)
        manifests = {stage: json.loads((workdir / lang / stage / MANIFEST).read_text()) for lang in dumps
                     for stage in ("extract", "dedup")}
        assert all(m["counts"] for m in manifests.values())
    sizes = measured[1.0]["shard"]
    for alpha, tokens in measured.items():
        expected = language_shares(sizes, alpha)
        for kind, tolerance in (("shard", 0.005), ("doc-sentences", 0.005), ("segment-pair", 0.015)):
            for lang in dumps:
                assert shares(tokens[kind])[lang] == pytest.approx(expected[lang], abs=tolerance), (alpha, kind)
    assert shares(measured[0.3]["segment-pair"])["el"] > 2 * shares(measured[1.0]["segment-pair"])["el"]
    params = read_params(next((workdir / "el+hu+ru" / "hdf5").glob("hdf5_*")))  # the last run's
    assert params.mixture.alpha == 0.5 and set(params.mixture.languages) == set(dumps)
    assert params.mixture.languages["el"].tokens == sizes["el"]  # its size: each training document once


def test_one_vocabulary_knows_every_script_and_each_language_has_its_test_split(mixed):
    """hu (Latin), ru (Cyrillic), el (Greek): the vocabulary's [UNK] rate on each language's held-out text is below
    1%; the vocab stage reports each language's figures; each language has its own test shard and HDF5 test file."""
    mix_dir = mixed / "el+hu+ru"
    tokenizer = Tokenizer.from_file(str(mix_dir / "vocab" / "tokenizer.json"))
    unk = tokenizer.token_to_id("[UNK]")
    for lang in ARTICLES:
        lines = [line for path in (mix_dir / "shard").glob(f"test_{lang}_*.txt")
                 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        ids = [i for e in tokenizer.encode_batch(lines, add_special_tokens=False) for i in e.ids]
        assert len(ids) > 500 and ids.count(unk) / len(ids) < 0.01, lang
    vocab = json.loads((mix_dir / "vocab" / MANIFEST).read_text())["counts"]["languages"]
    assert list(vocab) == sorted(ARTICLES)
    for lang, counts in vocab.items():
        assert counts["sample_unk_rate"] < 0.01 and 1 <= counts["sample_tokens_per_word"] < 3
    assert vocab["el"]["sample_share"] > vocab["el"]["words"] / sum(c["words"] for c in vocab.values())  # upsampled
    variant = next((mix_dir / "hdf5").glob("hdf5_*"))
    assert sorted(p.name for p in (variant / "test").iterdir()) == [f"test_{lang}_0000.hdf5"
                                                                    for lang in sorted(ARTICLES)]
    record = json.loads((variant / "variant.json").read_text())
    assert set(record["languages"]) == set(ARTICLES) and all(c["test_instances"] for c in record["languages"].values())
    assert json.loads((mix_dir / "shard" / MIXTURE_FILE).read_text()) == record["mixture"]


@pytest.mark.slow
def test_a_one_language_run_and_a_run_of_several_reuse_each_others_stages(mixed, dumps, tmp_path):
    """The languages' own stages are a one-language run's: after the mix, `pipeline run --lang ru` skips download ..
    dedup (manifests untouched); after a one-language run, the mix skips them too."""
    workdir = tmp_path / "w"
    shutil.copytree(mixed, workdir)
    before = {p: p.read_bytes() for p in (workdir / "ru").glob(f"*/{MANIFEST}")}
    ru = load_pipeline_config(STAGES_YAML, "ru", SETTINGS, {"download": {"source": str(dumps["ru"])}})
    run_stages(ru, workdir / "ru", ru.stage_order, quiet=True)
    assert all(p.read_bytes() == data for p, data in before.items())  # download .. dedup skipped
    assert (workdir / "ru" / "hdf5").is_dir()  # its own vocab, shard and hdf5 beside
    own = {p: p.read_bytes() for p in (workdir / "ru").glob(f"*/{MANIFEST}")}
    run_mix(workdir, dumps, "shard.alpha=0.7")
    assert all(p.read_bytes() == data for p, data in own.items())


# The digests of a one-language run of the `dumps` fixture's hu dump with SETTINGS, as the code before runs of
# several languages existed (commit 700079f) wrote it; the same command of this code writes the same bytes. A new
# release of sentencepiece or tokenizers may change the vocabulary and so both later digests: check the old commit's
# output with the new release before taking new values.
ONE_LANGUAGE_DIGESTS = {"vocab": "326df615b401ede9096414a0e44f173c5c19feb5132852bf13e90b773ef46852",
                        "shard": "dc0fc90baaa80c1fdf910950915d303c2f58be33269ce96ac6395a4ff1676d57",
                        "hdf5": "ebd15703ebaf6ca625968eabd90a51611fb235a65dc73e297a5ecb92cbcdd442"}


def run_digests(lang_dir: Path) -> dict[str, str]:
    """sha256 over each output's path and bytes (an HDF5 file's: its datasets' values, by name)."""
    def digest(paths: list[Path]) -> str:
        h = hashlib.sha256()
        for path in paths:
            h.update(str(path.relative_to(lang_dir)).encode())
            if path.suffix == ".hdf5":
                with h5py.File(path, "r") as f:
                    for name in sorted(f):
                        h.update(name.encode())
                        h.update(f[name][:].tobytes())
            else:
                h.update(path.read_bytes())
        return h.hexdigest()

    return {"vocab": digest([lang_dir / "vocab" / "vocab.txt"]),
            "shard": digest(sorted((lang_dir / "shard").glob("*.txt"))),
            "hdf5": digest(sorted((lang_dir / "hdf5").glob("*/*/*.hdf5")))}


def test_a_one_language_run_writes_the_bytes_it_wrote_before_languages_could_be_mixed(mixed, dumps, tmp_path):
    """The hu stages of the mixed run (download .. dedup, a one-language run's), then vocab, shard and hdf5 of
    `--lang hu` alone: the vocabulary, shards and HDF5 instances of the code before this feature."""
    workdir = tmp_path / "w"
    shutil.copytree(mixed / "hu", workdir / "hu")
    hu = load_pipeline_config(STAGES_YAML, "hu", SETTINGS, {"download": {"source": str(dumps["hu"])}})
    run_stages(hu, workdir / "hu", hu.stage_order, quiet=True)
    assert run_digests(workdir / "hu") == ONE_LANGUAGE_DIGESTS
    record = json.loads(next((workdir / "hu" / "hdf5").glob("hdf5_*/variant.json")).read_text())
    assert "mixture" not in record and "languages" not in record


@pytest.mark.slow
def test_same_languages_in_any_order_and_any_workers_give_the_same_bytes(mixed, dumps, tmp_path):
    """--lang el,ru,hu with 2 workers writes the bytes --lang hu,ru,el with 1 did (the directory is named by the
    sorted codes); every stage of every directory."""
    workdir = tmp_path / "w"
    run_mix(workdir, dict(reversed(list(dumps.items()))), workers=2)
    for directory in ("hu", "ru", "el", "el+hu+ru"):
        for manifest in (mixed / directory).glob(f"*/{MANIFEST}"):
            outputs = json.loads(manifest.read_text())["outputs"]
            again = json.loads((workdir / directory / manifest.parent.name / MANIFEST).read_text())["outputs"]
            assert {k: v["sha256"] for k, v in again.items()} == {k: v["sha256"] for k, v in outputs.items()}


def pipeline_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow
def test_bad_languages_flags_are_refused_with_one_line(dumps, tmp_path):
    def refused(*args: str, code: int = 2) -> str:
        result = pipeline_cli(tmp_path, *args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == code and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return lines[0]

    hu, ru = f"hu={dumps['hu']}", f"ru={dumps['ru']}"
    assert refused("run", "--lang", "hu,ru,hu") == "error: --lang hu,ru,hu: hu is listed twice"
    assert "de is not a language of this run (hu, ru)" in refused(
        "run", "--lang", "hu,ru", "--dump", hu, "--dump", ru, "--set", "shard.language_weights.de=2")
    assert "de is not a language of this run" in refused("run", "--lang", "hu,ru", "--dump", f"de={dumps['hu']}")
    assert "each --dump names its language" in refused("run", "--lang", "hu,ru", "--dump", str(dumps["hu"]))
    assert "a second dump for hu" in refused("run", "--lang", "hu,ru", "--dump", hu, "--dump", hu)
    assert "vocab runs once for all languages" in refused("run", "--lang", "hu,ru", "--set", "hu:vocab.vocab_size=9")
    wrong = refused("run", "--lang", "hu,ru", "--dump", f"hu={dumps['ru']}", "--dump", ru)
    assert wrong == (f"error: {dumps['ru']}: a dump of language ru (its siteinfo), given for --lang hu: pass each "
                     "language its own dump (--dump LANG=PATH)")
    assert not (tmp_path / "data" / "hu").exists()  # refused before anything ran
    one = refused("run", "--lang", "el", "--dump", str(dumps["ru"]))  # a one-language run as well
    assert one.endswith("a dump of language ru (its siteinfo), given for --lang el: pass each language its own dump "
                        "(--dump LANG=PATH)")


def test_the_extract_stage_checks_a_dump_s_language(dumps, tmp_path):
    """A dump the up-front check does not see (downloaded from a URL) is checked as it is read."""
    pcfg = load_pipeline_config(STAGES_YAML, "el", [], {"download": {"source": f"file://{dumps['ru']}"}})
    with pytest.raises(ConfigError, match=r"ruwiki-sample-pages-articles-multistream\.xml\.bz2: a dump of language "
                                          r"ru \(its siteinfo\), given for --lang el"):
        run_stages(pcfg, tmp_path / "el", ["download", "extract"], quiet=True)


def test_a_language_without_a_profile_is_said_once_and_set_takes_a_language(dumps, tmp_path):
    result = pipeline_cli(tmp_path, "run", "--lang", "ru,hu", "--dump", f"ru={dumps['ru']}", "--dump",
                          f"hu={dumps['hu']}", "--to", "download", "--quiet")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "no profile" in line]
    assert len(notes) == 1 and "ru: no profile in" in notes[0] and "the `default` profile applies" in notes[0]
    config = pipeline_cli(tmp_path, "config", "--lang", "ru,hu", "--set", "ru:filter.langid_chars=500",
                          "--set", "shard.alpha=0.5")
    assert config.returncode == 0, config.stderr
    lines = config.stdout.splitlines()
    assert any(line.startswith("ru:filter.langid_chars: 500  #") for line in lines)
    assert any(line.startswith("hu:filter.langid_chars: 2000  #") for line in lines)
    assert any(line.startswith("shard.alpha: 0.5  # several languages") for line in lines)
    assert any(line.startswith('hu:sentences.splitter: "quntoken"') for line in lines)
    assert not any(line.startswith(("hu:vocab.", "ru:shard.", "hu:hdf5.")) for line in lines)
    assert any(line.startswith("vocab.alpha: 0.3  #") for line in lines)  # the mix's stages once, unprefixed


def test_a_language_the_identifier_does_not_know_is_said_to_go_unchecked_once(tmp_path):
    """py3langid knows no 'xx': the filter cannot check that language, so any text passes as it (issue 37); one
    warning says so (the filter's, as it runs), one for the language without a profile, none for hu."""
    sentences = ["A falu a megye északi részén fekszik, a folyó bal partján, a hegyek lábánál.",
                 "Első írásos említése a tizenharmadik századból való, amikor a király egy nemes családnak adta.",
                 "A lakosság nagy része ma is földművelésből él, de sokan a közeli városban dolgoznak.",
                 "A templomot a tizennyolcadik század végén építették barokk stílusban, tornya messziről látszik.",
                 "Az iskola épülete a főtéren áll, és a gyerekek mellett a felnőttek is látogatják az esti órákat.",
                 "Nyaranta a szüreti fesztiválon zenekarok játszanak, és a környékbeli borászok is bemutatkoznak.",
                 "A vasútállomás a falutól két kilométerre van, a buszok óránként indulnak a megyeszékhely felé.",
                 "A határban erdők és rétek váltják egymást, ezért a kirándulók szívesen járnak erre tavasszal."]
    for lang in ("hu", "xx"):  # six documents of over 50 words, no sentence repeated within one (FineWeb-2's rules)
        (tmp_path / f"{lang}.jsonl").write_text("".join(json.dumps({"text": " ".join(sentences[i:] + sentences[:i])})
                                                        + "\n" for i in range(6)), encoding="utf-8")
    result = pipeline_cli(tmp_path, "run", "--lang", "hu,xx", "--corpus", "hu=web=hu.jsonl", "--corpus",
                          "xx=web=xx.jsonl", "--to", "filter", "--quiet")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "language check" in line]
    assert len(notes) == 1 and notes[0].endswith(
        "filter: xx: language check skipped: py3langid does not know the language code 'xx', so documents of xx "
        "pass whatever their language (set filter.language to a code it knows, or filter.langid)"), notes
    assert sum("xx: no profile" in line for line in result.stderr.splitlines()) == 1
    assert json.loads((tmp_path / "data" / "xx" / "filter" / "report.json").read_text())["language_check"].startswith(
        "skipped: py3langid does not know the language code 'xx'")


def test_a_weight_for_a_language_or_source_not_in_the_run_is_refused(dumps):
    flags = [f"hu={dumps['hu']}", f"ru={dumps['ru']}"]
    with pytest.raises(ConfigError, match=r"^shard\.language_weights\.fi: fi is not a language of this run \(hu, ru\)$"):
        load_languages_config(STAGES_YAML, ["hu", "ru"], ["shard.language_weights.fi=3"], flags, [])
    with pytest.raises(ConfigError, match=r"^shard\.weights\.web: no such source \(this run's sources: wikipedia\)"):
        load_languages_config(STAGES_YAML, ["hu", "ru"], ["shard.weights.web=3"], flags, [])
    with pytest.raises(ConfigError, match=r"^--corpus ru=web=\.\.\.:0\.5: source web has weight 2 in another language"):
        load_languages_config(STAGES_YAML, ["hu", "ru"], [], flags, ["hu=web=/data/a.jsonl:2", "ru=web=/data/b.jsonl:0.5"])
    mix = load_languages_config(STAGES_YAML, ["ru", "hu"], ["shard.language_weights.ru=3", "ru:filter.language=uk"],
                                flags, [])
    assert mix.lang == "hu+ru" and list(mix.languages) == ["hu", "ru"]
    assert mix.stage_configs["shard"].language_weights == {"ru": 3.0}
    assert mix.languages["ru"].stage_configs["filter"].language == "uk"
    assert mix.languages["hu"].stage_configs["filter"].language is None


def test_an_adopted_tokenizer_extended_for_the_mix(mixed, dumps, tmp_path):
    """vocab.extend_with on a run of several languages: words counted over the mix's sample, each language's
    held-out sentences left out, the figures before and after over all of them."""
    adopted = tmp_path / "adopted"
    shutil.copytree(mixed / "el+hu+ru" / "vocab", adopted)
    workdir = tmp_path / "work"
    shutil.copytree(mixed, workdir, symlinks=True)
    mix_dir = run_mix(workdir, dumps, f"vocab.tokenizer={adopted}", "vocab.extend_with=50")
    counts = json.loads((mix_dir / "vocab" / MANIFEST).read_text())["counts"]
    assert counts["extension"]["tokens_added"] == 50
    assert counts["vocab_size"] == len((adopted / "vocab.txt").read_text().splitlines()) + 50
    assert counts["sample_tokens_per_word"] < counts["extension"]["sample_tokens_per_word_before"]
    assert set(counts["languages"]) == {"el", "hu", "ru"}
