"""Hungarian web pages written for the filter's web rules (not copied from anywhere): a clean article, and for each
web rule a page made to trip it and nothing before it (rules.py's order).

A page is a list of paragraphs, a paragraph a list of lines, a line a list of sentences (what the sentences stage
makes of a page and records as PARAGRAPHS); `flat(page)` gives (sentences, PARAGRAPHS)."""
from __future__ import annotations

Page = list[list[list[str]]]

PAGE: Page = [
    [["A kis pékség harminc éve működik a falu főterén, egy régi parasztház földszintjén."],
     ["Minden reggel négy órakor gyújtják be a kemencét, hogy hatra elkészüljön az első kenyér."]],
    [["A tulajdonos nagyapja még vízimalomban őrölte a lisztet.",
      "Az unokája ma is helyi gazdáktól vásárolja a búzát."]],
    [["A legnépszerűbb termékük a burgonyás kenyér, amelyet hétvégén a szomszéd városokból is sokan keresnek."],
     ["Ünnepek előtt kalácsot és bejglit is sütnek, ilyenkor hosszú sor áll az ajtó előtt."]],
    [["A pék szerint a jó kenyér titka a türelem: a tésztát lassan, hűvös helyen kell keleszteni."]],
    [["Tavaly új kemencét építettek, de a régit sem bontották el, mert abban sül a legszebb héjú cipó."],
     ["A munkát ma már hat ember végzi, közülük ketten tanulóként kezdték a szakmát."]],
    [["Nyáron a pékség előtt kis asztalokat helyeznek el, ahol friss pogácsát és kávét kínálnak az arra járóknak."]],
]

NAVIGATION = [["Főoldal | Hírek | Receptek | Kapcsolat"]]
FOOTER = [["© 2024 Falusi Pékség"]]
LONG_PARAGRAPH = [
    ["A pékség története a két világháború között kezdődött, amikor a tulajdonos nagyapja hazatért a fővárosból, ahol "
     "évekig egy híres cukrászdában dolgozott segédként."],
    ["Hazatérése után a szülői ház hátsó szobájában rendezte be az első műhelyt, és eleinte csak a szomszédoknak "
     "sütött, ünnepnapokon pedig a templom előtt árulta a süteményeit."],
    ["A háború után a műhelyt államosították, de a család titokban tovább sütötte a régi recept szerinti kalácsot."],
]
SHARED_LINE = ["Kövesse oldalunkat a közösségi médiában is, és értesüljön elsőként az újdonságokról!"]
SHARED_SENTENCE = ("Rendelését telefonon vagy személyesen is leadhatja, az ár tartalmazza az általános forgalmi adót, "
                   "a csomagolást és a házhoz szállítás költségét is, amennyiben a település határán belül lakik.")
CITIES = ["Rómába", "Párizsba", "Londonba", "Berlinbe", "Bécsbe", "Prágába", "Madridba", "Athénba", "Varsóba",
          "Lisszabonba", "Dublinba", "Oslóba", "Stockholmba", "Helsinkibe", "Koppenhágába", "Brüsszelbe", "Zágrábba",
          "Szófiába"]
ENGLISH = ["The small bakery has been open on the village square for thirty years.",
           "Every morning they light the oven at four o'clock.", "Their most popular product is the potato bread.",
           "Before holidays they also bake milk loaf and poppy seed rolls.",
           "In summer they put small tables in front of the bakery."]


def line_page(line: str) -> Page:
    """PAGE with one more paragraph: `line`."""
    return PAGE + [[[line]]]


# rule -> a page that trips it (and no rule before it)
DROPPED: dict[str, Page] = {
    "duplicate_paragraphs": PAGE + PAGE[:3],
    "duplicate_paragraph_chars": PAGE + [LONG_PARAGRAPH, LONG_PARAGRAPH],
    "duplicate_lines": [paragraph + [SHARED_LINE] for paragraph in PAGE],
    "duplicate_line_chars": PAGE[:3] + [LONG_PARAGRAPH[:1] + PAGE[3]] + PAGE[4:] + [PAGE[2][:1] + LONG_PARAGRAPH[:1]],
    "top_ngram": PAGE[:2] + [[[f"Olcsó repülőjegy {CITIES[i]}, olcsó repülőjegy {CITIES[i + 1]} és olcsó repülőjegy "
                               f"{CITIES[i + 2]}."]] for i in range(0, len(CITIES), 3)],
    "duplicate_ngrams": [[[*line, SHARED_SENTENCE] for line in paragraph] if i % 2 else paragraph
                         for i, paragraph in enumerate(PAGE)],
    "no_terminal_punctuation": [NAVIGATION, [["Receptek | Galéria"]],
                                [["© 2024 Falusi Pékség – minden jog fenntartva"]]],
    "lorem_ipsum": line_page("Lorem ipsum dolor sit amet, consectetur adipiscing elit."),
    "curly_bracket": line_page("A sablon a {cím} mezőt tölti ki automatikusan."),
    "mean_word_length": [[["Ma is ott ül a fa alatt, de ha jő a tél, ő is el megy."],
                          ["Az ő lova a kő mellé áll, és ha kell, ott is ül."],
                          ["Ki ez az úr, aki ma itt ül a ház elé?"]],
                         [["Ha nő a fű, a ló is jó, de ma még ne menj el."],
                          ["Te is ott ülj, ha az ég alja már kék."]],
                         [["Ő az, ki nem fél, de ha jő a ló, el is fut."]]],
    "stop_words": [[["Kézzel készült kerámia bögre, négyszáz milliliteres űrtartalommal, matt fekete mázzal."],
                    ["Mosogatógépben tisztítható, mikrohullámú sütőben használható."]],
                   [["Kiváló minőségű porcelán tányérkészlet tizenkét darabos kivitelben aranyszínű szegéllyel."],
                    ["Kávéscsésze csészealjjal kézzel festett virágmintával hatszemélyes kiszerelésben."]],
                   [["Szállítás három munkanapon belül, biztonságos csomagolásban, törés elleni védelemmel."],
                    ["Ajándékba adható díszdobozban, személyre szóló üzenettel kérhető."]],
                   [["Készleten lévő termékeink rendelés után azonnal postázásra kerülnek, ünnepnapokon hosszabb "
                     "határidővel."]]],
    # two Hungarian sentences before five English ones: py3langid (0.4) still says Hungarian, with probability 0.83
    "language_score": [[[*PAGE[0][0], *PAGE[0][1]]]] + [[[sentence]] for sentence in ENGLISH],
}

DROPPED.update({  # FineWeb quality's rules and Gopher's other quality rules
    "line_punctuation": [[[s.rstrip(".") for s in line] for line in paragraph] for paragraph in PAGE],
    "newline_ratio": [[[f"{city[:-1]} {i}."] for i, city in enumerate(CITIES)]],
    "doc_words": PAGE[:1],
    "symbol_ratio": PAGE + [[[" ".join(f"#{w}" for w in (
        "kenyér pékség kalács bejgli pogácsa kifli zsemle cipó kemence liszt élesztő tészta kovász rozs búza sütés "
        "reggel falu tér család recept").split()) + "."]]],
    "bullet_lines": [[[f"- {w}"] for w in (
        "Kenyér minden reggel frissen sütve, helyben.", "Kalács ünnepekre előrendelésre, dióval vagy mákkal.",
        "Kifli és zsemle hajnali hat órától kapható.", "Pogácsa tepertővel, sajttal, burgonyával.",
        "Bejgli karácsony előtt két héttel rendelhető.", "Cipó rozslisztből, kovásszal, lassú kelesztéssel.",
        "Rétes almával, túróval és meggyel töltve.", "Pite a szezon gyümölcseiből, nyáron barackkal.",
        "Perec sós és édes változatban a vásárokon.", "Torta születésnapra egyedi felirattal, díszítéssel.")]],
    "ellipsis_lines": [[[s[:-1] + "…" for s in line] if j % 2 == 0 else line for j, line in enumerate(paragraph)]
                       for paragraph in PAGE],
    "alpha_words": PAGE + [[["Árak: " + ", ".join(str(100 + 37 * i) for i in range(40)) + "."]]],
})

# line rule -> (a page with a line it drops, the index of that line's sentence): the rest of the page is kept
DROPPED_LINES: dict[str, tuple[Page, int]] = {
    "no_terminal_punctuation": ([NAVIGATION] + PAGE, 0),
    "javascript": (line_page("A térkép megjelenítéséhez engedélyezze a JavaScript futtatását a böngészőjében."), 10),
    "policy": (line_page("Ez a weboldal sütiket használ a jobb felhasználói élmény érdekében."), 10),
}


def flat(page: Page) -> tuple[list[str], list[list[int]]]:
    """(the page's sentences, its PARAGRAPHS)."""
    return ([s for paragraph in page for line in paragraph for s in line],
            [[len(line) for line in paragraph] for paragraph in page])
