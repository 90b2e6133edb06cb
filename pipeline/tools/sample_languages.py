"""The generated sample dump in other languages than Hungarian (`pipeline sample-dump OUT --lang fi|ru|el`): a
Latin-script language beside Hungarian (Finnish-like) and two in other scripts (Russian-like, Cyrillic; Greek-like),
for runs of several languages (`pipeline run --lang hu,fi,ru,el`) in the demo and the tests. No network, no copied
text: our own word lists and sentence patterns, written so that the words agree (Finnish places in the inessive,
genitive and elative; Russian and Greek adjectives and articles, Russian past-tense verbs in the gender of their
noun), in each wiki's markup: bold title,
[[links]], an infobox template from the template namespace, <ref>s, headings, categories; with stubs, redirects,
disambiguation pages and talk pages as in the Hungarian sample (pipeline/tools/sample_dump.py, which writes them).
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class SampleLanguage:
    code: str
    sitename: str
    main_page: str  # <base>'s page
    namespaces: dict[int, str]
    nouns: list[tuple[str, str]]  # (nominative, gender: m, f, n; Finnish: "")
    adjectives: list[tuple[str, ...]]  # Finnish: (nominative,); Russian: (masculine, feminine, neuter)
    # Finnish: (nominative, inessive, genitive, elative); Russian, Greek: (nominative, "в ..."/"στην ...", genitive)
    places: list[tuple[str, ...]]
    place_suffixes: list[str]  # made-up places: a place's name and one of these
    given_names: list[tuple[str, str]]  # (name, gender)
    family_names: list[tuple[str, str]]  # Russian: (masculine, feminine); Finnish: (name, name)
    occupations: list[str]
    adverbs: list[str]
    # verbs by kind: intransitive past and present, passive past; Russian: each (m, f, n)
    verbs: dict[str, list[tuple[str, ...]]]
    patterns: list[str]
    lead: dict[str, str]  # article kind -> its first sentence
    sections: dict[str, list[str]]
    infobox: tuple[str, str, str]  # the infobox template's name, its name and population parameters
    lead_gender: dict[str, str]  # article kind -> the gender of the noun its lead's adjective goes with
    category: dict[str, str]  # article kind -> its category ({place_gen}: the place's genitive)
    notes_heading: str
    stub: str  # a stub's sentence
    disambiguation: str  # the lead of a disambiguation page


FINNISH = SampleLanguage(
    code="fi", sitename="Wikipedia", main_page="Wikipedia:Etusivu",
    namespaces={-2: "Media", -1: "Toiminnot", 0: "", 1: "Keskustelu", 2: "Käyttäjä", 3: "Keskustelu käyttäjästä",
                4: "Wikipedia", 5: "Keskustelu Wikipediasta", 6: "Tiedosto", 7: "Keskustelu tiedostosta",
                8: "Järjestelmäviesti", 9: "Keskustelu järjestelmäviestistä", 10: "Malline",
                11: "Keskustelu mallineesta", 12: "Ohje", 13: "Keskustelu ohjeesta", 14: "Luokka",
                15: "Keskustelu luokasta"},
    nouns=[(w, "") for w in """
kaupunki kylä kirkko linna koulu tehdas joki järvi metsä vuori laakso saari satama tori puisto kirjasto museo
yliopisto sairaala asema silta tie katu talo ikkuna piha puutarha pelto niitty tila mylly kirja runo laulu maalaus
teatteri konsertti juhla kilpailu joukkue opettaja lääkäri taiteilija kauppias laiva juna kello radio kieli taide
perinne kansa maakunta seutu kukkula luola lähde ranta hiekka rauta kulta villa sota rauha taistelu liitto laki
virasto neuvosto yhdistys seura yritys kaivos leipomo kauppa näyttely kokoelma hautausmaa risti alttari urut kartta
matka retki jalkapallo uinti shakki tanssi satu tarina legenda kronikka vaakuna lippu vero sato viini juusto leipä
""".split()],
    adjectives=[(w,) for w in """
suuri pieni vanha uusi kuuluisa tärkeä kaunis hiljainen pitkä korkea matala leveä kapea syvä rikas köyhä vahva
nopea lämmin kylmä vihreä sininen punainen valkoinen musta keltainen harmaa puhdas muinainen moderni keskiaikainen
historiallinen kuninkaallinen perinteinen kiinnostava erikoinen merkittävä suosittu tunnettu hylätty suojeltu
hedelmällinen harvinainen jyrkkä tasainen aurinkoinen rauhallinen vilkas ystävällinen upea valtava kansainvälinen
paikallinen läheinen kaukainen pohjoinen eteläinen itäinen läntinen
""".split()],
    places=[("Helsinki", "Helsingissä", "Helsingin", "Helsingistä"), ("Turku", "Turussa", "Turun", "Turusta"),
            ("Tampere", "Tampereella", "Tampereen", "Tampereelta"), ("Oulu", "Oulussa", "Oulun", "Oulusta"),
            ("Espoo", "Espoossa", "Espoon", "Espoosta"), ("Vaasa", "Vaasassa", "Vaasan", "Vaasasta"),
            ("Kuopio", "Kuopiossa", "Kuopion", "Kuopiosta"), ("Lahti", "Lahdessa", "Lahden", "Lahdesta"),
            ("Pori", "Porissa", "Porin", "Porista"), ("Joensuu", "Joensuussa", "Joensuun", "Joensuusta"),
            ("Rauma", "Raumalla", "Rauman", "Raumalta"), ("Porvoo", "Porvoossa", "Porvoon", "Porvoosta"),
            ("Hämeenlinna", "Hämeenlinnassa", "Hämeenlinnan", "Hämeenlinnasta"),
            ("Rovaniemi", "Rovaniemellä", "Rovaniemen", "Rovaniemeltä"), ("Kotka", "Kotkassa", "Kotkan", "Kotkasta"),
            ("Savonlinna", "Savonlinnassa", "Savonlinnan", "Savonlinnasta"), ("Kajaani", "Kajaanissa", "Kajaanin",
                                                                              "Kajaanista"),
            ("Mikkeli", "Mikkelissä", "Mikkelin", "Mikkelistä"), ("Naantali", "Naantalissa", "Naantalin",
                                                                  "Naantalista"),
            ("Jyväskylä", "Jyväskylässä", "Jyväskylän", "Jyväskylästä"), ("Kemi", "Kemissä", "Kemin", "Kemistä"),
            ("Lappeenranta", "Lappeenrannassa", "Lappeenrannan", "Lappeenrannasta"),
            ("Seinäjoki", "Seinäjoella", "Seinäjoen", "Seinäjoelta"), ("Salo", "Salossa", "Salon", "Salosta")],
    place_suffixes=["", "joki", "lahti", "mäki"],
    given_names=[(n, "") for n in ["Matti", "Juha", "Mikko", "Timo", "Kari", "Jukka", "Pekka", "Antti", "Heikki",
                                   "Maria", "Liisa", "Anna", "Tuula", "Ritva", "Aino", "Helena", "Sanna", "Kaarina",
                                   "Eino", "Väinö", "Lauri", "Elina", "Marjatta", "Hannele"]],
    family_names=[(n, n) for n in ["Virtanen", "Korhonen", "Mäkinen", "Nieminen", "Mäkelä", "Hämäläinen", "Laine",
                                   "Heikkinen", "Koskinen", "Järvinen", "Lehtonen", "Lehtinen", "Saarinen", "Salminen",
                                   "Heinonen", "Niemi", "Heikkilä", "Kinnunen", "Salonen", "Turunen", "Salo",
                                   "Laitinen", "Tuominen", "Rantanen", "Karjalainen", "Jokinen", "Mattila"]],
    occupations=["kirjailija", "taiteilija", "säveltäjä", "arkkitehti", "lääkäri", "opettaja", "runoilija",
                 "muusikko", "kuvanveistäjä", "näyttelijä", "historioitsija", "kielitieteilijä", "tähtitieteilijä",
                 "kemisti", "kasvitieteilijä", "poliitikko", "valokuvaaja", "insinööri"],
    adverbs=["Nykyään", "Myöhemmin", "Aiemmin", "Kesäisin", "Talvisin", "Keväällä", "Syksyllä", "Usein", "Yhä",
             "Erityisesti", "Lisäksi", "Vähitellen", "Edelleen", "Pian"],
    verbs={"intransitive_past": [(v,) for v in ["asui", "työskenteli", "matkusti", "opiskeli", "vaikutti",
                                               "viihtyi", "kasvoi", "eli", "opetti", "esiintyi"]],
           "intransitive_present": [(v,) for v in ["toimii", "sijaitsee", "kasvaa", "kukoistaa", "muuttuu",
                                                  "kehittyy", "näkyy", "säilyy", "houkuttelee matkailijoita",
                                                  "palvelee asukkaita"]],
           "passive_past": [(v,) for v in ["rakennettiin", "kunnostettiin", "perustettiin", "laajennettiin",
                                          "avattiin", "suojeltiin", "mainittiin ensimmäisen kerran",
                                          "korjattiin", "siirrettiin", "nimettiin"]]},
    patterns=[
        "{AN} sijaitsee {P_ine}.",
        "{Person} {V_intransitive_past} {P_ine} vuonna {Y}.",
        "{AN} on {P_gen} {A} nähtävyys.",
        "Vuonna {Y} {an} {V_passive_past}.",
        "{Adv} {an} {V_intransitive_present}.",
        "{Person} oli {A} {Occ}.",
        "{P_ine} asuu noin {Count} ihmistä.",
        "{Person} syntyi {P_ine} vuonna {Y} ja kuoli vuonna {Y2}.",
        "{AN} on osa {P_gen} historiaa.",
        "{Adv} {P_ine} järjestetään {A} {N}.",
        "{Person} kirjoitti kirjan, joka kertoo {P_ela}.",
        "{P_gen} lähellä on {A} {N}.",
        "Alueella on {A} {N} ja {A} {N}.",
        "{AN} {V_passive_past} vuonna {Y}.",
        "{Person} muutti {P_ela} pois vuonna {Y}.",
        "Paikallinen {N} on {A} ja {A}.",
        "Monet pitävät tätä paikkaa {P_gen} kauneimpana.",
        "{AN} tunnetaan myös nimellä {Name}.",
    ],
    lead={"place": "'''{title}''' on {a} kaupunki, joka sijaitsee [[{region}|{region_gen} maakunnassa]].",
          "person": "'''{title}''' ({Y}–{Y2}) oli suomalainen [[{occ}]].",
          "building": "'''{title}''' on {a} rakennus, joka sijaitsee [[{place}|{place_ine}]]."},
    sections={"place": ["Maantiede", "Historia", "Väestö", "Nähtävyydet", "Talous", "Liikenne"],
              "person": ["Elämä", "Ura", "Teokset", "Muisto", "Perhe"],
              "building": ["Historia", "Kuvaus", "Kokoelmat", "Ympäristö"]},
    infobox=("Kunta", "nimi", "väestö"), lead_gender={},
    category={"place": "Suomen kunnat", "person": "Suomalaiset henkilöt", "building": "{place_gen} rakennukset"},
    notes_heading="Lähteet",
    stub="'''{title}''' on pieni kylä {place_ine}.",
    disambiguation="'''{title}''' voi tarkoittaa seuraavia:",
)

RUSSIAN = SampleLanguage(
    code="ru", sitename="Википедия", main_page="Заглавная_страница",
    namespaces={-2: "Медиа", -1: "Служебная", 0: "", 1: "Обсуждение", 2: "Участник", 3: "Обсуждение участника",
                4: "Википедия", 5: "Обсуждение Википедии", 6: "Файл", 7: "Обсуждение файла", 8: "MediaWiki",
                9: "Обсуждение MediaWiki", 10: "Шаблон", 11: "Обсуждение шаблона", 12: "Справка",
                13: "Обсуждение справки", 14: "Категория", 15: "Обсуждение категории"},
    nouns=[("город", "m"), ("посёлок", "m"), ("замок", "m"), ("завод", "m"), ("мост", "m"), ("парк", "m"),
           ("музей", "m"), ("университет", "m"), ("вокзал", "m"), ("рынок", "m"), ("дом", "m"), ("сад", "m"),
           ("театр", "m"), ("концерт", "m"), ("праздник", "m"), ("фестиваль", "m"), ("монастырь", "m"),
           ("собор", "m"), ("порт", "m"), ("лес", "m"), ("остров", "m"), ("холм", "m"), ("колодец", "m"),
           ("памятник", "m"), ("храм", "m"), ("дворец", "m"), ("флаг", "m"), ("герб", "m"), ("урожай", "m"),
           ("церковь", "f"), ("школа", "f"), ("река", "f"), ("гора", "f"), ("долина", "f"), ("улица", "f"),
           ("площадь", "f"), ("библиотека", "f"), ("больница", "f"), ("мельница", "f"), ("крепость", "f"),
           ("башня", "f"), ("дорога", "f"), ("пристань", "f"), ("ярмарка", "f"), ("выставка", "f"),
           ("коллекция", "f"), ("традиция", "f"), ("легенда", "f"), ("летопись", "f"), ("пещера", "f"),
           ("озеро", "n"), ("поле", "n"), ("село", "n"), ("здание", "n"), ("кладбище", "n"), ("училище", "n"),
           ("общество", "n"), ("предприятие", "n"), ("водохранилище", "n"), ("побережье", "n")],
    adjectives=[("старый", "старая", "старое"), ("новый", "новая", "новое"), ("большой", "большая", "большое"),
                ("маленький", "маленькая", "маленькое"), ("известный", "известная", "известное"),
                ("красивый", "красивая", "красивое"), ("тихий", "тихая", "тихое"),
                ("древний", "древняя", "древнее"), ("высокий", "высокая", "высокое"),
                ("широкий", "широкая", "широкое"), ("глубокий", "глубокая", "глубокое"),
                ("богатый", "богатая", "богатое"), ("зелёный", "зелёная", "зелёное"),
                ("белый", "белая", "белое"), ("каменный", "каменная", "каменное"),
                ("деревянный", "деревянная", "деревянное"), ("исторический", "историческая", "историческое"),
                ("средневековый", "средневековая", "средневековое"), ("городской", "городская", "городское"),
                ("сельский", "сельская", "сельское"), ("важный", "важная", "важное"),
                ("популярный", "популярная", "популярное"), ("заброшенный", "заброшенная", "заброшенное"),
                ("охраняемый", "охраняемая", "охраняемое"), ("знаменитый", "знаменитая", "знаменитое"),
                ("местный", "местная", "местное"), ("северный", "северная", "северное"),
                ("южный", "южная", "южное"), ("восточный", "восточная", "восточное"),
                ("западный", "западная", "западное"), ("старинный", "старинная", "старинное"),
                ("красный", "красная", "красное"), ("небольшой", "небольшая", "небольшое"),
                ("главный", "главная", "главное"), ("живописный", "живописная", "живописное"),
                ("современный", "современная", "современное"), ("народный", "народная", "народное"),
                ("торговый", "торговая", "торговое"), ("речной", "речная", "речное")],
    places=[("Москва", "в Москве", "Москвы"), ("Казань", "в Казани", "Казани"), ("Самара", "в Самаре", "Самары"),
            ("Тверь", "в Твери", "Твери"), ("Ярославль", "в Ярославле", "Ярославля"),
            ("Владимир", "во Владимире", "Владимира"), ("Суздаль", "в Суздале", "Суздаля"),
            ("Псков", "в Пскове", "Пскова"), ("Новгород", "в Новгороде", "Новгорода"),
            ("Вологда", "в Вологде", "Вологды"), ("Кострома", "в Костроме", "Костромы"),
            ("Рязань", "в Рязани", "Рязани"), ("Тула", "в Туле", "Тулы"), ("Калуга", "в Калуге", "Калуги"),
            ("Смоленск", "в Смоленске", "Смоленска"), ("Пермь", "в Перми", "Перми"), ("Омск", "в Омске", "Омска"),
            ("Томск", "в Томске", "Томска"), ("Иркутск", "в Иркутске", "Иркутска"),
            ("Архангельск", "в Архангельске", "Архангельска"), ("Петрозаводск", "в Петрозаводске",
                                                               "Петрозаводска"),
            ("Сыктывкар", "в Сыктывкаре", "Сыктывкара"), ("Ижевск", "в Ижевске", "Ижевска"),
            ("Саранск", "в Саранске", "Саранска")],
    place_suffixes=["", "ово", "ино", "ск"],
    given_names=[("Иван", "m"), ("Пётр", "m"), ("Алексей", "m"), ("Сергей", "m"), ("Николай", "m"),
                 ("Михаил", "m"), ("Андрей", "m"), ("Дмитрий", "m"), ("Фёдор", "m"), ("Григорий", "m"),
                 ("Анна", "f"), ("Мария", "f"), ("Елена", "f"), ("Ольга", "f"), ("Татьяна", "f"), ("Наталья", "f"),
                 ("Екатерина", "f"), ("Софья", "f"), ("Вера", "f"), ("Людмила", "f")],
    family_names=[("Иванов", "Иванова"), ("Петров", "Петрова"), ("Смирнов", "Смирнова"), ("Кузнецов", "Кузнецова"),
                  ("Попов", "Попова"), ("Соколов", "Соколова"), ("Лебедев", "Лебедева"), ("Козлов", "Козлова"),
                  ("Новиков", "Новикова"), ("Морозов", "Морозова"), ("Волков", "Волкова"),
                  ("Соловьёв", "Соловьёва"), ("Васильев", "Васильева"), ("Зайцев", "Зайцева"),
                  ("Павлов", "Павлова"), ("Семёнов", "Семёнова"), ("Голубев", "Голубева"),
                  ("Виноградов", "Виноградова"), ("Богданов", "Богданова"), ("Воробьёв", "Воробьёва")],
    occupations=["писатель", "художник", "композитор", "архитектор", "врач", "учитель", "поэт", "музыкант",
                 "скульптор", "актёр", "историк", "лингвист", "астроном", "химик", "ботаник", "политик",
                 "фотограф", "инженер"],
    adverbs=["Сегодня", "Позднее", "Раньше", "Летом", "Зимой", "Весной", "Осенью", "Часто", "Ныне", "Особенно",
             "Кроме того", "Постепенно", "По-прежнему", "Вскоре"],
    verbs={"intransitive_past": [("жил", "жила", "жило"), ("работал", "работала", "работало"),
                                 ("учился", "училась", "училось"), ("путешествовал", "путешествовала",
                                                                   "путешествовало"),
                                 ("преподавал", "преподавала", "преподавало"), ("выступал", "выступала",
                                                                                "выступало")],
           "intransitive_present": [(v, v, v) for v in ["работает", "стоит", "растёт", "меняется", "привлекает туристов",
                                                        "славится на всю страну", "сохраняется", "действует"]],
           "passive_past": [("был построен", "была построена", "было построено"),
                            ("был восстановлен", "была восстановлена", "было восстановлено"),
                            ("был основан", "была основана", "было основано"),
                            ("был расширен", "была расширена", "было расширено"),
                            ("был открыт", "была открыта", "было открыто"),
                            ("был впервые упомянут", "была впервые упомянута", "было впервые упомянуто"),
                            ("был перестроен", "была перестроена", "было перестроено")]},
    patterns=[
        "{AN} находится {P_loc}.",
        "{Person} {V_intransitive_past} {P_loc} в {Y} году.",
        "{AN} считается главной достопримечательностью {P_gen}.",
        "В {Y} году {an} {V_passive_past}.",
        "{Adv} {an} {V_intransitive_present}.",
        "{Person} — {A} {Occ}.",
        "{P_loc} живёт около {Count} человек.",
        "{Person} {born} {P_loc} в {Y} году.",
        "{AN} является частью истории {P_gen}.",
        "{Adv} {P_loc} проходит {an}.",
        "{Person} {wrote} книгу об истории {P_gen}.",
        "Недалеко от {P_gen} расположен {an_m}.",
        "В окрестностях есть {an} и {an}.",
        "{AN} {V_passive_past} в {Y} году.",
        "{Person} {left} из {P_gen} в {Y} году.",
        "Многие считают эти места самыми красивыми в окрестностях {P_gen}.",
        "{AN} упоминается в летописях {P_gen}.",
    ],
    lead={"place": "'''{title}''' — {a} город, расположенный в [[{region}|регионе {region_gen}]].",
          "person": "'''{title}''' ({Y}—{Y2}) — российский [[{occ}]].",
          "building": "'''{title}''' — {a} здание, расположенное [[{place}|{place_ine}]]."},
    sections={"place": ["География", "История", "Население", "Достопримечательности", "Экономика", "Транспорт"],
              "person": ["Биография", "Творчество", "Произведения", "Память", "Семья"],
              "building": ["История", "Описание", "Коллекции", "Окрестности"]},
    infobox=("Населённый пункт", "название", "население"), lead_gender={"place": "m", "building": "n"},
    category={"place": "Населённые пункты России", "person": "Персоналии по алфавиту",
              "building": "Здания и сооружения {place_gen}"},
    notes_heading="Примечания",
    stub="'''{title}''' — небольшое село {place_ine}.",
    disambiguation="'''{title}''' может означать:",
)

GREEK = SampleLanguage(
    code="el", sitename="Βικιπαίδεια", main_page="Πύλη:Κύρια",
    namespaces={-2: "Μέσο", -1: "Ειδικό", 0: "", 1: "Συζήτηση", 2: "Χρήστης", 3: "Συζήτηση χρήστη",
                4: "Βικιπαίδεια", 5: "Βικιπαίδεια συζήτηση", 6: "Αρχείο", 7: "Συζήτηση αρχείου", 8: "MediaWiki",
                9: "Συζήτηση MediaWiki", 10: "Πρότυπο", 11: "Συζήτηση προτύπου", 12: "Βοήθεια",
                13: "Συζήτηση βοήθειας", 14: "Κατηγορία", 15: "Συζήτηση κατηγορίας"},
    nouns=[("ναός", "m"), ("πύργος", "m"), ("σταθμός", "m"), ("κήπος", "m"), ("δρόμος", "m"), ("λόφος", "m"),
           ("ποταμός", "m"), ("μύλος", "m"), ("οικισμός", "m"), ("λιμένας", "m"), ("χώρος", "m"), ("θησαυρός", "m"),
           ("αγώνας", "m"), ("χορός", "m"), ("τάφος", "m"), ("εκκλησία", "f"), ("πλατεία", "f"), ("γέφυρα", "f"),
           ("βιβλιοθήκη", "f"), ("αγορά", "f"), ("σχολή", "f"), ("λίμνη", "f"), ("πηγή", "f"), ("κοιλάδα", "f"),
           ("παράδοση", "f"), ("γιορτή", "f"), ("έκθεση", "f"), ("συλλογή", "f"), ("οδός", "f"), ("μονή", "f"),
           ("ακτή", "f"), ("σπηλιά", "f"), ("κρήνη", "f"), ("μουσείο", "n"), ("σχολείο", "n"), ("κάστρο", "n"),
           ("χωριό", "n"), ("νησί", "n"), ("βουνό", "n"), ("δάσος", "n"), ("θέατρο", "n"), ("νοσοκομείο", "n"),
           ("πανεπιστήμιο", "n"), ("εργοστάσιο", "n"), ("σπίτι", "n"), ("μνημείο", "n"), ("παζάρι", "n"),
           ("φεστιβάλ", "n"), ("ποτάμι", "n"), ("λιμάνι", "n")],
    adjectives=[("ο παλιός", "η παλιά", "το παλιό"), ("ο νέος", "η νέα", "το νέο"),
                ("ο μεγάλος", "η μεγάλη", "το μεγάλο"), ("ο μικρός", "η μικρή", "το μικρό"),
                ("ο γνωστός", "η γνωστή", "το γνωστό"), ("ο όμορφος", "η όμορφη", "το όμορφο"),
                ("ο ήσυχος", "η ήσυχη", "το ήσυχο"), ("ο αρχαίος", "η αρχαία", "το αρχαίο"),
                ("ο ψηλός", "η ψηλή", "το ψηλό"), ("ο πλατύς", "η πλατιά", "το πλατύ"),
                ("ο βαθύς", "η βαθιά", "το βαθύ"), ("ο πλούσιος", "η πλούσια", "το πλούσιο"),
                ("ο πράσινος", "η πράσινη", "το πράσινο"), ("ο λευκός", "η λευκή", "το λευκό"),
                ("ο πέτρινος", "η πέτρινη", "το πέτρινο"), ("ο ξύλινος", "η ξύλινη", "το ξύλινο"),
                ("ο ιστορικός", "η ιστορική", "το ιστορικό"), ("ο βυζαντινός", "η βυζαντινή", "το βυζαντινό"),
                ("ο μεσαιωνικός", "η μεσαιωνική", "το μεσαιωνικό"), ("ο τοπικός", "η τοπική", "το τοπικό"),
                ("ο σημαντικός", "η σημαντική", "το σημαντικό"), ("ο δημοφιλής", "η δημοφιλής", "το δημοφιλές"),
                ("ο εγκαταλελειμμένος", "η εγκαταλελειμμένη", "το εγκαταλελειμμένο"),
                ("ο διάσημος", "η διάσημη", "το διάσημο"), ("ο βόρειος", "η βόρεια", "το βόρειο"),
                ("ο νότιος", "η νότια", "το νότιο"), ("ο ανατολικός", "η ανατολική", "το ανατολικό"),
                ("ο δυτικός", "η δυτική", "το δυτικό"), ("ο παραδοσιακός", "η παραδοσιακή", "το παραδοσιακό"),
                ("ο γραφικός", "η γραφική", "το γραφικό"), ("ο σύγχρονος", "η σύγχρονη", "το σύγχρονο"),
                ("ο λαϊκός", "η λαϊκή", "το λαϊκό"), ("ο εμπορικός", "η εμπορική", "το εμπορικό")],
    places=[("Αθήνα", "στην Αθήνα", "της Αθήνας"), ("Πάτρα", "στην Πάτρα", "της Πάτρας"),
            ("Λάρισα", "στη Λάρισα", "της Λάρισας"), ("Καβάλα", "στην Καβάλα", "της Καβάλας"),
            ("Κέρκυρα", "στην Κέρκυρα", "της Κέρκυρας"), ("Καλαμάτα", "στην Καλαμάτα", "της Καλαμάτας"),
            ("Τρίπολη", "στην Τρίπολη", "της Τρίπολης"), ("Χαλκίδα", "στη Χαλκίδα", "της Χαλκίδας"),
            ("Κοζάνη", "στην Κοζάνη", "της Κοζάνης"), ("Δράμα", "στη Δράμα", "της Δράμας"),
            ("Ξάνθη", "στην Ξάνθη", "της Ξάνθης"), ("Σπάρτη", "στη Σπάρτη", "της Σπάρτης"),
            ("Άρτα", "στην Άρτα", "της Άρτας"), ("Ναύπλιο", "στο Ναύπλιο", "του Ναυπλίου"),
            ("Βόλος", "στον Βόλο", "του Βόλου"), ("Πειραιάς", "στον Πειραιά", "του Πειραιά"),
            ("Ηράκλειο", "στο Ηράκλειο", "του Ηρακλείου"), ("Ρέθυμνο", "στο Ρέθυμνο", "του Ρεθύμνου"),
            ("Αγρίνιο", "στο Αγρίνιο", "του Αγρινίου"), ("Μεσολόγγι", "στο Μεσολόγγι", "του Μεσολογγίου")],
    place_suffixes=["", "ούπολη", "οχώρι", " Νέα"],
    given_names=[("Γιώργος", "m"), ("Νίκος", "m"), ("Κώστας", "m"), ("Γιάννης", "m"), ("Δημήτρης", "m"),
                 ("Παναγιώτης", "m"), ("Βασίλης", "m"), ("Χρήστος", "m"), ("Μαρία", "f"), ("Ελένη", "f"),
                 ("Κατερίνα", "f"), ("Σοφία", "f"), ("Αγγελική", "f"), ("Δέσποινα", "f"), ("Ειρήνη", "f"),
                 ("Βασιλική", "f")],
    family_names=[("Παπαδόπουλος", "Παπαδοπούλου"), ("Παππάς", "Παππά"), ("Οικονόμου", "Οικονόμου"),
                  ("Γεωργίου", "Γεωργίου"), ("Νικολάου", "Νικολάου"), ("Βλάχος", "Βλάχου"),
                  ("Αντωνίου", "Αντωνίου"), ("Δημητρίου", "Δημητρίου"), ("Μακρής", "Μακρή"),
                  ("Αλεξίου", "Αλεξίου"), ("Καραγιάννης", "Καραγιάννη"), ("Ιωάννου", "Ιωάννου")],
    occupations=["συγγραφέας", "ζωγράφος", "συνθέτης", "αρχιτέκτονας", "γιατρός", "δάσκαλος", "ποιητής",
                 "μουσικός", "γλύπτης", "ηθοποιός", "ιστορικός", "γλωσσολόγος", "αστρονόμος", "χημικός",
                 "βοτανολόγος", "πολιτικός", "φωτογράφος", "μηχανικός"],
    adverbs=["Σήμερα", "Αργότερα", "Παλαιότερα", "Το καλοκαίρι", "Τον χειμώνα", "Την άνοιξη", "Το φθινόπωρο",
             "Συχνά", "Ακόμη", "Ιδιαίτερα", "Επιπλέον", "Σταδιακά", "Σύντομα"],
    verbs={"intransitive_past": [(v,) for v in ["έζησε", "εργάστηκε", "σπούδασε", "ταξίδεψε", "δίδαξε",
                                               "εμφανίστηκε", "μεγάλωσε", "έμεινε"]],
           "intransitive_present": [(v,) for v in ["λειτουργεί", "βρίσκεται εκεί", "μεγαλώνει", "αλλάζει",
                                                  "προσελκύει επισκέπτες", "διατηρείται", "ξεχωρίζει"]],
           "passive_past": [(v,) for v in ["χτίστηκε", "ανακαινίστηκε", "ιδρύθηκε", "επεκτάθηκε", "άνοιξε",
                                          "αναφέρθηκε για πρώτη φορά", "επισκευάστηκε", "ανακηρύχθηκε μνημείο"]]},
    patterns=[
        "{AN} βρίσκεται {P_loc}.",
        "{Person} {V_intransitive_past} {P_loc} το {Y}.",
        "{AN} είναι το πιο γνωστό αξιοθέατο {P_gen}.",
        "Το {Y} {an} {V_passive_past}.",
        "{Adv} {an} {V_intransitive_present}.",
        "{Person} ήταν γνωστός {Occ}.",
        "{P_loc} ζουν περίπου {Count} άνθρωποι.",
        "{Person} γεννήθηκε {P_loc} το {Y} και πέθανε το {Y2}.",
        "{AN} αποτελεί μέρος της ιστορίας {P_gen}.",
        "{Adv} {P_loc} γίνεται {an}.",
        "{Person} έγραψε ένα βιβλίο για την ιστορία {P_gen}.",
        "Κοντά {P_loc} βρίσκεται {an}.",
        "Στην περιοχή υπάρχουν {an} και {an}.",
        "{AN} {V_passive_past} το {Y}.",
        "{Person} έφυγε από την πόλη το {Y}.",
        "Πολλοί θεωρούν την περιοχή {P_gen} μία από τις ωραιότερες της χώρας.",
        "{AN} αναφέρεται σε παλιά χρονικά {P_gen}.",
    ],
    lead={"place": "'''{title}''' είναι {a} πόλη στην περιφέρεια [[{region}|{region_gen}]].",
          "person": "'''{title}''' ({Y}–{Y2}) ήταν Έλληνας [[{occ}]].",
          "building": "'''{title}''' είναι {a} κτίριο [[{place}|{place_ine}]]."},
    sections={"place": ["Γεωγραφία", "Ιστορία", "Πληθυσμός", "Αξιοθέατα", "Οικονομία", "Συγκοινωνίες"],
              "person": ["Βιογραφία", "Έργο", "Έργα", "Μνήμη", "Οικογένεια"],
              "building": ["Ιστορία", "Περιγραφή", "Συλλογές", "Περιοχή"]},
    infobox=("Πόλη", "όνομα", "πληθυσμός"), lead_gender={"place": "f", "building": "n"},
    category={"place": "Πόλεις της Ελλάδας", "person": "Έλληνες", "building": "Κτίρια {place_gen}"},
    notes_heading="Παραπομπές",
    stub="'''{title}''' είναι ένα μικρό χωριό {place_ine}.",
    disambiguation="'''{title}''' μπορεί να αναφέρεται σε:",
)

LANGUAGES = {language.code: language for language in (FINNISH, RUSSIAN, GREEK)}
_GENDER = {"m": 0, "f": 1, "n": 2, "": 0}
_RUSSIAN_PERSON = {"born": ("родился", "родилась"), "left": ("уехал", "уехала"), "wrote": ("написал", "написала")}


class _Prose:
    """Sentences of a SampleLanguage about the current topic."""

    def __init__(self, language: SampleLanguage, rng: random.Random):
        self.language, self.rng = language, rng
        self.place = language.places[0]
        self.person = language.given_names[0]

    def phrase(self, genders: str = "mfn", link: bool = True) -> tuple[str, str]:
        """An adjective and a noun (of one of `genders`; Finnish nouns have none) that agree, and its gender."""
        noun, gender = self.rng.choice([n for n in self.language.nouns if not n[1] or n[1] in genders])
        return f"{self.adjective(gender)} {self._linked(noun) if link else noun}", gender

    def adjective(self, gender: str) -> str:
        forms = self.rng.choice(self.language.adjectives)
        return forms[min(_GENDER[gender], len(forms) - 1)]

    def person_name(self) -> tuple[str, str]:
        given, gender = self.rng.choice(self.language.given_names)
        family = self.rng.choice(self.language.family_names)
        return f"{given} {family[1 if gender == 'f' else 0]}", gender

    def _linked(self, word: str) -> str:
        return f"[[{word}]]" if self.rng.random() < 0.08 else word

    def sentence(self) -> str:
        rng, lang = self.rng, self.language
        subject_gender = [""]
        person = self.person if rng.random() < 0.5 else self.person_name()

        def verb(kind: str, gender: str) -> str:
            forms = rng.choice(lang.verbs[kind])
            return forms[min(_GENDER[gender], len(forms) - 1)]

        def fill(match: re.Match) -> str:
            slot = match.group(1)
            if slot in ("AN", "an", "an_m"):
                text, subject_gender[0] = self.phrase("m" if slot == "an_m" else "mfn")
                return text
            place = self.place if rng.random() < 0.6 else rng.choice(lang.places)
            if slot.startswith("P_"):
                return place[{"ine": 1, "loc": 1, "gen": 2, "ela": 3}[slot[2:]]]
            if slot.startswith("V_"):
                return verb(slot[2:], person[1] if slot == "V_intransitive_past" else subject_gender[0])
            if slot in _RUSSIAN_PERSON:
                return _RUSSIAN_PERSON[slot][person[1] == "f"]
            return {"A": lambda: rng.choice(lang.adjectives)[0], "N": lambda: rng.choice(lang.nouns)[0],
                    "Person": lambda: person[0], "Occ": lambda: rng.choice(lang.occupations),
                    "Adv": lambda: rng.choice(lang.adverbs), "Y": lambda: str(rng.randint(1250, 1990)),
                    "Y2": lambda: str(rng.randint(1991, 2020)), "Count": lambda: f"{rng.randint(2, 90) * 1000}",
                    "Name": lambda: rng.choice(lang.places)[0]}[slot]()

        text = re.sub(r"\{(\w+)\}", fill, rng.choice(lang.patterns))
        return text[0].upper() + text[1:]

    def paragraph(self, sentences: int) -> str:
        out = []
        for _ in range(sentences):
            sentence = self.sentence()
            if self.rng.random() < 0.1:
                sentence += f"<ref>{self.person_name()[0]}: ''{self.rng.choice(self.language.places)[0]}''. " \
                            f"{self.rng.randint(1950, 2023)}.</ref>"
            out.append(sentence)
        return " ".join(out)

    def body(self, kind: str, sentences: int) -> str:
        titles = self.rng.sample(self.language.sections[kind], k=min(len(self.language.sections[kind]),
                                                                     1 + sentences // 6))
        parts = [self.paragraph(max(2, sentences // (len(titles) + 1)))]
        for title in titles:
            paragraphs = [self.paragraph(self.rng.randint(2, 5)) for _ in range(self.rng.randint(1, 2))]
            parts.append(f"== {title} ==\n" + "\n\n".join(paragraphs))
        parts.append(f"== {self.language.notes_heading} ==\n<references />")
        return "\n\n".join(parts)


def iter_pages(language: str, articles: int, seed: int) -> Iterator[tuple[str, int, str, str, str | None]]:
    """(title, namespace, wikitext, kind, redirect target) of each page of a sample dump in `language` (a code of
    LANGUAGES), in dump order, the same for the same arguments: articles about places, people and buildings, stubs,
    redirects, disambiguation pages, talk pages and the infobox template."""
    lang = LANGUAGES[language]
    rng = random.Random(f"{language}:{seed}")
    prose = _Prose(lang, rng)
    used: set[str] = set()
    ns = lang.namespaces

    def unique(title: str) -> str:
        number, candidate = 1, title
        while candidate in used:
            number += 1
            candidate = f"{title} ({number})"
        used.add(candidate)
        return candidate

    infobox, name_field, population_field = lang.infobox
    yield (f"{ns[10]}:{infobox}", 10, f"{{| class=\"infobox\"\n|+ {{{{{{{name_field}}}}}}}\n|-\n"
           f"| {{{{{{{population_field}}}}}}}\n|}}", "template", None)
    titles = []
    for i in range(articles):
        kind = ("place", "person", "building")[i % 3]
        sentences = rng.randint(8, 25)
        place = rng.choice(lang.places)
        region = rng.choice(lang.places)
        prose.place, prose.person = place, prose.person_name()
        occupation = rng.choice(lang.occupations)
        if kind == "person":
            name, person_gender = prose.person_name()
            title = unique(name)
            prose.person = (title.split(" (")[0], person_gender)
        elif kind == "place":
            title = unique(f"{place[0]}{rng.choice(lang.place_suffixes)}")
        else:
            title = unique(f"{prose.phrase(link=False)[0].capitalize()} ({place[0]})")
        lead = lang.lead[kind].format(title=title, a=prose.adjective(lang.lead_gender.get(kind, "")), region=region[0],
                                      region_gen=region[2], Y=rng.randint(1700, 1900), Y2=rng.randint(1901, 2000),
                                      occ=occupation, place=place[0], place_ine=place[1])
        box = (f"{{{{{infobox}\n| {name_field} = {title}\n| {population_field} = {rng.randint(150, 99000)}\n}}}}\n"
               if kind == "place" else "")
        category = lang.category[kind].format(place_gen=place[2])
        text = f"{box}{lead} {prose.body(kind, sentences)}\n\n[[{ns[14]}:{category}]]"
        titles.append(title)
        yield title, 0, text, "article", None
        if i % 30 == 29:
            stub = unique(f"{rng.choice(lang.places)[0]} {rng.randint(2, 99)}")
            yield stub, 0, lang.stub.format(title=stub, place_ine=place[1]), "stub", None
        if i % 10 == 9:
            target = rng.choice(titles)
            yield unique(f"{target} (2)"), 0, f"#REDIRECT [[{target}]]", "redirect", target
        if i % 40 == 39:
            base = unique(f"{rng.choice(lang.places)[0]} (disambig)")
            items = "\n".join(f"* [[{rng.choice(titles)}]]" for _ in range(3))
            yield base, 0, f"{lang.disambiguation.format(title=base)}\n{items}\n\n{{{{disambig}}}}", \
                "disambiguation", None
        if i % 25 == 24:
            yield f"{ns[1]}:{title}", 1, f"== {lang.notes_heading} ==\n{prose.sentence()}", "talk", None
