"""What the choosing protocols share, without an LM: the named parts of the annotated file, the stage-wise reading of
end-to-end verdicts, and a scoring that an interrupt stops. The priced study itself: ``test_priced_study.py``."""

from collections import Counter

import pytest

from vista_dspy.data import load_dialogues, part_of
from vista_dspy.optimize.metrics import decomposition_agreement
from vista_dspy.schema import Category, ClaimVerdict, DialogueVerdict, TurnVerdict


@pytest.fixture(scope="module")
def dialogues():
    from conftest import DEV_FILE

    if not DEV_FILE.exists():
        pytest.skip(f"benchmark data not found at {DEV_FILE}")
    return load_dialogues(DEV_FILE)


def test_parts_are_disjoint_halves_and_pool_select_halve_train_within_each_source(dialogues):
    ids = {part: [d.id for d in part_of(dialogues, part, 0)] for part in ("train", "dev", "pool", "select", "all")}
    assert not set(ids["train"]) & set(ids["dev"]) and set(ids["train"]) | set(ids["dev"]) == set(ids["all"])
    assert not set(ids["pool"]) & set(ids["select"]) and set(ids["pool"]) | set(ids["select"]) == set(ids["train"])
    source = {d.id: d.source["dataset"] for d in dialogues}
    pool, select = Counter(source[i] for i in ids["pool"]), Counter(source[i] for i in ids["select"])
    assert len(pool | select) > 1  # the dev file mixes source datasets
    assert all(abs(pool[k] - select[k]) <= 1 for k in pool | select)  # stratified by source dataset
    assert ids["pool"] == [i for i in ids["train"] if i in set(ids["pool"])]  # file order kept
    assert [d.id for d in part_of(dialogues, "dev", 1)] != ids["dev"]  # the seed moves the split
    with pytest.raises(ValueError, match="unknown part 'test'"):
        part_of(dialogues, "test")


def test_decomposition_agreement_matches_claims_and_compares_their_categories(dialogues):
    dialogue = next(d for d in dialogues if d.judged_turns and d.turns[d.judged_turns[0]].gold.claims)
    index = dialogue.judged_turns[0]
    human = dialogue.turns[index].gold.claims
    wrong = next(c for c in Category if c not in (human[0].category, Category.ERROR))
    claims = [ClaimVerdict(claim=human[0].text, category=wrong, stage="categorize"),
              ClaimVerdict(claim="Completely unrelated words here.", category=Category.VERIFIED, stage="verify")]
    claims += [ClaimVerdict(claim=c.text, category=c.category, stage="verify") for c in human[1:]]
    turn = TurnVerdict(turn_index=index, text="", grounding="document", claims=claims, claims_source="decomposed",
                       label="faithful", score=None, knowledge=[])
    result = decomposition_agreement([dialogue], [DialogueVerdict(dialogue_id=dialogue.id, turns=[turn], score=None)])
    assert result.matched == len(human) and result.same_category == len(human) - 1
    assert result.f1 == pytest.approx(2 * len(human) / (2 * len(human) + 1))


