from __future__ import annotations

import pytest

from evo_fsr.config import ConfigError, RunConfig, load_config, parse_set


def test_defaults_and_auto_islands() -> None:
    config = load_config(overrides={"task": "conv2d"})
    assert (config.pop, config.gens, config.selection.tournament_size) == (32, 10, 3)
    assert config.island_count == 2
    assert load_config(overrides={"task": "conv2d", "pop": 8}).island_count == 1
    assert not config.llm.enabled


def test_yaml_then_flags_then_sets(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("task: conv2d\npop: 12\nllm:\n  temperature: 0.2\n  model: m\neval:\n  shapes:\n    - {N: 1, C: 2}\n")
    config = load_config(path, {"pop": 10}, ["llm.temperature=0.9", "selection.elite=2"])
    assert config.pop == 10
    assert config.llm.temperature == 0.9 and config.llm.model == "m"
    assert config.selection.elite == 2
    assert config.eval.shapes == ((("N", 1), ("C", 2)),)
    assert config.to_dict()["eval"]["shapes"] == [{"N": 1, "C": 2}]


@pytest.mark.parametrize("text, key, words", [
    ("task: conv2d\npopulation: 3\n", "population", "unknown key"),
    ("task: conv2d\nllm:\n  temprature: 1\n", "llm.temprature", "unknown key"),
    ("task: conv2d\npop: many\n", "pop", "must be an integer"),
    ("task: conv2d\nllm: 3\n", "llm", "must be a mapping"),
    ("- a\n- b\n", "", "top level must be a mapping"),
    ("task: [unclosed\n", "", "not valid YAML"),
])
def test_bad_yaml_names_file_and_key(tmp_path, text: str, key: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == key and str(path) in str(info.value) and words in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("item, key, words", [
    ("llm.temperature=hot", "llm.temperature", "must be a number"),
    ("gens=true", "gens", "must be an integer"),
    ("nothing", "", "expected key=value"),
    ("ray.nope=1", "ray.nope", "unknown key"),
    ("llm.temperature=5", "llm.temperature", "0..2"),
    ("selection.elite=99", "selection.elite", "island size"),
])
def test_set_type_and_range_checks(item: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"task": "conv2d"}, sets=[item])
    assert info.value.key == key and words in str(info.value)


def test_parse_set_values_are_yaml_scalars() -> None:
    assert parse_set("llm.model=gpt-x") == ("llm.model", "gpt-x")
    assert parse_set("pop=8") == ("pop", 8)
    assert parse_set("llm.temperature=0.5") == ("llm.temperature", 0.5)


def test_nothing_can_vary_without_knobs_or_llm() -> None:
    with pytest.raises(ConfigError, match="nothing can vary"):
        load_config(overrides={"task": "conv2d"}, sets=["operators.knob_mutate=0", "operators.knob_crossover=0"])


def test_api_key_is_redacted_and_config_is_frozen() -> None:
    config = load_config(overrides={"task": "conv2d", "llm.api_key": "sk-secret"})
    assert "sk-secret" not in str(config.to_dict())
    with pytest.raises(Exception):
        config.pop = 3  # type: ignore[misc]
    assert isinstance(config, RunConfig)


def test_a_shared_gpu_is_a_config_key_of_eval():
    """``eval.gpu_shared`` turns the idle gate off (verdict/gpu_idle.py); off unless set."""
    from evo_fsr.config import load_config
    assert load_config().eval.gpu_shared is False
    assert load_config(sets=["eval.gpu_shared=true"]).eval.gpu_shared is True
