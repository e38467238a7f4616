"""The recall question set: facts, and questions asked in other words or by identifier.

Three kinds of question, each with exactly one record that answers it:

* ``paraphrase``: the question shares no content word with its fact (the words left after
  :data:`STOPWORDS` are removed, compared as :func:`~memlane.stores.protocol.search_terms`
  splits them), like fact "Ada drinks her coffee black, no sugar." and question "how does she
  take her hot drink". Keyword search can only find these by accident.
* ``named``: the same question with the person's name in place of the first pronoun ("how
  does Ada take her hot drink"): one rare shared word that narrows the field, the meaning does
  the rest.
* ``keyword``: a rare word or name of the record, asked as it was written ("Murakami",
  "Honda Civic"): what keyword search is for, and where a small static embedding is weakest.
* ``identifier``: an invoice number, an IP address, a ticket, a version, a CVE; each record
  has distractors whose identifiers reorder the same digits or share the common words, so
  only an exact match of the identifier is right.

:data:`DISTRACTORS` share common words with the questions and answer none of them. The set is
written by hand for this project; :func:`check_question_set` holds it to the rules above.
:func:`filler_facts` makes synthetic facts that answer no question, to measure the same
questions among 100,000 facts.
"""

from __future__ import annotations

import random
import re
from typing import Literal, NamedTuple

from memlane.longterm.fusion import FUNCTION_WORDS
from memlane.stores.protocol import search_terms

__all__ = [
    "DISTRACTORS",
    "FACTS",
    "QUESTIONS",
    "STOPWORDS",
    "Fact",
    "Question",
    "check_question_set",
    "content_words",
    "filler_facts",
]

Kind = Literal["paraphrase", "named", "keyword", "identifier"]


class Fact(NamedTuple):
    """A fact as ``remember(key, value)`` stores it."""

    key: str
    value: str


class Question(NamedTuple):
    """A question and the key of the one fact that answers it."""

    kind: Kind
    text: str
    answer: str


STOPWORDS = FUNCTION_WORDS
"""Function words, which carry no content (the list hybrid search uses)."""

# (key, value, question); the person whose fact it is leads the key.
_PARAPHRASES: list[tuple[str, str, str]] = [
    ("ada_coffee", "Ada drinks her coffee black, no sugar.", "how does she take her hot drink"),
    ("ben_allergy", "Ben is allergic to peanuts.", "which nuts must we keep away from him"),
    ("carla_city", "Carla lives in Lisbon.", "in which town does she reside"),
    ("dan_pet", "Dan owns a golden retriever named Max.", "what kind of dog does he have"),
    ("eve_language", "Eve speaks fluent Japanese.", "which foreign tongue can she talk in"),
    ("frank_job", "Frank works as a nurse at the city hospital.", "what is his profession"),
    ("gina_birth", "Gina was born on 14 July.", "when should we celebrate her birthday"),
    ("hugo_car", "Hugo drives an electric Tesla.", "what vehicle does he own"),
    ("iris_diet", "Iris is vegetarian and never eats meat.", "which food does she refuse"),
    ("jack_sport", "Jack plays tennis every Saturday morning.", "which racket game does he enjoy"),
    ("kim_music", "Kim listens mostly to jazz.", "what genre of songs does she like"),
    ("leo_tools", "Leo writes code in Vim.", "which text editor does he program with"),
    ("mia_place", "Mia is based in Sydney, Australia.", "what time zone is she in"),
    ("noah_meetings", "Noah prefers meetings after lunch.", "when is the best slot to call him"),
    ("olivia_contact", "Olivia wants updates by email, never by phone.", "how should we reach her"),
    ("paul_family", "Paul has two daughters and a son.", "how many children does he have"),
    ("quinn_reading", "Quinn is reading a novel by Haruki Murakami.", "which author is she into"),
    ("rosa_trip", "Rosa flies to Berlin next Tuesday.", "when is her journey to Germany"),
    ("sam_fear", "Sam is afraid of heights.", "what phobia does he have"),
    ("tina_hobby", "Tina paints watercolour landscapes.", "what artistic pastime does she pursue"),
    ("uma_shoes", "Uma wears shoes in size 38.", "what footwear number does she need"),
    ("victor_team", "Victor manages the billing engineering team.", "who leads invoicing staff"),
    (
        "wendy_evening",
        "Wendy only has herbal tea in the evening.",
        "what beverage does she take at night",
    ),
    ("xavier_commute", "Xavier cycles to the office.", "how does he get to work"),
    ("yara_degree", "Yara studied chemistry at university.", "what did she major in at college"),
    ("zoe_colour", "Zoe's favourite colour is teal.", "which hue does she like best"),
    ("ada_noise", "Ada can't stand loud rock music.", "what sounds annoy her"),
    ("ben_sleep", "Ben goes to bed around 10 pm.", "what time does he turn in for the night"),
    ("carla_spouse", "Carla is married to Pedro.", "who is her husband"),
    ("dan_phone", "Dan uses an Android phone.", "which mobile platform is on his handset"),
    ("eve_weather", "Eve hates cold rainy winters.", "what climate does she dislike"),
    ("frank_shifts", "Frank works night shifts.", "when is he on duty"),
    (
        "gina_collection",
        "Gina collects vintage fountain pens.",
        "what would make a good present for her",
    ),
    ("hugo_injury", "Hugo broke his left wrist skiing.", "what accident did he have on the slopes"),
    ("iris_bank", "Iris banks with a small credit union.", "where does she keep her savings"),
    ("jack_boats", "Jack gets seasick on boats.", "why does he avoid sailing"),
    (
        "kim_marathon",
        "Kim is training for the Boston marathon.",
        "what race is she preparing to run",
    ),
    ("leo_laptop", "Leo's laptop runs Arch Linux.", "which operating system is on his computer"),
    ("mia_cats", "Mia reacts badly to cats.", "which animals trigger her allergy"),
    ("noah_alcohol", "Noah never touches alcohol.", "does he drink beer or wine"),
    ("olivia_native", "Olivia grew up speaking Portuguese.", "what is her mother tongue"),
    ("paul_flat", "Paul rents a flat near the harbour.", "where is his apartment"),
    ("quinn_food", "Quinn loves spicy Thai curries.", "what cuisine does she enjoy"),
    ("rosa_work", "Rosa is a freelance graphic designer.", "what does she do for a living"),
    ("sam_car", "Sam's car is a red 2015 Honda Civic.", "what does he drive"),
    ("tina_school", "Tina teaches maths at a secondary school.", "what subject does she instruct"),
    ("uma_parrot", "Uma has a parrot that whistles tunes.", "what bird does she keep"),
    (
        "victor_brewing",
        "Victor brews his own beer at home.",
        "what fermented beverage does he craft",
    ),
    (
        "wendy_cello",
        "Wendy is learning to play the cello.",
        "which string instrument is she practising",
    ),
    ("xavier_gluten", "Xavier avoids gluten.", "which grain protein must he not eat"),
    ("yara_kittens", "Yara adopted two rescue kittens.", "what animals live with her"),
    ("zoe_train", "Zoe commutes by rail from Brighton.", "how does she travel to her job"),
    ("standup_time", "The daily standup starts at 9:15 sharp.", "when is the morning team sync"),
    (
        "expense_receipts",
        "Receipts must be submitted within 30 days.",
        "what is the deadline for claiming costs back",
    ),
    (
        "laptop_encryption",
        "Company notebooks must use full-disk encryption.",
        "what security is required on work computers",
    ),
    (
        "onboarding",
        "New hires shadow a mentor for their first two weeks.",
        "how are recent recruits trained",
    ),
    (
        "refund_window",
        "Customers can return items within 14 days for a full refund.",
        "how long do buyers have to get their money back",
    ),
    (
        "gateway_outage",
        "The payment gateway went down for three hours on Monday.",
        "when did checkout stop working",
    ),
    (
        "guest_network",
        "The guest wireless password is printed on the kitchen fridge.",
        "where can visitors find the wifi code",
    ),
    (
        "database_backups",
        "Database backups run nightly at 2 am.",
        "how often are the tables copied for safety",
    ),
    (
        "staff_parking",
        "Staff may leave cars in the underground garage on level B2.",
        "where can employees park",
    ),
    (
        "team_lunch",
        "Team lunches are reimbursed up to 25 euros per person.",
        "how much can I spend on a midday meal with colleagues",
    ),
    (
        "annual_leave",
        "Employees get 28 days of paid leave each year.",
        "how much holiday do workers have",
    ),
    (
        "help_desk",
        "The help desk is staffed from 8 to 6 on weekdays.",
        "when can I call customer service",
    ),
    (
        "release_freeze",
        "Nobody ships to production on Fridays.",
        "which day of the week are deploys forbidden",
    ),
]

# (key, value, question): records found by an identifier, with look-alike neighbours.
_IDENTIFIERS: list[tuple[str, str, str]] = [
    ("invoice_48213", "Invoice INV-48213 was paid by bank transfer on 3 March.", "INV-48213"),
    (
        "invoice_48231",
        "Invoice INV-48231 is still unpaid and the customer was reminded.",
        "what happened to invoice INV-48231",
    ),
    ("invoice_48123", "Invoice INV-48123 was paid by card.", "was INV-48123 paid"),
    ("invoice_84213", "Invoice INV-84213 was refunded to the customer.", "INV-84213 status"),
    ("staging_db", "The staging database listens on 10.42.7.19.", "which host is 10.42.7.19"),
    ("production_db", "The production database listens on 10.42.19.7.", "what runs on 10.42.19.7"),
    ("cache_server", "The cache server listens on 10.42.7.91.", "10.42.7.91"),
    ("ticket_5521", "Ticket #5521: the login page times out on Safari.", "ticket 5521"),
    (
        "ticket_5512",
        "Ticket #5512: the login page shows a blank screen.",
        "what is ticket #5512 about",
    ),
    ("ticket_1552", "Ticket #1552: the login page rejects valid passwords.", "#1552"),
    ("pay_1093", "PAY-1093 tracks the double-charge bug in checkout.", "what is PAY-1093"),
    ("pay_1039", "PAY-1039 tracks the currency rounding bug in checkout.", "PAY-1039 checkout bug"),
    (
        "release_2143",
        "Release v2.14.3 fixed the memory leak in the worker.",
        "what did v2.14.3 fix",
    ),
    ("release_2134", "Release v2.13.4 fixed the crash in the worker on startup.", "v2.13.4"),
    ("cve_3094", "CVE-2024-3094 is the backdoor found in xz utils.", "CVE-2024-3094"),
    (
        "cve_3049",
        "CVE-2024-3049 is a path traversal in the upload handler.",
        "tell me about CVE-2024-3049",
    ),
    ("error_1045", "Error E1045 means the licence has expired.", "what does E1045 mean"),
    ("error_1054", "Error E1054 means the licence server is unreachable.", "E1054 licence error"),
    ("extension_4417", "Extension 4417 rings the front desk.", "who answers extension 4417"),
    ("extension_4471", "Extension 4471 rings the warehouse.", "4471"),
    ("order_7781", "Order 7781-AX shipped via DHL on Friday.", "where is order 7781-AX"),
    ("order_7718", "Order 7718-AX is on hold until payment clears.", "7718-AX"),
    ("host_west3", "db-eu-west-3 is the primary replica.", "what is db-eu-west-3"),
    ("host_west2", "db-eu-west-2 is the analytics replica.", "db-eu-west-2 role"),
]

# (question, key): a rare word of the record, asked as it was written.
_KEYWORDS: list[tuple[str, str]] = [
    ("Lisbon", "carla_city"),
    ("Murakami", "quinn_reading"),
    ("Tesla", "hugo_car"),
    ("watercolour", "tina_hobby"),
    ("Vim", "leo_tools"),
    ("who is Pedro", "carla_spouse"),
    ("Brighton", "zoe_train"),
    ("retriever", "dan_pet"),
    ("cello lessons", "wendy_cello"),
    ("Arch Linux", "leo_laptop"),
    ("credit union", "iris_bank"),
    ("xz backdoor", "cve_3094"),
    ("DHL", "order_7781"),
    ("Safari timeout", "ticket_5521"),
    ("herbal tea", "wendy_evening"),
    ("underground garage", "staff_parking"),
    ("Honda Civic", "sam_car"),
    ("gluten", "xavier_gluten"),
    ("analytics replica", "host_west2"),
    ("thermos of soup", "tina_drink"),
]

DISTRACTORS: list[Fact] = [
    Fact(key, value)
    for key, value in [
        ("ada_sister", "Ada's sister drinks hot chocolate with whipped cream."),
        ("ben_job", "Ben takes the night bus home after work."),
        ("carla_job", "Carla takes photographs for a local newspaper."),
        ("dan_food", "Dan likes to take his lunch in the park."),
        ("eve_job", "Eve does accounting for a theatre company."),
        ("frank_home", "Frank has a house with a big garden."),
        ("gina_job", "Gina does the payroll every month."),
        ("hugo_pets", "Hugo had a hamster as a kid."),
        ("iris_drink", "Iris takes her tea with milk."),
        ("jack_work", "Jack does code reviews every morning."),
        ("kim_job", "Kim has a desk by the window."),
        ("leo_food", "Leo eats cereal for breakfast."),
        ("mia_job", "Mia has a standing desk in the office."),
        ("noah_car", "Noah is the one who parks in the visitor bay."),
        ("olivia_car", "Olivia takes the bus when it rains."),
        ("paul_work", "Paul does most of the hiring interviews."),
        ("quinn_job", "Quinn keeps the meeting notes for the team."),
        ("rosa_home", "Rosa has a balcony full of tomato plants."),
        ("sam_job", "Sam does the night on-call rotation once a month."),
        ("tina_drink", "Tina takes a thermos of soup to the office."),
        ("office_kitchen", "The kitchen fridge is cleaned out every Friday."),
        ("office_printer", "The printer on level 2 jams when the paper is damp."),
        ("invoice_template", "Invoices are generated on the first working day of the month."),
        ("customer_reminders", "Customers with unpaid invoices get a reminder after 30 days."),
        ("login_policy", "The login page locks an account after five failed attempts."),
        ("checkout_team", "The checkout team owns the payment pages."),
        ("database_team", "The database team answers pages for every replica."),
        ("release_notes", "Release notes are published on the wiki after each deploy."),
        ("licence_renewal", "The licence is renewed every January."),
        ("warehouse_hours", "The warehouse is open until 8 pm."),
        ("front_desk", "The front desk signs for parcels."),
        ("order_policy", "Orders over 500 euros need a manager's approval."),
        ("network_plan", "Every host on the 10.42 network is behind the VPN."),
        ("security_scans", "Security scans run against every release candidate."),
        ("worker_pool", "The worker pool scales up during the month-end batch."),
        ("cache_policy", "The cache is flushed after each deploy."),
    ]
]


def _named(key: str, question: str) -> str | None:
    # A person's fact: the first pronoun becomes their name ("his"/"her" + noun: "Dan's").
    name = key.split("_", 1)[0]
    found = re.search(r"\b(she|he|him|his|her)\b(\s+\w+)?", question)
    if name in ("standup", "expense", "laptop", "onboarding", "refund", "gateway") or not found:
        return None
    if name in ("office", "database", "staff", "team", "annual", "help", "release"):
        return None
    pronoun, follower = found.group(1), found.group(2)
    owner = name.capitalize()
    if pronoun == "his" or (pronoun == "her" and follower):
        owner += "'s"
    return question[: found.start(1)] + owner + question[found.end(1) :]


FACTS: list[Fact] = [
    *(Fact(k, v) for k, v, _ in _PARAPHRASES),
    *(Fact(k, v) for k, v, _ in _IDENTIFIERS),
    *DISTRACTORS,
]
"""Every record of the set, answers and distractors, in the order they are stored."""

QUESTIONS: list[Question] = [
    *(Question("paraphrase", q, k) for k, _, q in _PARAPHRASES),
    *(Question("named", n, k) for k, _, q in _PARAPHRASES if (n := _named(k, q)) is not None),
    *(Question("keyword", q, k) for q, k in _KEYWORDS),
    *(Question("identifier", q, k) for k, _, q in _IDENTIFIERS),
]
"""Every question with the key of its answer."""


def content_words(text: str) -> set[str]:
    """The terms of ``text`` that are not function words."""
    return {t for t in search_terms(text) if t not in STOPWORDS}


def check_question_set() -> None:
    """Raises ``ValueError`` when the set breaks its rules: a paraphrase sharing a content
    word with its fact (key or value), an answer that is not a fact, a duplicate key, an
    identifier question whose identifier is not in its own record."""
    keys = [fact.key for fact in FACTS]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate fact keys")
    facts = dict(FACTS)
    for question in QUESTIONS:
        if question.answer not in facts:
            raise ValueError(f"{question.text!r} answers no fact")
        record = f"{question.answer} {facts[question.answer]}"
        shared = content_words(question.text) & content_words(record)
        if question.kind == "paraphrase" and shared:
            raise ValueError(f"{question.text!r} shares {sorted(shared)} with its fact")
        if question.kind == "identifier" and not any(
            any(c.isdigit() for c in token) and token in record
            for token in question.text.replace("#", " ").split()
        ):
            raise ValueError(f"{question.text!r} holds no identifier of its record")


def _parts(text: str, sep: str) -> list[str]:
    return text.split(sep)


# The distractors' vocabulary: names, verbs, objects and times none of the questions asks about.
_NAMES = _parts(
    "Aria Bruno Cyrus Delia Elio Fiona Gideon Hana Ivan Juno Kai Lena Milo Nadia Omar Pia "
    "Rafe Sana Theo Una Vera Wes Yusuf Zara Anton Bea Cole Dina Emil Flora Gus Hedda Ines "
    "Joel Kira Lars Mona Nils Orla Pavel",
    " ",
)
_VERBS = _parts(
    "bought|mentioned|forgot|asked about|recommended|returned|ordered|cancelled|reviewed|"
    "booked|shared|packed|repaired|lost|found|painted|borrowed|sold|tested|planned",
    "|",
)
_OBJECTS = _parts(
    "a blue umbrella|the quarterly report|two concert tickets|a used bicycle|"
    "the new printer|a birthday cake|the server migration|a pair of boots|the team offsite|"
    "a vintage lamp|the onboarding guide|a train pass|the budget sheet|a mountain tent|"
    "the garden hose|a chess set|the demo video|a winter coat|the laptop charger|"
    "a coffee grinder|the conference talk|a kitchen scale|the client proposal|a yoga mat|"
    "the press release|a desk chair|the travel insurance|a phone case|the design mockups|"
    "a soup recipe",
    "|",
)
_TIMES = _parts(
    "on Monday|last week|yesterday|in March|before lunch|after the meeting|this morning|"
    "over the weekend|in the spring|at the airport|during the call|last month",
    "|",
)


def filler_facts(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` distinct synthetic facts (key, value) that answer none of the questions."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < count:
        value = (
            f"{rng.choice(_NAMES)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
            f"{rng.choice(_TIMES)}."
        )
        if value not in seen:
            seen.add(value)
            out.append((f"note_{len(out):06d}", value))
    return out
