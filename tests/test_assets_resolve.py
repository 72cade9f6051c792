"""resolve_model: keywords become the embedded folders; other names and paths pass through."""

import pytest

from nlhf import assets


@pytest.fixture
def fake_folders(monkeypatch, tmp_path):
    policy, encoder = tmp_path / "policy", tmp_path / "encoder"
    monkeypatch.setattr(assets, "policy_path", lambda: policy)
    monkeypatch.setattr(assets, "encoder_path", lambda: encoder)
    return policy, encoder


@pytest.mark.parametrize("name", ["default", "smollm2-135m-instruct", "SmolLM2", " smollm2 "])
def test_policy_keywords(fake_folders, name):
    assert assets.resolve_model(name) == str(fake_folders[0])


@pytest.mark.parametrize("name", ["default", "all-minilm-l6-v2", "MiniLM"])
def test_encoder_keywords(fake_folders, name):
    assert assets.resolve_model(name, role="encoder") == str(fake_folders[1])


def test_keywords_are_per_role(fake_folders):
    assert assets.resolve_model("minilm") == "minilm"  # not a policy keyword: a hub name
    assert assets.resolve_model("smollm2", role="encoder") == "smollm2"


@pytest.mark.parametrize(
    "name",
    ["HuggingFaceTB/SmolLM2-360M-Instruct", "gpt2", "sentence-transformers/all-MiniLM-L6-v2"],
)
def test_hub_names_pass_through_unchanged(fake_folders, name):
    assert assets.resolve_model(name) == name


def test_local_paths_pass_through(fake_folders, tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert assets.resolve_model(folder) == str(folder)
    assert assets.resolve_model(str(folder)) == str(folder)
    monkeypatch.chdir(tmp_path)
    assert assets.resolve_model("./my-model") == "./my-model"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert assets.resolve_model("~/my-model") == str(folder)


def test_missing_explicit_local_path_is_an_error(fake_folders, tmp_path):
    with pytest.raises(assets.AssetError, match=r"does not exist.*default"):
        assets.resolve_model(str(tmp_path / "nope"))


def test_unknown_role(fake_folders):
    with pytest.raises(ValueError, match="role must be one of"):
        assets.resolve_model("default", role="judge")
