"""The tier with no LM judges faster by finding the same things another way, never by finding other things: the
turn's sentences are pysbd's (its segmenter's own output is the oracle), a claim's occurrences in its turn are the
regular expression's (``spans._pattern_occurrences``, the path every non-ASCII text still takes), and a batch of
rewards judged with the earlier paths put back gives the same verdicts, field for field."""

import json
import os
import random
import re
from pathlib import Path

import pysbd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vista_dspy import VistaReward, grounding, spans

REPO = Path(__file__).resolve().parents[1]
MANY = settings(max_examples=int(os.environ.get("VISTA_FUZZ_EXAMPLES", "200")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# Pieces that exercise pysbd's rules: abbreviations, numbers, lists, quotes, parentheses, ellipses, e-mails, URLs,
# line breaks and unusual spaces; and letters outside ASCII.
PIECES = ["Dr. Smith", "e.g.", "i.e.", "U.S.", "p.m.", "a.m.", "St. Louis", "No. 5", "3.14", "1.", "2)", "a)",
          "(see above)", '"Yes."', "'No!'", "...", "Hello world.", "It opened in 1890.", "Is it open?", "Wow!",
          "Mr. Brown left.", "He said: go.", "x@y.com", "www.example.org.", "Tromsø", "São Paulo", "naïve", "İstanbul",
          "ß", "K", "ſ", "\n", "\n\n", "\t", "  ", "\u00a0", "\u2009", "\u3000", ". ", "? ", "! ", ";", ",", "-",
          "•", "1) first", "2) second", "Jan. 5", "approx. 10", "etc.", "vs.", "Inc.", "the", "The", "THE", "Mt."]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=14).map(" ".join)


def pysbd_sentences(text: str) -> list[str]:
    """The sentences as ``split_sentences`` defined them before it found pysbd's pieces itself: pysbd's own
    ``segment``, stripped, without the pieces that hold no word."""
    pieces = pysbd.Segmenter(language="en", clean=False).segment(text.strip())
    return [s.strip() for s in pieces if re.search(r"\w", s)]


@MANY
@given(text=texts)
def test_the_sentences_are_pysbds_on_generated_texts(text):
    grounding._sentences.cache_clear()
    assert grounding.split_sentences(text) == pysbd_sentences(text)


def test_the_sentences_are_pysbds_on_the_examples_and_a_seeded_mix():
    rng = random.Random(50)
    dialogues = json.loads((REPO / "examples" / "quickstart.json").read_text())
    corpus = [t.get("utterance", "") for d in dialogues for t in d] + [
        t.get("retrieved_document", "") for d in dialogues for t in d]
    corpus += [" ".join(rng.choice(PIECES + corpus) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    grounding._sentences.cache_clear()
    assert [grounding.split_sentences(t) for t in corpus] == [pysbd_sentences(t) for t in corpus]


# ASCII texts and claims drawn from few words, so that claims occur, repeat, change case and spacing, and touch
# punctuation and word characters.
WORDS = ["the", "The", "museum", "Museum", "opens", "at", "nine", "9", "_x", "free", "free,", "(free)", "it's", "."]
SPACES = [" ", "  ", "\t", "\n", "\x0b", "\x0c", "\x1c", "\x1f", ""]
ascii_texts = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SPACES)), max_size=20).map(
    lambda parts: "".join(w + s for w, s in parts))
ascii_claims = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)


@MANY
@given(text=ascii_texts, claim=ascii_claims)
def test_an_ascii_claims_occurrences_are_the_regular_expressions(text, claim):
    words = claim.strip().rstrip(spans._FINAL).split()
    if not words:
        return
    assert spans._ascii_occurrences(text, words) == spans._pattern_occurrences(text, words)


def test_a_claim_said_twice_in_other_case_and_spacing_is_found_at_both_places():
    text = "The museum opens at nine. the  MUSEUM\topens at nine, they say."
    found = spans._ascii_occurrences(text, "the museum opens at nine".split())
    assert found == spans._pattern_occurrences(text, "the museum opens at nine".split()) == [(0, 24), (26, 51)]


def old_paths(monkeypatch):
    """The paths before the fast ones: pysbd's own ``segment`` and one regular expression per claim."""
    def segment(text):
        if not text:
            return ()
        return tuple(s.strip() for s in pysbd.Segmenter(language="en", clean=False).segment(text)
                     if re.search(r"\w", s))

    monkeypatch.setattr(grounding, "_sentences", segment)
    monkeypatch.setattr(spans, "_ascii_occurrences", spans._pattern_occurrences)


def reward_batch():
    """A GRPO-shaped batch from the quick-start example: each assistant turn a prompt (with the dialogue before it)
    and 40 completions mixing its own sentences with others, in other case and spacing, with invented ones."""
    rng = random.Random(7)
    dialogues = json.loads((REPO / "examples" / "quickstart.json").read_text())
    prompts, completions, documents = [], [], []
    for dialogue in dialogues:
        for index, turn in enumerate(dialogue):
            if turn["role"] != "assistant":
                continue
            history = [{"role": t["role"], "content": t["utterance"]} for t in dialogue[:index]]
            own = grounding.split_sentences(turn["utterance"]) + grounding.split_sentences(turn["retrieved_document"])
            extra = ["I don't know.", "I love the northern lights!", "It was founded in 1850 by Dr. Smith.",
                     "TROMSØ is in Norway.", "Tromso   is in\tNorway.", "Is it cold?", "e.g. minus 30 degrees."]
            for k in range(40):
                text = " ".join(rng.sample(own + extra, rng.randint(1, 4))) + f" It opened in {1500 + k}."
                prompts.append(history)
                completions.append([{"role": "assistant", "content": text}])
                documents.append(turn["retrieved_document"])
    return {"prompts": prompts, "completions": completions, "document": documents}


def verdicts(call):
    getattr(grounding._sentences, "cache_clear", lambda: None)()  # (the earlier path caches nothing)
    with VistaReward("local", system="evidence", units="sentences") as reward:
        return [json.dumps(v.to_dict(), sort_keys=True, default=str) for v in reward.judge_batch(**call)]


@pytest.fixture(scope="module")
def batch():
    return reward_batch()


def test_the_no_lm_tier_gives_the_same_verdicts_as_the_earlier_paths(batch, monkeypatch):
    fast = verdicts(batch)
    with monkeypatch.context() as patched:
        old_paths(patched)
        before = verdicts(batch)
    assert len(fast) == len(batch["completions"]) == 80
    assert fast == before


# Wave 7's checks read the same things another way: an ASCII claim without an evaluative word's letters is not
# searched, a closest passage comes from a word index, coverage shares from set differences.
CLAIM_WORDS = ["I", "i", "my", "We", "US", "us", "the assistant's", "Great", "great", "GREAT", "favourite", "favorite",
               "recommended", "must-see", "cool", "Cool.", "coolest", "worth", "museum", "opens", "at", "nine", "1890",
               "Tromsø", "ſorry", "K", "fun!", "the", "free", "should", "I'm", "It's"]
claims = st.lists(st.sampled_from(CLAIM_WORDS) | st.text(max_size=6), min_size=1, max_size=10).map(" ".join)


@MANY
@given(claim=claims)
def test_evaluative_and_own_words_are_the_regular_expressions(claim):
    from vista_dspy import evidence

    regex = [m.group() for m in evidence._EVALUATIVE.finditer(claim) if m.group()[0].islower()]
    assert evidence.evaluative_words(claim) == regex
    assert evidence._evaluates(claim) == bool(regex)
    assert evidence._speaks_of_itself(claim) == bool(evidence.own_words(claim))


@MANY
@given(claim=claims, sources=st.lists(claims, min_size=1, max_size=4), store=st.lists(claims, max_size=3))
def test_windows_closest_passage_and_coverage_shares_are_their_definitions(claim, sources, store):
    from vista_dspy.evidence import SOURCES, WINDOW, TurnEvidence
    from vista_dspy.grounding import content_words

    evidence = TurnEvidence.of(" ".join(sources[:2]), store, sources[2:])
    words = content_words(claim)

    def window(k):  # brute force: every centre sharing a word, its window's share, then its own, then the first
        seq = evidence.sequences[k]
        best = None
        for c in seq:
            own = len(words & evidence.passages[c].words)
            if not own:
                continue
            span = [i for i in seq if abs(i - c) <= WINDOW and evidence.paragraphs[i] == evidence.paragraphs[c]]
            covered = words & frozenset().union(*(evidence.passages[i].words for i in span))
            key = (len(covered), round(sum(evidence._idf[w] for w in covered), 9), own)
            if best is None or key > best[0]:
                best = (key, covered)
        return best[1] if best else frozenset()

    covered = [window(k) for k in range(len(SOURCES))]
    support = evidence.support(claim)
    most = max(len(c) for c in covered)
    if not most:
        assert support is None
    else:
        k = next(k for k in range(len(SOURCES)) if len(covered[k]) == most)  # the reference first on ties
        assert (support.passage.source, support.shared, support.of) == (SOURCES[k], most, len(words))
    cues = evidence.cues(claim)

    def uncovered(*ks):
        return len(words.difference(*(covered[k] for k in ks))) / len(words) if words else 0.0

    assert cues["uncovered_knowledge"] == uncovered(1)
    assert cues["uncovered_history"] == uncovered(2)
    assert cues["uncovered_all"] == uncovered(0, 1, 2)
    assert cues["uncovered_reference"] == (uncovered(0) if evidence.has_reference else 1.0 if words else 0.0)
