"""Tournament policy specs: names, adapters and their base models, the reference."""

import json

import pytest

from nlhf.eval.entrants import parse_entrants


def adapter(folder, base):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    return folder


def test_adapters_models_reference_and_names(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    # A relative base path is looked up beside the adapter folder too.
    ad = adapter(tmp_path / "runs" / "nash" / "policy", "../../../base")
    model = tmp_path / "full"
    model.mkdir()
    entrants, ref = parse_entrants(["reference", f"nash={ad}", str(model)])
    assert [e.name for e in entrants] == ["reference", "nash", f"{tmp_path.name}/full"]
    assert [e.kind for e in entrants] == ["reference", "adapter", "model"]
    assert ref == str(ad / "../../../base")
    assert entrants[0].path == ref and entrants[1].base == ref
    assert entrants[1].spec == str(ad)


def test_reference_option_and_adapter_without_base(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    ad = adapter(tmp_path / "ad", "")
    entrants, ref = parse_entrants(["reference", str(ad)], reference=str(base))
    assert ref == str(base) and entrants[1].base == str(base)
    with pytest.raises(ValueError, match=r"policies\[1\].*names no base model"):
        parse_entrants([str(base), str(ad)])


def test_errors_name_the_policy(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    with pytest.raises(ValueError, match=r"policies\[0\] is 'reference' but no reference"):
        parse_entrants(["reference", str(model)])
    with pytest.raises(ValueError, match="used twice"):
        parse_entrants([f"x={model}", f"x={model}"])
    with pytest.raises(ValueError, match="at least 2"):
        parse_entrants([str(model)])
    with pytest.raises(ValueError, match=r"policies\[1\].*does not exist"):
        parse_entrants([str(model), str(tmp_path / "missing")])
