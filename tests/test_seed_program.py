import json

from vista_dspy import Vista
from vista_dspy.compiled.files import compiled_dir
from vista_dspy.optimize.seed_program import (
    CATEGORIZE_DEMOS,
    DECOMPOSE_DEMOS,
    VERIFY_DEMOS,
    build_seed_program,
    seed_path,
)

PREDICTORS = ("decompose", "verify", "categorize", "contradiction")


def _state(program):
    state = program.dump_state()
    return {name: state[name] for name in PREDICTORS}


def test_shipped_seed_program_matches_the_demos_in_code():
    shipped = json.loads(seed_path().read_text())
    built = _state(build_seed_program())
    assert {name: shipped[name] for name in PREDICTORS} == json.loads(json.dumps(built))


def test_seed_demo_counts_and_completeness():
    program = Vista.from_program()
    assert (len(program.decompose.demos), len(program.verify.demos), len(program.categorize.demos)) == (6, 6, 9)
    for predictor in (program.decompose, program.verify, program.categorize):
        fields = set(predictor.signature.input_fields) | set(predictor.signature.output_fields)
        for demo in predictor.demos:
            assert fields <= set(demo.keys()), f"incomplete demo in {predictor}"
    assert [d["category"] for d in CATEGORIZE_DEMOS].count("ABSTENTION") == 2
    assert {d["label"] for d in VERIFY_DEMOS} == {"VERIFIED", "UNVERIFIABLE"}
    assert any(d["claims"] == [] for d in DECOMPOSE_DEMOS)


def test_saved_program_has_no_lm_or_key_and_loads_into_a_fresh_module(tmp_path, monkeypatch):
    import dspy

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test-key")
    program = build_seed_program()
    path = tmp_path / "p.json"
    with dspy.context(lm=dspy.LM("openai/gpt-4o", api_key="sk-secret-test-key")):
        program.save(str(path))
    text = path.read_text()
    assert "sk-secret" not in text and "api_key" not in text
    assert all(json.loads(text)[name]["lm"] is None for name in PREDICTORS)
    fresh = Vista.from_program(path, use_context=True)
    assert _state(fresh) == _state(program)
    assert fresh.program_name == str(path) and fresh.options.use_context


def test_program_names_resolve_in_the_compiled_folder():
    assert Vista.from_program("seed").program_name == "seed"
    assert (compiled_dir() / "seed.json").is_file()
