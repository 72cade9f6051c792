"""The real embedded packages, when installed (``make assets``): files found, models load.

The GGUF → safetensors conversion of SmolLM2 takes 15–30 s and is marked slow.
"""

import time

import pytest

from nlhf import assets


def needs(asset: assets.Asset):
    return pytest.mark.skipif(
        assets.installed_version(asset.package) is None,
        reason=f"{asset.package} is not installed (`make assets` installs it: {asset.install})",
    )


@needs(assets.ENCODER)
def test_encoder_gets_a_fresh_scalar_head():
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = assets.encoder_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    assert model.config.model_type == "bert" and model.config.num_hidden_layers == 6
    assert 22e6 < model.bert.num_parameters() < 23.5e6
    batch = tokenizer(["a fine film", "a dull film, sadly"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).logits.shape == (2, 1)


@needs(assets.VADER)
def test_vader_scores_sentiment():
    scores = assets.vader()
    assert scores("A wonderful, moving film.")["compound"] > 0.5
    assert scores("A dreadful, boring mess.")["compound"] < -0.5


@needs(assets.REVIEWS)
def test_reviews_csv_is_found():
    path = assets.reviews_path()
    with path.open(encoding="utf-8") as f:
        assert f.readline().strip() == "text,label,source"
    assert assets.tree_size(path) > 10_000_000


def test_status_of_installed_packages_has_versions_and_sizes():
    for record in assets.asset_status():
        if record.version is not None and record.ready:
            assert record.path is not None and record.size_bytes and record.size_bytes > 0


@pytest.mark.slow
@needs(assets.POLICY)
@pytest.mark.skipif(
    assets.installed_version("gguf") is None,
    reason="gguf is not installed (`make assets` installs it)",
)
def test_policy_conversion_loads_fast_and_chats(tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("NLHF_CACHE", str(tmp_path))
    folder = assets.policy_path()
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        assets.MANIFEST,
    } <= names
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no temporary leftovers

    AutoModelForCausalLM.from_pretrained(folder)  # warm the lazy imports of the Llama code
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert time.perf_counter() - start < 5.0  # about 0.3 s on 2 cores
    assert model.dtype == torch.float32
    assert "quantization_config" not in model.config.to_dict()
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == 8192

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in reply


@pytest.mark.slow  # two judges on the embedded MiniLM from 200 pairs: about a minute
@needs(assets.ENCODER)
@needs(assets.REVIEWS)
def test_the_quick_demos_judges_learn_imdb_preferences_on_the_embedded_encoder(tmp_path):
    """What the quick demo's own test, on tiny random models, cannot check: on the real
    encoder and IMDB pairs both judges beat chance on held-out pairs."""
    from nlhf.demo.config import Config
    from nlhf.demo.plan import imdb_judge_configs
    from nlhf.lm_stages import train_judges
    from nlhf.resumable import RunFolder, resolved

    config = resolved(Config(quick=True, out=str(tmp_path), progress=False, judge_pairs=200))
    accuracy = train_judges(imdb_judge_configs(config, RunFolder(tmp_path)))["held_out_accuracy"]
    assert accuracy["reward-model"] > 0.6 and accuracy["preference-model"] > 0.6, accuracy
