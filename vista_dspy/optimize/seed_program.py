"""The seed program ``compiled/seed.json`` and the script that writes it: hand-written demonstrations for each stage,
the paper's method with no decision rule (the program every compiled one is gated against).

Written for vista-dspy (own wording and domains). Each demo teaches one behaviour of the method, named in its
``teaches`` key (not rendered to the model). Rebuild the shipped file with ``python -m vista_dspy.optimize.seed_program``
(``--out PATH`` writes elsewhere); a test checks that the file matches this module.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from ..compiled.files import SEED_PROGRAM, compiled_dir
from ..program import Vista
from ..signatures import EMPTY_KNOWLEDGE, NO_REFERENCE

DECOMPOSE_DEMOS = [
    {
        "teaches": "presupposition and factive verbs",
        "history": "user: Is Pluto still a planet?",
        "turn": "No. I'm sure you remember that it was reclassified as a dwarf planet in 2006; astronomers stopped "
        "counting it once they found Eris, which is about the same size.",
        "claims": [
            "Pluto is not a planet.",
            "Pluto was reclassified as a dwarf planet in 2006.",
            "Astronomers used to count Pluto as a planet.",
            "Astronomers found Eris.",
            "Eris is about the same size as Pluto.",
            "Astronomers stopped counting Pluto as a planet after they found Eris.",
        ],
    },
    {
        "teaches": "coreference: names instead of pronouns",
        "history": "user: Who wrote the opera Carmen?\n"
        "assistant: Georges Bizet wrote it, and it premiered in Paris in 1875.\n"
        "user: Was it a success?",
        "turn": "Not at first. Critics found it scandalous, and he died three months after its premiere, never "
        "knowing how popular it would become.",
        "claims": [
            "Carmen was not a success at first.",
            "Critics found Carmen scandalous.",
            "Georges Bizet died three months after the premiere of Carmen.",
            "Carmen later became popular.",
            "Georges Bizet never knew how popular Carmen would become.",
        ],
    },
    {
        "teaches": "splitting lists and compound sentences",
        "history": "user: What grows well in a cool, rainy climate?",
        "turn": "Kale, potatoes and rhubarb all thrive there, and so do most berries, though blueberries also need "
        "acidic soil.",
        "claims": [
            "Kale thrives in a cool, rainy climate.",
            "Potatoes thrive in a cool, rainy climate.",
            "Rhubarb thrives in a cool, rainy climate.",
            "Most berries thrive in a cool, rainy climate.",
            "Blueberries need acidic soil.",
        ],
    },
    {
        "teaches": "greetings carry no claim; implicature made explicit; advice kept as a claim",
        "history": "user: Hi! I'm flying to Reykjavik next week.",
        "turn": "Hello, and lucky you! Pack a warm coat: even in July it rarely gets above 15 degrees there.",
        "claims": [
            "The assistant thinks the user is lucky to travel to Reykjavik.",
            "The assistant recommends that the user pack a warm coat for Reykjavik.",
            "Even in July, the temperature in Reykjavik rarely rises above 15 degrees.",
            "Reykjavik can be cold in summer.",
        ],
    },
    {
        "teaches": "opinions, feelings and experiences are claims too; 'because' clauses are split",
        "history": "user: Have you seen any good films lately?",
        "turn": "I love Spirited Away because the bathhouse spirits remind me of my grandmother's stories. Hayao "
        "Miyazaki directed it, and I think it's the best animated film ever made.",
        "claims": [
            "The assistant loves Spirited Away.",
            "Spirited Away features bathhouse spirits.",
            "The bathhouse spirits in Spirited Away remind the assistant of its grandmother's stories.",
            "The assistant's grandmother told stories.",
            "Hayao Miyazaki directed Spirited Away.",
            "The assistant thinks Spirited Away is the best animated film ever made.",
        ],
    },
    {
        "teaches": "a turn made only of questions yields no claim",
        "history": "user: We just adopted a retired greyhound.",
        "turn": "How old is your greyhound, and how long did it race?",
        "claims": [],
    },
]

VERIFY_DEMOS = [
    {
        "teaches": "a paraphrase of the reference is supported",
        "reference": "Mount Kilimanjaro\nKilimanjaro is a dormant volcano in Tanzania. Its highest summit, Uhuru "
        "Peak, rises 5,895 metres above sea level.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: How tall is Kilimanjaro?",
        "claim": "The highest point of Kilimanjaro is almost 5,900 metres above sea level.",
        "explanation": "The reference puts Uhuru Peak, the highest summit, at 5,895 metres, which is almost 5,900.",
        "label": "VERIFIED",
    },
    {
        "teaches": "support found only in the knowledge store (an earlier turn)",
        "reference": "Honey bee\nA colony usually has one queen, a few thousand drones and tens of thousands of "
        "workers.",
        "knowledge": "1. Worker bees are female.\n2. The assistant keeps two beehives.",
        "history": "user: Do you keep bees?\nassistant: I keep two hives. All the workers are female.\n"
        "user: How many workers does a hive have?",
        "claim": "The tens of thousands of workers in a honey bee colony are female.",
        "explanation": "The reference gives tens of thousands of workers and knowledge item 1 says workers are female.",
        "label": "VERIFIED",
    },
    {
        "teaches": "support in the knowledge store when the turn has no reference document",
        "reference": NO_REFERENCE,
        "knowledge": "1. The user's flight to Osaka leaves on Friday.\n2. The assistant prefers window seats.",
        "history": "user: My flight to Osaka leaves on Friday.\nassistant: Exciting! I always pick a window seat.\n"
        "user: Should I do the same?",
        "claim": "The user is flying to Osaka.",
        "explanation": "Knowledge item 1 says the user's flight to Osaka leaves on Friday.",
        "label": "VERIFIED",
    },
    {
        "teaches": "a claim the reference contradicts is not verified",
        "reference": "Great Wall of China\nContrary to a popular belief, the wall cannot be seen with the naked eye "
        "from low Earth orbit.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: Is the Great Wall really visible from space?",
        "claim": "The Great Wall of China can be seen from orbit with the naked eye.",
        "explanation": "The reference says the opposite: the wall cannot be seen with the naked eye from orbit.",
        "label": "UNVERIFIABLE",
    },
    {
        "teaches": "a true-sounding fact the sources do not mention is not verified (no world knowledge)",
        "reference": "Penicillin\nAlexander Fleming discovered penicillin in 1928 at St Mary's Hospital in London.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: Who discovered penicillin?",
        "claim": "Alexander Fleming shared a Nobel Prize for the discovery of penicillin.",
        "explanation": "Neither the reference nor the knowledge store mentions a Nobel Prize.",
        "label": "UNVERIFIABLE",
    },
    {
        "teaches": "an opinion is not verified even when its topic is in the reference",
        "reference": "Lisbon\nLisbon is built on seven hills and is served by historic trams, including line 28.",
        "knowledge": "1. The user is visiting Lisbon in May.",
        "history": "user: I'm visiting Lisbon in May. How should I get around?",
        "claim": "The assistant thinks tram 28 is the best way to see Lisbon.",
        "explanation": "This is the assistant's opinion; the reference only says that tram line 28 exists.",
        "label": "UNVERIFIABLE",
    },
]

CATEGORIZE_DEMOS = [
    {
        "teaches": "contradiction with the reference document",
        "reference": "Amazon River\nThe Amazon flows eastward across South America and empties into the Atlantic "
        "Ocean.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: Where does the Amazon end?",
        "claim": "The Amazon River empties into the Pacific Ocean.",
        "explanation": "The reference says the Amazon empties into the Atlantic, not the Pacific.",
        "category": "CONTRADICTED",
    },
    {
        "teaches": "contradiction with the knowledge store (an earlier turn)",
        "reference": "Rijksmuseum\nThe Rijksmuseum in Amsterdam holds Rembrandt's The Night Watch.",
        "knowledge": "1. The Rijksmuseum opens at 9 a.m. on weekdays.\n2. The user is in Amsterdam this week.",
        "history": "assistant: The Rijksmuseum opens at 9 a.m. on weekdays.\nuser: Great, when should I go?",
        "claim": "The Rijksmuseum does not open until 11 a.m. on weekdays.",
        "explanation": "Knowledge item 1 says the Rijksmuseum opens at 9 a.m. on weekdays.",
        "category": "CONTRADICTED",
    },
    {
        "teaches": "a specific detail the sources do not give",
        "reference": "Eiffel Tower\nThe tower was completed in 1889 as the entrance arch of the World's Fair in "
        "Paris.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: Can you climb the Eiffel Tower?",
        "claim": "The Eiffel Tower has 1,665 steps.",
        "explanation": "A factual claim; the reference does not mention the number of steps, so it cannot be checked.",
        "category": "LACKING EVIDENCE",
    },
    {
        "teaches": "a plausible general fact that goes beyond the reference",
        "reference": "Sourdough\nSourdough bread is leavened by a culture of wild yeast and lactic acid bacteria.",
        "knowledge": "1. The assistant bakes bread on Sundays.",
        "history": "user: Why does sourdough taste sour?",
        "claim": "Sourdough bread keeps fresh longer than bread made with commercial yeast.",
        "explanation": "A factual assertion about freshness that neither the reference nor the store addresses.",
        "category": "LACKING EVIDENCE",
    },
    {
        "teaches": "a recommendation is out of scope",
        "reference": "Rijksmuseum\nThe Rijksmuseum in Amsterdam holds Rembrandt's The Night Watch.",
        "knowledge": "1. The user is in Amsterdam this week.",
        "history": "user: I'm in Amsterdam this week. Any tips?",
        "claim": "The assistant recommends visiting the Rijksmuseum early in the morning.",
        "explanation": "Advice to the user, not a factual assertion that the sources could confirm.",
        "category": "OUT-OF-SCOPE",
    },
    {
        "teaches": "a personal experience is out of scope",
        "reference": "Inca Trail\nThe classic Inca Trail to Machu Picchu is about 42 kilometres long.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: Is the Inca Trail hard?",
        "claim": "The assistant hiked the Inca Trail last spring.",
        "explanation": "The assistant's own experience, which no source can confirm or deny.",
        "category": "OUT-OF-SCOPE",
    },
    {
        "teaches": "an opinion or preference is out of scope",
        "reference": "Jazz\nJazz originated in the African-American communities of New Orleans in the late 19th "
        "century.",
        "knowledge": "1. The user listens to rock music.",
        "history": "user: I mostly listen to rock. Do you like jazz?",
        "claim": "The assistant finds jazz more relaxing than rock.",
        "explanation": "A personal preference, not a verifiable statement about the world.",
        "category": "OUT-OF-SCOPE",
    },
    {
        "teaches": "saying 'I don't know' is an abstention",
        "reference": "Neptune\nNeptune is the eighth planet from the Sun and the farthest known planet in the Solar "
        "System.",
        "knowledge": EMPTY_KNOWLEDGE,
        "history": "user: How many moons does Neptune have?",
        "claim": "The assistant does not know how many moons Neptune has.",
        "explanation": "The assistant declines to give the number: an abstention, not a false statement.",
        "category": "ABSTENTION",
    },
    {
        "teaches": "hedged uncertainty is an abstention",
        "reference": NO_REFERENCE,
        "knowledge": "1. The user cycles to work.\n2. The Harbour Bridge reopened last month.",
        "history": "user: I cycle to work. Can I take the Harbour Bridge now?",
        "claim": "The assistant is not sure whether cyclists may use the Harbour Bridge.",
        "explanation": "The assistant expresses uncertainty instead of asserting an answer.",
        "category": "ABSTENTION",
    },
]


def _examples(demos: list[dict]) -> list[dspy.Example]:
    return [dspy.Example(**{k: v for k, v in demo.items() if k != "teaches"}) for demo in demos]


def build_seed_program() -> Vista:
    program = Vista()
    program.decompose.demos = _examples(DECOMPOSE_DEMOS)
    program.verify.demos = _examples(VERIFY_DEMOS)
    program.categorize.demos = _examples(CATEGORIZE_DEMOS)
    program.program_name = SEED_PROGRAM
    return program


def seed_path() -> Path:
    return compiled_dir() / f"{SEED_PROGRAM}.json"


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write the seed program built from the demos in this module.")
    parser.add_argument("--out", type=Path, default=seed_path(), help="where to write it (default: %(default)s)")
    out = parser.parse_args().out
    build_seed_program().save_program(out)
    print(f"wrote {out}")
