"""A generated Hungarian-like Wikipedia dump for the demo and the tests: no network, no copied text.

`generate_pages(articles, seed)` writes huwiki-style pages from our own word lists and sentence patterns
(nouns inflected with vowel harmony, verbs, place names, years), seeded so the same seed gives the same pages:
- articles about settlements, people and buildings, 8-25 sentences in sections, in huwiki markup: bold title,
  [[links|label]], an infobox and inline templates defined in the template namespace (`Sablon:`), <ref>s,
  headings, a file link, categories;
- stubs of one or two sentences and a few English-language articles (extract keeps them, filter drops them);
- redirects (`#ÁTIRÁNYÍTÁS`, a few `#REDIRECT` and a few without the <redirect> element), disambiguation pages
  (`{{egyért}}`, `__DISAMBIG__`), empty pages, templates, talk, category and file pages (extract skips them).
Dumps of any size: `iter_pages` generates `BLOCK_ARTICLES` articles (and their other pages) at a time, so memory
holds one block; the first block is `generate_pages(articles, seed)` itself (a dump of up to BLOCK_ARTICLES
articles has the same bytes as before blocks existed), later blocks are seeded by (seed, block) and mark their
titles with the block's number, which keeps titles unique however many blocks there are.
`write_multistream` writes the dump in Wikimedia's multistream layout (a siteinfo stream, streams of 100 pages,
a closing stream) with its `offset:page_id:title` index, streaming both to disk; `write_sample_dump` is
`pipeline sample-dump`, which also writes the dumps of pipeline/tools/sample_languages.py (Finnish-like, Russian-
like, Greek-like: `--lang fi|ru|el`), whose pages and siteinfo (namespaces, dbname, xml:lang) are those languages'.
(The tests' writers of other layouts are in tests/support/dump_writers.py.)
"""
from __future__ import annotations

import bz2
import dataclasses
import hashlib
import random
import itertools
import re
from pathlib import Path
from typing import Iterable, Iterator
from xml.sax.saxutils import escape

from wiki2bert_core.files import atomic_write
from wiki2bert_core.log import progress
from pipeline.executors.local import LocalExecutor
from pipeline.tools.sample_languages import LANGUAGES, iter_pages as iter_language_pages

DUMP_NAME = "huwiki-sample-pages-articles-multistream.xml.bz2"
INDEX_NAME = "huwiki-sample-pages-articles-multistream-index.txt.bz2"
SAMPLE_LANGUAGES = ("hu", "fi", "ru", "el")  # hu: this module's pages; the others: pipeline/tools/sample_languages.py
PAGES_PER_STREAM = 100
# Articles per generated block: the name lists give unique titles for ~15,000 articles (English titles run out
# first), so a block stays below that.
BLOCK_ARTICLES = 10_000
XML_BYTES_PER_ARTICLE = 2094  # uncompressed XML per article, its share of the other pages included (measured)
KEPT_KINDS = ("article", "stub", "english")  # the kinds the extract stage writes out

NAMESPACES = {-2: "Média", -1: "Speciális", 0: "", 1: "Vita", 2: "Szerkesztő", 3: "Szerkesztővita",
              4: "Wikipédia", 5: "Wikipédia-vita", 6: "Fájl", 7: "Fájlvita", 8: "MediaWiki", 9: "MediaWiki-vita",
              10: "Sablon", 11: "Sablonvita", 12: "Segítség", 13: "Segítségvita", 14: "Kategória",
              15: "Kategóriavita", 100: "Portál", 101: "Portálvita", 828: "Modul", 829: "Modulvita"}


@dataclasses.dataclass(frozen=True)
class Page:
    id: int
    title: str
    ns: int
    text: str  # wikitext
    kind: str  # article, stub, english, redirect, disambiguation, empty, template, talk, category, file
    redirect: str | None = None  # target written as a <redirect> element


# --- word lists ---------------------------------------------------------------------------------------------------

# Nouns without stem changes; "*" marks a low linking vowel (házat, házak; könyvet, könyvek).
NOUNS = """
város község település templom kastély vár* iskola gyár* folyó patak hegy völgy* erdő mező kert park könyvtár*
múzeum egyetem kórház* piac állomás kikötő sziget tenger partvidék táj* rét szőlő gabona búza kukorica alma szilva
barack dió bor sajt hús hal* farkas medve róka szarvas kutya macska juh méh fa virág rózsa tölgy* fenyő bükk
nyárfa fűzfa kápolna kolostor apátság palota kúria udvarház* épület ház* lakás szoba konyha ablak ajtó fal* tető
kapu kép* festmény könyv* regény vers* újság folyóirat dal zene opera színház* mozi koncert fesztivál ünnep verseny
csapat játékos edző diák tanár tanító orvos mérnök festő költő író zenész király királynő herceg gróf püspök
polgármester lakos család gyerek ember asszony barát kereskedő paraszt katona hajós halász vadász pásztor molnár
kovács hajó vonat autó busz kocsi kerékpár repülőgép gép motor óra rádió telefon számítógép levéltár* tudomány
nyelv földrajz művészet építészet hagyomány szokás nép ország megye vidék határ síkság domb barlang forrás évszak
időjárás eső napsütés felhő vihar gát* csatorna part homok agyag vas* arany* ezüst olaj* gyapjú bőr munka élet
háború béke csata szövetség törvény hivatal bíróság tanács gyűlés egyesület társaság vállalat üzem bánya pékség
bolt vásár kiállítás gyűjtemény sír temető kereszt harang oltár orgona festészet fénykép térkép utazás kirándulás
sport labdarúgás úszás futás vívás sakk tánc népdal mese monda legenda krónika pecsét címer zászló pénz adó termés
aratás szüret pince borászat pálinka méz tej* vaj* liszt paprika hagyma káposzta burgonya répa uborka paradicsom
gomba cseresznye meggy körte gyümölcs zöldség étel ital leves sütemény vacsora ebéd reggeli
""".split()

ADJECTIVES = """
nagy kis régi új híres fontos szép csendes hosszú rövid magas alacsony széles keskeny mély gazdag szegény erős
gyenge gyors lassú meleg hideg zöld kék piros fehér fekete sárga barna szürke tiszta ősi modern középkori barokk
gótikus klasszicista városi falusi vidéki hegyi erdei folyami mezőgazdasági ipari kereskedelmi kulturális
történelmi egyházi katolikus református evangélikus királyi nemesi polgári népi hagyományos érdekes különleges
jelentős népszerű kedvelt ismert elhagyott felújított védett termékeny sűrű ritka dús vadregényes festői kanyargós
meredek lapos napos árnyékos nyugodt forgalmas zajos barátságos vendégszerető szorgalmas ügyes bátor bölcs okos
tehetséges fiatal idős öreg egyszerű gyönyörű hatalmas apró kerek nemzetközi országos helyi közeli távoli északi
déli keleti nyugati belső külső felső alsó egyetlen
""".split()

# (present 3sg, past 3sg, present 3pl)
INTRANSITIVE_VERBS = [
    ("él", "élt", "élnek"), ("dolgozik", "dolgozott", "dolgoznak"), ("épül", "épült", "épülnek"),
    ("működik", "működött", "működnek"), ("áll", "állt", "állnak"), ("születik", "született", "születnek"),
    ("utazik", "utazott", "utaznak"), ("költözik", "költözött", "költöznek"), ("érkezik", "érkezett", "érkeznek"),
    ("indul", "indult", "indulnak"), ("változik", "változott", "változnak"), ("fejlődik", "fejlődött", "fejlődnek"),
    ("csökken", "csökkent", "csökkennek"), ("virágzik", "virágzott", "virágoznak"),
    ("szerepel", "szerepelt", "szerepelnek"), ("tanul", "tanult", "tanulnak"), ("játszik", "játszott", "játszanak"),
    ("énekel", "énekelt", "énekelnek"), ("emelkedik", "emelkedett", "emelkednek"),
    ("kezdődik", "kezdődött", "kezdődnek"), ("zajlik", "zajlott", "zajlanak"), ("pusztul", "pusztult", "pusztulnak"),
    ("megmarad", "megmaradt", "megmaradnak"), ("elterjed", "elterjedt", "elterjednek"),
    ("megjelenik", "megjelent", "megjelennek"), ("eltűnik", "eltűnt", "eltűnnek"), ("nyílik", "nyílt", "nyílnak"),
    ("gyarapodik", "gyarapodott", "gyarapodnak"), ("sétál", "sétált", "sétálnak"), ("pihen", "pihent", "pihennek"),
    ("fut", "futott", "futnak"), ("repül", "repült", "repülnek"), ("úszik", "úszott", "úsznak"),
    ("terem", "termett", "teremnek"), ("látszik", "látszott", "látszanak"), ("marad", "maradt", "maradnak"),
]

# (present 3sg indefinite, present 3sg definite, past 3sg indefinite, past 3sg definite, present 3pl indefinite)
TRANSITIVE_VERBS = [
    ("épít", "építi", "épített", "építette", "építenek"),
    ("készít", "készíti", "készített", "készítette", "készítenek"),
    ("termeszt", "termeszti", "termesztett", "termesztette", "termesztenek"), ("ír", "írja", "írt", "írta", "írnak"),
    ("olvas", "olvassa", "olvasott", "olvasta", "olvasnak"), ("lát", "látja", "látott", "látta", "látnak"),
    ("keres", "keresi", "keresett", "kereste", "keresnek"), ("talál", "találja", "talált", "találta", "találnak"),
    ("visel", "viseli", "viselt", "viselte", "viselnek"), ("őriz", "őrzi", "őrzött", "őrizte", "őriznek"),
    ("vezet", "vezeti", "vezetett", "vezette", "vezetnek"), ("alapít", "alapítja", "alapított", "alapította",
                                                            "alapítanak"),
    ("tanít", "tanítja", "tanított", "tanította", "tanítanak"), ("fest", "festi", "festett", "festette", "festenek"),
    ("gyűjt", "gyűjti", "gyűjtött", "gyűjtötte", "gyűjtenek"), ("javít", "javítja", "javított", "javította",
                                                               "javítanak"),
    ("bővít", "bővíti", "bővített", "bővítette", "bővítenek"), ("használ", "használja", "használt", "használta",
                                                                 "használnak"),
    ("támogat", "támogatja", "támogatott", "támogatta", "támogatnak"),
    ("ábrázol", "ábrázolja", "ábrázolt", "ábrázolta", "ábrázolnak"), ("ismer", "ismeri", "ismert", "ismerte",
                                                                     "ismernek"),
    ("szeret", "szereti", "szeretett", "szerette", "szeretnek"), ("díszít", "díszíti", "díszített", "díszítette",
                                                                  "díszítenek"),
    ("felújít", "felújítja", "felújított", "felújította", "felújítanak"),
    ("megvásárol", "megvásárolja", "megvásárolt", "megvásárolta", "megvásárolnak"),
    ("kiad", "kiadja", "kiadott", "kiadta", "kiadnak"), ("létrehoz", "létrehozza", "létrehozott", "létrehozta",
                                                         "létrehoznak"),
    ("megnyit", "megnyitja", "megnyitott", "megnyitotta", "megnyitnak"),
    ("tervez", "tervezi", "tervezett", "tervezte", "terveznek"), ("ünnepel", "ünnepli", "ünnepelt", "ünnepelte",
                                                                  "ünnepelnek"),
    ("szállít", "szállítja", "szállított", "szállította", "szállítanak"),
    ("termel", "termeli", "termelt", "termelte", "termelnek"), ("mutat", "mutatja", "mutatott", "mutatta", "mutatnak"),
    ("kutat", "kutatja", "kutatott", "kutatta", "kutatnak"), ("lebont", "lebontja", "lebontott", "lebontotta",
                                                              "lebontanak"),
    ("megvéd", "megvédi", "megvédett", "megvédte", "megvédenek"), ("ápol", "ápolja", "ápolt", "ápolta", "ápolnak"),
    ("nevel", "neveli", "nevelt", "nevelte", "nevelnek"), ("követ", "követi", "követett", "követte", "követnek"),
]

# (name, locative, adjective)
TOWNS = [
    ("Budapest", "Budapesten", "budapesti"), ("Debrecen", "Debrecenben", "debreceni"),
    ("Szeged", "Szegeden", "szegedi"),
    ("Pécs", "Pécsett", "pécsi"), ("Győr", "Győrben", "győri"), ("Miskolc", "Miskolcon", "miskolci"),
    ("Eger", "Egerben", "egri"), ("Sopron", "Sopronban", "soproni"), ("Kecskemét", "Kecskeméten", "kecskeméti"),
    ("Nyíregyháza", "Nyíregyházán", "nyíregyházi"), ("Székesfehérvár", "Székesfehérváron", "székesfehérvári"),
    ("Veszprém", "Veszprémben", "veszprémi"), ("Szombathely", "Szombathelyen", "szombathelyi"),
    ("Szolnok", "Szolnokon", "szolnoki"), ("Kaposvár", "Kaposváron", "kaposvári"),
    ("Zalaegerszeg", "Zalaegerszegen", "zalaegerszegi"), ("Tatabánya", "Tatabányán", "tatabányai"),
    ("Békéscsaba", "Békéscsabán", "békéscsabai"), ("Szekszárd", "Szekszárdon", "szekszárdi"),
    ("Salgótarján", "Salgótarjánban", "salgótarjáni"), ("Esztergom", "Esztergomban", "esztergomi"),
    ("Vác", "Vácon", "váci"), ("Gödöllő", "Gödöllőn", "gödöllői"), ("Tokaj", "Tokajban", "tokaji"),
    ("Hollókő", "Hollókőn", "hollókői"), ("Tihany", "Tihanyban", "tihanyi"), ("Siófok", "Siófokon", "siófoki"),
    ("Keszthely", "Keszthelyen", "keszthelyi"), ("Visegrád", "Visegrádon", "visegrádi"),
    ("Szentendre", "Szentendrén", "szentendrei"), ("Kalocsa", "Kalocsán", "kalocsai"), ("Baja", "Baján", "bajai"),
    ("Makó", "Makón", "makói"), ("Gyula", "Gyulán", "gyulai"), ("Sárospatak", "Sárospatakon", "sárospataki"),
    ("Pápa", "Pápán", "pápai"), ("Kőszeg", "Kőszegen", "kőszegi"), ("Mohács", "Mohácson", "mohácsi"),
    ("Ózd", "Ózdon", "ózdi"), ("Hódmezővásárhely", "Hódmezővásárhelyen", "hódmezővásárhelyi"),
]

# (name, locative with article)
REGIONS = [
    ("Alföld", "az Alföldön"), ("Dunántúl", "a Dunántúlon"), ("Bakony", "a Bakonyban"), ("Mátra", "a Mátrában"),
    ("Bükk", "a Bükkben"), ("Hortobágy", "a Hortobágyon"), ("Őrség", "az Őrségben"), ("Zemplén", "a Zemplénben"),
    ("Duna", "a Duna mentén"), ("Tisza", "a Tisza mentén"), ("Balaton", "a Balaton partján"),
    ("Mecsek", "a Mecsekben"), ("Nyírség", "a Nyírségben"), ("Kiskunság", "a Kiskunságban"),
]

COUNTIES = ["Zala", "Vas", "Győr-Moson-Sopron", "Veszprém", "Fejér", "Somogy", "Tolna", "Baranya", "Bács-Kiskun",
            "Csongrád-Csanád", "Békés", "Hajdú-Bihar", "Szabolcs-Szatmár-Bereg", "Borsod-Abaúj-Zemplén", "Heves",
            "Nógrád", "Pest", "Komárom-Esztergom", "Jász-Nagykun-Szolnok"]

FAMILY_NAMES = ["Kovács", "Szabó", "Tóth", "Nagy", "Horváth", "Varga", "Kiss", "Molnár", "Németh", "Farkas",
                "Balogh", "Papp", "Takács", "Juhász", "Lakatos", "Mészáros", "Oláh", "Simon", "Rácz", "Fekete",
                "Szilágyi", "Török", "Fehér", "Balázs", "Gál", "Kis", "Szűcs", "Kocsis", "Orsós", "Pintér"]
GIVEN_NAMES = ["János", "István", "László", "József", "Zoltán", "Péter", "Mária", "Erzsébet", "Katalin", "Éva",
               "Ilona", "Anna", "Zsuzsanna", "Gábor", "Ferenc", "Attila", "Tamás", "Krisztina", "Judit", "Ágnes",
               "Sándor", "Imre", "Gyula", "Lajos", "Ildikó", "Márta", "Györgyi", "Endre", "Dénes", "Lőrinc"]
OCCUPATIONS = ["festő", "költő", "író", "zenész", "mérnök", "orvos", "tanár", "építész", "szobrász", "színész",
               "történész", "nyelvész", "csillagász", "vegyész", "botanikus", "politikus", "zeneszerző", "fotográfus"]

ADVERBS = ["később", "azóta", "ma is", "gyakran", "egykor", "napjainkban", "emellett", "ezenkívül", "főként",
           "nyaranta", "télen", "tavasszal", "ősszel", "korábban", "hamarosan", "valamikor", "mindig", "általában",
           "különösen", "elsősorban", "régóta", "egyre inkább", "főleg", "rendszeresen"]
NUMBERS = ["két", "három", "négy", "öt", "hat", "hét", "nyolc", "kilenc", "tíz", "húsz", "sok", "néhány", "számos",
           "több", "kevés"]

# Settlement names: prefix + base.
NAME_PREFIXES = ["Alsó", "Felső", "Kis", "Nagy", "Új", "Ó", "Bakony", "Duna", "Tisza", "Szent", "Puszta", "Hegy",
                 "Mező", "Zala", "Rába", "Sár", "Vár", "Répce", "Körös", "Kövesd", "Bodrog", "Maros"]
NAME_BASES = ["falva", "háza", "telek", "szeg", "vár", "egyháza", "laka", "kereszt", "hegy", "patak", "bánya",
              "szállás", "lak", "föld", "mező", "keszi", "füred", "völgy", "újfalu", "szentgyörgy", "szentmiklós"]

SECTION_TITLES = {
    "settlement": ["Földrajza", "Története", "Népessége", "Nevezetességei", "Gazdasága", "Közlekedése"],
    "person": ["Élete", "Munkássága", "Művei", "Emlékezete", "Családja"],
    "building": ["Története", "Leírása", "Gyűjteménye", "Környéke", "Látogatása"],
}

# Sentence patterns; {slots} are filled by _ProseGenerator.slot(). a_ before a slot puts the definite article before it.
PATTERNS = [
    "{a_AN} {T_loc} található.",
    "{Y_ine} {a_N_acc} {Person} {Vt_def_past}.",
    "{a_N_ine} {Num} {N} {Vi_past}.",
    "{Adv} {a_N_ill} {Num} {N} {Vi_past}.",
    "{Person} {C_ine} {Vi_past} {T_loc}.",
    "{a_AN} {a_N_del} kapta a nevét.",
    "{a_N} {A} és {A}.",
    "{a_N} {Y_ine} {A} {N} volt.",
    "Az itt élő emberek {N_acc} és {N_acc} {Vt_pl}.",
    "{a_N_pl} {Adv} {Vi_pl}.",
    "{a_N} {Adv} {a_N_sub} néz.",
    "{Person}, a híres {Occ}, {T_loc} {Vi_past}.",
    "{a_AN_acc} {Y_ine} {Person} {Vt_def_past}.",
    "{Adv} {a_N} {a_N_ins} együtt {Vi_past}.",
    "{a_N_abl} nem messze {Num} {A} {N} {Vi}.",
    "{T} {A} {N}, ahol {Num} {N} {Vi}.",
    "{a_AN} {Adv} {a_N_acc} {Vt_def}.",
    "{a_N_ine} {Num} {N_acc} {Vt_indef_past} {Person}.",
    "{Person} {Y_ine} {a_N_acc} {Vt_def_past}, amely {Adv} {Vi}.",
    "{a_N} {a_N_dat} {A} része.",
    "{a_N} az egyik legrégebbi {N} {T_loc}.",
    "{a_N_ine} évente {N_acc} rendeznek.",
    "{Person} szerint {a_AN} {A}.",
    "{a_N} {Y_ine} {Num} {N_acc} kapott.",
    "{a_N_pl} között {A} {N_pl} is {Vi_pl}.",
    "{R_loc} {Num} {A} {N} {Vi}.",
    "{a_AN_ine} {Adv} {a_AN} {Vi}.",
    "{C_ine} {a_N_acc} {A} {N_ins} {Vt_def_past} {Person}.",
    "{a_N} {R_loc} is {A}, ezért {Num} {N} {Vi} ide.",
    "{Adv} {a_N_dat} is {A} {N} {Vi}.",
    "{a_N_ela} {A} {N} lett.",
    "{Person} {Adv} {a_N_all} {Vi_past}.",
]
# each pattern split at its slots: (the literal texts around them, the slot names)
PATTERN_PARTS = [(parts[0::2], parts[1::2]) for parts in (re.split(r"\{(\w+)\}", p) for p in PATTERNS)]
VERB_FORMS = {"Vi": 0, "Vi_past": 1, "Vi_pl": 2, "Vt_indef": 0, "Vt_def": 1, "Vt_indef_past": 2, "Vt_def_past": 3,
              "Vt_pl": 4}  # a verb slot's index into its INTRANSITIVE_VERBS / TRANSITIVE_VERBS tuple
WIKI_LINK = re.compile(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]")

ENGLISH_NOUNS = [("town", "towns"), ("village", "villages"), ("river", "rivers"), ("church", "churches"),
                 ("castle", "castles"), ("market", "markets"), ("school", "schools"), ("bridge", "bridges"),
                 ("garden", "gardens"), ("museum", "museums"), ("library", "libraries"), ("farm", "farms"),
                 ("hill", "hills"), ("valley", "valleys"), ("forest", "forests"), ("lake", "lakes"),
                 ("road", "roads"), ("tower", "towers"), ("harbor", "harbors"), ("festival", "festivals"),
                 ("street", "streets"), ("mill", "mills"), ("station", "stations"), ("park", "parks"),
                 ("house", "houses"), ("painter", "painters"), ("farmer", "farmers"), ("teacher", "teachers")]
ENGLISH_ADJECTIVES = ["old", "small", "large", "famous", "quiet", "beautiful", "important", "ancient", "modern",
                      "green", "busy", "historic", "popular", "narrow", "wide", "northern", "southern", "local"]
ENGLISH_NAMES = ["John Smith", "Mary Brown", "William Taylor", "Sarah Wilson", "James Walker", "Emma Wright",
                 "Thomas Green", "Alice Hall", "George Baker", "Helen Clarke"]
ENGLISH_PATTERNS = [
    "The {N} is a {A} {N} in the {Dir} of the country.",
    "It was founded in {Y} by {Person}.",
    "The {N} has a {A} {N} and a {A} {N}.",
    "Many {N_pl} visit the {N} every {Season}.",
    "The local {N_pl} are known for their {A} {N_pl}.",
    "In {Y}, a {A} {N} was built near the {N}.",
    "Today the {N} is one of the most {A} places in the region.",
    "{Person} lived here for many years and wrote about the {N_pl}.",
    "The {A} {N} was rebuilt after the war and is now open to visitors.",
    "There is also a {A} {N} where people meet on weekends.",
]

TEMPLATES = {
    "Sablon:Település infobox": "{| class=\"infobox\"\n|+ {{{név}}}\n|-\n| Megye || {{{megye}}}\n|-\n"
                                "| Lakosság || {{{lakosság}}}\n|}<noinclude>\nA települések adatai.\n"
                                "[[Kategória:Infobox sablonok]]</noinclude>",
    "Sablon:Személy infobox": "{| class=\"infobox\"\n|+ {{{név}}}\n|-\n| Született || {{{születés}}}\n|-\n"
                              "| Foglalkozás || {{{foglalkozás}}}\n|}<noinclude>\nSzemélyek adatai.</noinclude>",
    "Sablon:Lakosság": "{{{1}}} fő<noinclude>\nA lakosok számát írja ki: <code>{{lakosság|1234}}</code>.</noinclude>",
    "Sablon:Népesség": "#ÁTIRÁNYÍTÁS [[Sablon:Lakosság]]",
    "Sablon:Kb": "körülbelül<noinclude>\nKözelítő érték jelzése.</noinclude>",
    "Sablon:Egyért": "<div class=\"egyert\">Ez egy egyértelműsítő lap.</div>__DISAMBIG__",
    "Sablon:Csonk": "<div class=\"csonk\">Ez a szócikk még csonk.</div><noinclude>"
                    "[[Kategória:Csonkok]]</noinclude>",
}

SITEINFO = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ \
http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" xml:lang="{lang}">
  <siteinfo>
    <sitename>{sitename}</sitename>
    <dbname>{lang}wiki</dbname>
    <base>https://{lang}.wikipedia.org/wiki/{main_page}</base>
    <generator>MediaWiki 1.43.0-wmf.23</generator>
    <case>first-letter</case>
    <namespaces>
{namespaces}
    </namespaces>
  </siteinfo>
"""
CLOSING = "</mediawiki>\n"

BACK_VOWELS = set("aáoóuú")
ROUNDED_FRONT_VOWELS = set("öőüű")
VOWELS = BACK_VOWELS | ROUNDED_FRONT_VOWELS | set("eéií")
DIGRAPHS = ("sz", "zs", "cs", "gy", "ly", "ny", "ty", "dz")
BACK_EXCEPTIONS = {"kastély"}
PLAIN_T_ENDINGS = {"j", "l", "ly", "n", "ny", "r", "s", "sz", "zs"}  # accusative -t without a linking vowel


# --- Hungarian morphology -----------------------------------------------------------------------------------------

def harmony(word: str) -> str:
    """'back', 'front' or 'rounded': which suffix variant a word takes (-ban/-ben, -hoz/-hez/-höz).
    The last vowel decides; i and í are neutral (papírban), e and é are not (polgármesterben)."""
    vowels = [c for c in word.lower() if c in VOWELS]
    if word in BACK_EXCEPTIONS or (vowels and vowels[-1] in BACK_VOWELS):
        return "back"
    if not vowels:
        return "front"
    if vowels[-1] in ROUNDED_FRONT_VOWELS:
        return "rounded"
    return "back" if vowels[-1] in "ií" and any(v in BACK_VOWELS for v in vowels) else "front"


def _pick(word: str, back: str, front: str, rounded: str | None = None) -> str:
    h = harmony(word)
    return back if h == "back" else (rounded if h == "rounded" and rounded else front)


def inflect(noun: str, case: str) -> str:
    """A noun (optionally marked with '*' for a low linking vowel) in a case: nom, acc, pl, ine, ill, ela, dat, sub,
    del, abl, all, ins."""
    low = noun.endswith("*")
    word = noun.rstrip("*")
    if case == "nom":
        return word
    ends_in_vowel = word[-1] in VOWELS
    stem = word[:-1] + {"a": "á", "e": "é"}.get(word[-1], word[-1])
    if case == "acc":
        if ends_in_vowel:
            return stem + "t"
        if low:
            return word + _pick(word, "at", "et")
        if _final_consonant(word) in PLAIN_T_ENDINGS:
            return word + "t"
        return word + _pick(word, "ot", "et", "öt")
    if case == "pl":
        if ends_in_vowel:
            return stem + "k"
        return word + (_pick(word, "ak", "ek") if low else _pick(word, "ok", "ek", "ök"))
    if case == "ins":
        if ends_in_vowel:
            return stem + _pick(word, "val", "vel")
        last = _final_consonant(word)
        doubled = word if word.endswith(last * 2) else word[:-len(last)] + last[0] + last
        return doubled + _pick(word, "al", "el")
    suffixes = {"ine": ("ban", "ben"), "ill": ("ba", "be"), "ela": ("ból", "ből"), "dat": ("nak", "nek"),
                "sub": ("ra", "re"), "del": ("ról", "ről"), "abl": ("tól", "től"), "all": ("hoz", "hez", "höz")}
    return stem + _pick(word, *suffixes[case])


def _final_consonant(word: str) -> str:
    return next((d for d in DIGRAPHS if word.endswith(d)), word[-1])


def year_inessive(year: int) -> str:
    """1867-ben, 1900-ban: the suffix follows how the number is read out."""
    if year % 1000 == 0:
        back = False  # ezer
    elif year % 100 == 0:
        back = True  # száz
    elif year % 10 == 0:
        back = (year // 10) % 10 in (2, 3, 6, 8)  # húsz, harminc, hatvan, nyolcvan
    else:
        back = year % 10 in (3, 6, 8)  # három, hat, nyolc
    return f"{year}-{'ban' if back else 'ben'}"


# --- page generation ----------------------------------------------------------------------------------------------

class _ProseGenerator:
    """Hungarian-like sentences and paragraphs about the current topic (a place, a region, a person)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.topic_loc = "Budapesten"
        self.topic_name = "Budapest"
        self.region = REGIONS[0]
        self.person = "Kovács János"

    def choice(self, items):
        return self.rng.choice(items)

    def person_name(self) -> str:
        given = self.choice(GIVEN_NAMES)
        if self.rng.random() < 0.3:
            given += " " + self.choice(GIVEN_NAMES)
        return f"{self.choice(FAMILY_NAMES)} {given}"

    def linked(self, lemma: str, form: str) -> str:
        """Some words become wiki links: [[lemma]]suffix or [[Lemma|form]]."""
        roll = self.rng.random()
        if roll > 0.12:
            return form
        if form.startswith(lemma) and roll < 0.06:
            return f"[[{lemma}]]{form[len(lemma):]}"
        return f"[[{lemma[0].upper() + lemma[1:]}|{form}]]"

    def noun(self, case: str) -> str:
        noun = self.choice(NOUNS)
        return self.linked(noun.rstrip("*"), inflect(noun, case))

    def slot(self, name: str) -> str:
        if name.startswith("a_"):
            phrase = self.slot(name[2:])
            plain = WIKI_LINK.sub(r"\1", phrase) if "[[" in phrase else phrase
            return ("az " if plain[:1].lower() in VOWELS else "a ") + phrase
        if name.startswith("AN"):
            return f"{self.choice(ADJECTIVES)} {self.noun(name[3:] or 'nom')}"
        if name == "N" or name.startswith("N_"):
            return self.noun(name[2:] or "nom")
        # every other slot draws a verb of each kind first (the draws the sample's bytes were made with)
        verb_i, verb_t = self.choice(INTRANSITIVE_VERBS), self.choice(TRANSITIVE_VERBS)
        if name[0] == "V":
            return verb_i[VERB_FORMS[name]] if name[1] == "i" else verb_t[VERB_FORMS[name]]
        rng = self.rng
        if name == "A":
            return self.choice(ADJECTIVES)
        if name == "T":
            return self.topic_name
        if name == "T_loc":
            return self.topic_loc if rng.random() < 0.6 else self.choice(TOWNS)[1]
        if name == "R_loc":
            return self.region[1]
        if name == "Person":
            return self.person if rng.random() < 0.5 else self.person_name()
        if name == "Occ":
            return self.choice(OCCUPATIONS)
        if name == "Y_ine":
            return year_inessive(rng.randint(1250, 2020))
        if name == "C_ine":
            return f"a {rng.randint(11, 20)}. században"
        if name == "Num":
            return self.choice(NUMBERS)
        if name == "Adv":
            return self.choice(ADVERBS)
        raise KeyError(name)

    def sentence(self) -> str:
        literals, slots = PATTERN_PARTS[self.rng.choice(range(len(PATTERNS)))]
        parts = [literals[0]]
        for name, literal in zip(slots, literals[1:]):
            parts += (self.slot(name), literal)
        text = "".join(parts)
        return text[0].upper() + text[1:]

    def paragraph(self, sentences: int, refs: list[str]) -> str:
        out = []
        for _ in range(sentences):
            s = self.sentence()
            if self.rng.random() < 0.12:
                s += self.reference(refs)
            out.append(s)
        return " ".join(out)

    def reference(self, refs: list[str]) -> str:
        if refs and self.rng.random() < 0.3:
            return f'<ref name="{self.choice(refs)}" />'
        book = f"{self.choice(ADJECTIVES).capitalize()} {inflect(self.choice(NOUNS), 'pl')}"
        source = (f"{self.person_name()}: ''{book}''. {self.choice(TOWNS)[0]}: Akadémiai Kiadó, "
                  f"{self.rng.randint(1950, 2023)}. "
                  f"{self.rng.randint(3, 400)}. o.")
        if self.rng.random() < 0.4:
            name = f"r{len(refs) + 1}"
            refs.append(name)
            return f'<ref name="{name}">{source}</ref>'
        if self.rng.random() < 0.3:
            return f"<ref>{{{{cite book|title={source}|year={self.rng.randint(1950, 2023)}}}}}</ref>"
        return f"<ref>{source}</ref>"

    def body(self, kind: str, sentences: int) -> str:
        """Sections of paragraphs; sentences are spread over them."""
        refs: list[str] = []
        sections = self.rng.sample(SECTION_TITLES[kind], k=min(len(SECTION_TITLES[kind]), 1 + sentences // 6))
        lead = max(2, sentences // (len(sections) + 1))
        parts = [self.paragraph(lead, refs)]
        left = sentences - lead
        for i, title in enumerate(sections):
            n = left if i == len(sections) - 1 else max(1, left // (len(sections) - i))
            left -= n
            if n <= 0:
                continue
            chunks = [self.paragraph(k, refs) for k in _split(n, self.rng)]
            parts.append(f"== {title} ==\n" + "\n\n".join(chunks))
        parts.append("== Jegyzetek ==\n<references />")
        return "\n\n".join(parts)


def _split(n: int, rng: random.Random) -> list[int]:
    """n sentences as paragraphs of 2-5."""
    out = []
    while n > 0:
        k = min(n, rng.randint(2, 5))
        out.append(k)
        n -= k
    return out


def _settlement_name(rng: random.Random) -> tuple[str, str]:
    """(name, its inessive): the suffix follows the last part of the compound (Tiszahegyben, Nagyvárban)."""
    prefix, base = rng.choice(NAME_PREFIXES), rng.choice(NAME_BASES)
    if rng.random() < 0.3:
        prefix += rng.choice(NAME_PREFIXES).lower()
    return prefix + base, prefix + inflect(base, "ine")


def _building_name(rng: random.Random) -> tuple[str, tuple]:
    town, noun = rng.choice(TOWNS), rng.choice(NOUNS).rstrip("*")
    return f"{town[2].capitalize()} {noun}", (town, noun)


def _settlement(w: _ProseGenerator, title: str, sentences: int) -> str:
    """w.topic_loc is already the title's inessive."""
    county = w.choice(COUNTIES)
    w.topic_name = title
    w.region = w.choice(REGIONS)
    population = w.rng.randint(150, 9800)
    pop_template = w.choice(["lakosság", "Lakosság", "népesség"])
    lead = (f"'''{title}''' [[község]] [[{county} vármegye|{county} megyében]], {w.region[1]}. "
            f"A település lakossága {{{{{pop_template}|{population}}}}}. "
            f"{w.topic_loc.capitalize()} {{{{kb}}}} {w.rng.randint(20, 90)} utca és tér van.")
    infobox = f"{{{{Település infobox\n| név = {title}\n| megye = {county}\n| lakosság = {population}\n}}}}\n"
    image = f"[[Fájl:{title} látképe.jpg|bélyegkép|jobbra|{title} látképe]]\n" if w.rng.random() < 0.5 else ""
    return (infobox + image + lead + " " + w.body("settlement", sentences - 2) +
            f"\n\n[[Kategória:{county} vármegye települései]]\n[[Kategória:Magyarország települései]]")


def _person(w: _ProseGenerator, title: str, sentences: int) -> str:
    occupation = w.choice(OCCUPATIONS)
    born = w.rng.randint(1700, 1950)
    town = w.choice(TOWNS)
    w.person, w.topic_name, w.topic_loc = title, town[0], town[1]
    w.region = w.choice(REGIONS)
    infobox = f"{{{{Személy infobox\n| név = {title}\n| születés = {born}\n| foglalkozás = {occupation}\n}}}}\n"
    lead = f"'''{title}''' ([[{town[0]}]], {born} – {born + w.rng.randint(30, 90)}) magyar [[{occupation}]]."
    return (infobox + lead + " " + w.body("person", sentences - 1) +
            f"\n\n[[Kategória:Magyar {inflect(occupation, 'pl')}]]")


def _building(w: _ProseGenerator, title: str, sentences: int, town: tuple[str, str, str], noun: str) -> str:
    w.topic_name, w.topic_loc = town[0], town[1]
    w.region = w.choice(REGIONS)
    the = "Az" if title[0].lower() in VOWELS else "A"
    lead = f"{the} '''{title}''' {w.choice(ADJECTIVES)} [[{noun}]] [[{town[0]}|{town[1]}]]."
    image = f"[[Fájl:{title}.jpg|bélyegkép|{title} homlokzata]]\n" if w.rng.random() < 0.6 else ""
    return image + lead + " " + w.body("building", sentences - 1) + f"\n\n[[Kategória:{town[0]} építményei]]"


def english_sentences(rng: random.Random, sentences: int) -> list[str]:
    """English sentences from ENGLISH_PATTERNS (the sample dump's English articles, the sample corpus's pages in
    another language)."""
    def fill(m):
        name = m.group(1)
        noun = rng.choice(ENGLISH_NOUNS)
        return {"N": noun[0], "N_pl": noun[1], "A": rng.choice(ENGLISH_ADJECTIVES), "Y": str(rng.randint(1700, 1990)),
                "Person": rng.choice(ENGLISH_NAMES), "Dir": rng.choice(["north", "south", "east", "west"]),
                "Season": rng.choice(["spring", "summer", "autumn", "winter"])}[name]

    text = [re.sub(r"\{(\w+)\}", fill, rng.choice(ENGLISH_PATTERNS)) for _ in range(sentences)]
    return [s[0].upper() + s[1:] for s in text]


def _english(w: _ProseGenerator, title: str, sentences: int) -> str:
    text = english_sentences(w.rng, sentences)
    return f"'''{title}''' is a place described in English. " + " ".join(text[:len(text) // 2]) + \
        "\n\n== History ==\n" + " ".join(text[len(text) // 2:]) + "\n\n[[Kategória:Angol nyelvű szócikkek]]"


def _talk(w: _ProseGenerator) -> str:
    sentences = " ".join(w.sentence() for _ in range(w.rng.randint(1, 3)))
    user = w.choice(GIVEN_NAMES)
    return (f"== Forrás ==\n{sentences} --[[Szerkesztő:{user}|{user}]] ([[Szerkesztővita:{user}|vita]]) "
            f"2024. március {w.rng.randint(1, 28)}., 10:{w.rng.randint(10, 59)} (CET)")


def iter_pages(articles: int = 400, seed: int = 0) -> Iterator[Page]:
    """The pages of a sample dump of any size in dump order, one block of BLOCK_ARTICLES articles in memory at a
    time; up to BLOCK_ARTICLES articles, the pages of generate_pages(articles, seed)."""
    for block, block_articles, first_id in _blocks(articles):
        yield from generate_pages(block_articles, seed, block, first_id)


def _blocks(articles: int) -> Iterator[tuple[int, int, int]]:
    """(block number, its articles, its first page id) of each block of a dump of `articles` articles."""
    first_id = 1
    for block, start in enumerate(range(0, articles, BLOCK_ARTICLES)):
        block_articles = min(BLOCK_ARTICLES, articles - start)
        yield block, block_articles, first_id
        first_id += block_articles + sum(_other_pages(block_articles).values()) + (len(TEMPLATES) if block == 0 else 0)


def _other_pages(articles: int) -> dict[str, int]:
    """How many pages of each other kind a block of `articles` articles has (templates aside: block 0 has them)."""
    return {"stub": max(2, articles // 30), "english": max(2, articles // 30), "redirect": max(4, articles // 10),
            "disambiguation": max(2, articles // 40), "empty": max(2, articles // 100),
            "talk": max(3, articles // 25), "category": min(len(COUNTIES), max(2, articles // 80)),
            "file": max(2, articles // 100)}


def generate_pages(articles: int = 400, seed: int = 0, block: int = 0, first_id: int = 1) -> list[Page]:
    """The pages of the sample dump in dump order (ids first_id, first_id + 1, ...), the same for the same
    arguments. Block 0 holds the templates; a later block is seeded by (seed, block) and its titles end in
    " (block + 1)"."""
    rng = random.Random(seed if block == 0 else f"{seed}:{block}")
    w = _ProseGenerator(rng)
    used: set[str] = set(TEMPLATES)
    suffix = f" ({block + 1})" if block else ""
    entries: list[tuple[str, int, str, str, str | None]] = []  # (title, ns, text, kind, redirect)

    def unique(make):
        """make() -> (title, extra) until the title is new."""
        for _ in range(1000):
            title, extra = make()
            if title not in used:
                used.add(title)
                return title + suffix, extra
        raise RuntimeError("ran out of titles: ask for fewer articles")

    other = _other_pages(articles)
    article_titles = []
    for i in range(articles):
        topic = ("settlement", "person", "building")[i % 3]
        sentences = rng.randint(8, 25)
        if topic == "settlement":
            title, w.topic_loc = unique(lambda: _settlement_name(rng))
            text = _settlement(w, title, sentences)
        elif topic == "person":
            title, _ = unique(lambda: (w.person_name(), None))
            text = _person(w, title, sentences)
        else:
            title, (town, noun) = unique(lambda: _building_name(rng))
            text = _building(w, title, sentences, town, noun)
        entries.append((title, 0, text, "article", None))
        article_titles.append(title)

    for _ in range(other["stub"]):
        title, w.topic_loc = unique(lambda: _settlement_name(rng))
        w.topic_name = title
        text = f"'''{title}''' kis [[település]] {rng.choice(REGIONS)[1]}." + \
            (f" {w.sentence()}" if rng.random() < 0.5 else "") + "\n\n{{csonk}}"
        entries.append((title, 0, text, "stub", None))
    for _ in range(other["english"]):
        title, _ = unique(lambda: (f"{rng.choice(ENGLISH_ADJECTIVES).capitalize()} "
                                   f"{rng.choice(ENGLISH_NOUNS)[0].capitalize()}", None))
        entries.append((title, 0, _english(w, title, rng.randint(8, 14)), "english", None))

    for i in range(other["redirect"]):
        target = rng.choice(article_titles)
        variant = ["község", "település", "névváltozat", "régi név"]
        title, _ = unique(lambda: (f"{target} ({rng.choice(variant)})", None))
        word = "REDIRECT" if i % 5 == 1 else ("átirányítás" if i % 5 == 3 else "ÁTIRÁNYÍTÁS")
        element = None if i % 7 == 2 else target  # a few carry only the text, no <redirect> element
        entries.append((title, 0, f"#{word} [[{target}]]", "redirect", element))
    for i in range(other["disambiguation"]):
        base, _ = unique(lambda: (_settlement_name(rng)[0] + " (egyértelműsítő lap)", None))
        items = "\n".join(f"* [[{rng.choice(article_titles)}]], {rng.choice(ADJECTIVES)} "
                          f"{rng.choice(NOUNS).rstrip('*')}" for _ in range(rng.randint(2, 4)))
        marker = "__DISAMBIG__" if i % 3 == 1 else rng.choice(["{{egyért}}", "{{Egyért}}"])
        entries.append((base, 0, f"'''{base.split(' (')[0]}''' a következőket jelentheti:\n{items}\n\n{marker}",
                        "disambiguation", None))
    for i in range(other["empty"]):
        title, _ = unique(lambda: (_settlement_name(rng)[0] + " (üres)", None))
        text = "" if i % 2 == 0 else f"{{{{Település infobox\n| név = {title}\n}}}}\n[[Kategória:Üres lapok]]"
        entries.append((title, 0, text, "empty", None))
    for title in rng.sample(article_titles, k=other["talk"]):
        entries.append((f"Vita:{title}", 1, _talk(w), "talk", None))
    for county in rng.sample(COUNTIES, k=other["category"]):
        entries.append((f"Kategória:{county} vármegye települései{suffix}", 14,
                        f"{county} vármegye községei és városai.\n\n[[Kategória:Magyarország települései]]",
                        "category", None))
    for title in rng.sample(article_titles, k=other["file"]):
        entries.append((f"Fájl:{title}.jpg", 6,
                        f"== Összefoglaló ==\n{title} képe.\n\n== Licenc ==\n{{{{cc-by-sa-4.0}}}}", "file", None))

    rng.shuffle(entries)
    # Templates sit among the articles, some far into the dump: the extract stage must collect them all first.
    for title, text in TEMPLATES.items() if block == 0 else ():
        redirect = re.match(r"#ÁTIRÁNYÍTÁS \[\[(.*)\]\]", text)
        entries.insert(rng.randint(0, len(entries)), (title, 10, text, "template",
                                                      redirect.group(1) if redirect else None))
    return [Page(i, title, ns, text, kind, redirect)
            for i, (title, ns, text, kind, redirect) in enumerate(entries, first_id)]


# --- XML and the dump layouts -------------------------------------------------------------------------------------

def siteinfo_xml(language: str = "hu") -> str:
    """The <mediawiki> line and <siteinfo> of a sample dump in `language`: a language of SAMPLE_LANGUAGES has its
    wiki's names, any other code (a bench's own pages in it) huwiki's names under its own xml:lang and dbname."""
    if language not in LANGUAGES:
        sitename, main_page, namespaces = "Wikipédia", "Kezd%C5%91lap", NAMESPACES
    else:
        other = LANGUAGES[language]
        sitename, main_page, namespaces = other.sitename, other.main_page, other.namespaces
    lines = []
    for key, name in namespaces.items():
        lines.append(f'      <namespace key="{key}" case="first-letter" />' if not name else
                     f'      <namespace key="{key}" case="first-letter">{escape(name)}</namespace>')
    text = SITEINFO.replace("{lang}", language).replace("{sitename}", sitename).replace("{main_page}", main_page)
    return text.replace("{namespaces}", "\n".join(lines))


def page_xml(page: Page) -> str:
    data = page.text.encode("utf-8")
    sha1 = _base36_sha1(data)
    revision = 1000 + page.id * 3
    redirect = f'    <redirect title="{escape(page.redirect, {chr(34): "&quot;"})}" />\n' if page.redirect else ""
    text = (f'      <text bytes="{len(data)}" sha1="{sha1}" xml:space="preserve">'
            f'{escape(page.text, {chr(34): "&quot;"})}</text>\n' if page.text else
            f'      <text bytes="0" sha1="{sha1}" xml:space="preserve" />\n')
    return (f"  <page>\n    <title>{escape(page.title)}</title>\n    <ns>{page.ns}</ns>\n    <id>{page.id}</id>\n"
            f"{redirect}    <revision>\n      <id>{revision}</id>\n      <parentid>{revision - 1}</parentid>\n"
            f"      <timestamp>2024-09-{1 + page.id % 19:02d}T{page.id % 24:02d}:{page.id % 60:02d}:00Z</timestamp>\n"
            f"      <contributor>\n        <username>Mintaszerkesztő</username>\n        <id>{7 + page.id % 5}</id>\n"
            f"      </contributor>\n      <origin>{revision}</origin>\n      <model>wikitext</model>\n"
            f"      <format>text/x-wiki</format>\n{text}      <sha1>{sha1}</sha1>\n    </revision>\n  </page>\n")


def _base36_sha1(data: bytes) -> str:
    n = int(hashlib.sha1(data).hexdigest(), 16)
    digits = ""
    while n:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return digits.rjust(31, "0")


def write_multistream(pages: Iterable[Page], dump: Path, index: Path, pages_per_stream: int = PAGES_PER_STREAM,
                      language: str = "hu") -> None:
    """Wikimedia's layout: one bz2 stream for <mediawiki><siteinfo>, one per `pages_per_stream` pages, one for
    </mediawiki>; the index lists `offset:page_id:title` with the byte offset of the page's stream. Both files are
    written as the pages come (one stream's pages in memory) and renamed into place when complete."""
    _write_streams(_compressed_streams(pages, pages_per_stream), dump, index, language)


def _compressed_streams(pages: Iterable[Page], pages_per_stream: int) -> Iterator[tuple[bytes, list[tuple[int, str]]]]:
    """(a bz2 stream of `pages_per_stream` pages, their (id, title)) for the pages in order."""
    pages = iter(pages)
    while chunk := list(itertools.islice(pages, pages_per_stream)):
        yield bz2.compress("".join(page_xml(p) for p in chunk).encode("utf-8"), 9), [(p.id, p.title) for p in chunk]


def _block_streams(task: tuple[int, int, int, int]) -> list[tuple[bytes, list[tuple[int, str]]]]:
    """A worker's task: the compressed streams of one block (seed, block, its articles, its first page id)."""
    seed, block, articles, first_id = task
    return list(_compressed_streams(generate_pages(articles, seed, block, first_id), PAGES_PER_STREAM))


def _write_streams(streams: Iterable[tuple[bytes, list[tuple[int, str]]]], dump: Path, index: Path,
                   language: str) -> None:
    index_compressor = bz2.BZ2Compressor(9)
    with atomic_write(dump, "wb") as f, atomic_write(index, "wb") as index_file:
        f.write(bz2.compress(siteinfo_xml(language).encode("utf-8"), 9))
        for stream, pages in streams:
            offset = f.tell()
            f.write(stream)
            index_file.write(index_compressor.compress("".join(f"{offset}:{page_id}:{title}\n"
                                                               for page_id, title in pages).encode("utf-8")))
        f.write(bz2.compress(CLOSING.encode("utf-8"), 9))
        index_file.write(index_compressor.flush())


def write_sample_dump(out_dir: Path, articles: int = 400, seed: int = 0, quiet: bool = True,
                      language: str = "hu", workers: int = 1) -> Path:
    """`pipeline sample-dump`: the multistream dump and its index under out_dir, in `language` (one of
    SAMPLE_LANGUAGES); returns the dump's path. Hungarian dumps are made a block at a time by `workers` processes
    (the same bytes whatever their number); each block's pages start a new stream."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dump, index = out_dir / DUMP_NAME.replace("hu", language, 1), out_dir / INDEX_NAME.replace("hu", language, 1)
    with progress(articles, "sample-dump", "articles", quiet=quiet) as bar:
        if language == "hu":
            blocks = list(_blocks(articles))

            def counted_blocks() -> Iterator[tuple[bytes, list[tuple[int, str]]]]:
                streams = LocalExecutor(workers).map(_block_streams, [(seed, *block) for block in blocks])
                for (_, block_articles, _), block_streams in zip(blocks, streams):
                    yield from block_streams
                    bar.update(block_articles)

            _write_streams(counted_blocks(), dump, index, language)
            return dump

        def counted(pages: Iterator[Page]) -> Iterator[Page]:
            for page in pages:
                if page.kind == "article":
                    bar.update(1)
                yield page

        pages = (Page(i, *fields) for i, fields in enumerate(iter_language_pages(language, articles, seed), 1))
        write_multistream(counted(pages), dump, index, language=language)
    return dump


def articles_for_mb(mb: float) -> int:
    """The articles of a Hungarian sample dump of about `mb` MB of XML (within a few percent from 1 MB up)."""
    return max(1, round(mb * 1e6 / XML_BYTES_PER_ARTICLE))
