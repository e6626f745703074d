"""The adapters that format a predictor's repeated prompt parts once must produce DSPy's prompts byte for byte."""

import dspy
import pytest

from vista_dspy import Vista
from vista_dspy.lm.clients.adapters import build_adapter
from vista_dspy.prompts import batch_demos
from vista_dspy.signatures import CategorizedClaim, VerifiedClaim, batched, with_history, with_reasoning

INPUTS = {
    "decompose": {"history": "user: Tell me about owls.", "turn": "Owls hunt at night. They can turn their heads."},
    "verify": {"reference": "Owls are nocturnal birds of prey.", "knowledge": "- Owls hunt at night.",
               "claim": "Owls are nocturnal."},
}


def cases():
    program = Vista.from_program(None)
    verify, categorize = program.verify, program.categorize
    inputs = INPUTS["verify"]
    yield "decompose", program.decompose.signature, program.decompose.demos, INPUTS["decompose"]
    yield "verify", verify.signature, verify.demos, inputs
    yield "categorize", categorize.signature, categorize.demos, inputs
    yield "verify+ctx", with_history(verify.signature), verify.demos, {**inputs, "history": "user: hi"}
    yield "categorize+cot", with_reasoning(categorize.signature), categorize.demos, inputs
    claims = {k: v for k, v in inputs.items() if k != "claim"} | {"claims": "1. Owls are nocturnal.\n2. Owls sing."}
    yield ("verify batched", batched(verify.signature, VerifiedClaim), batch_demos(verify.demos, VerifiedClaim),
           claims)
    yield ("categorize batched", batched(categorize.signature, CategorizedClaim),
           batch_demos(categorize.demos, CategorizedClaim), claims)
    yield "no demos", verify.signature, [], inputs


@pytest.mark.parametrize("name", ["json", "chat"])
def test_memoized_prompts_equal_dspys_own(name):
    stock = {"json": dspy.JSONAdapter, "chat": dspy.ChatAdapter}[name]()
    fast = build_adapter(name)
    assert isinstance(fast, type(stock))
    for case, signature, demos, inputs in cases():
        expected = stock.format(signature, demos, inputs)
        assert fast.format(signature, demos, inputs) == expected, case  # first call: formatted and kept
        assert fast.format(signature, demos, inputs) == expected, case  # second call: from the memo
        # Equal content rebuilt as new objects (batched judging regroups demos per turn) hits the memo too.
        rebuilt = [dspy.Example(**dict(d)) if isinstance(d, dspy.Example) else dict(d) for d in demos]
        assert fast.format(signature, rebuilt, inputs) == expected, case
    assert fast._memo  # the parts were memoized


def test_the_memo_follows_content_not_identity():
    fast, stock = build_adapter("json"), dspy.JSONAdapter()
    program = Vista.from_program(None)
    signature, demos = program.verify.signature, list(program.verify.demos)
    fast.format(signature, demos, INPUTS["verify"])
    changed = [dspy.Example(**{**dict(demos[0]), "explanation": "A different explanation."}), *demos[1:]]
    assert fast.format(signature, changed, INPUTS["verify"]) == stock.format(signature, changed, INPUTS["verify"])
    reworded = signature.with_instructions("Judge the claim.")
    assert fast.format(reworded, demos, INPUTS["verify"]) == stock.format(reworded, demos, INPUTS["verify"])
    # Messages handed out are copies: a caller editing them does not edit the memo.
    first = fast.format(signature, demos, INPUTS["verify"])
    first[1]["content"] = "edited"
    assert fast.format(signature, demos, INPUTS["verify"])[1]["content"] != "edited"
