"""Cache folder resolution: $NLHF_CACHE, then $XDG_CACHE_HOME/nlhf, then ~/.cache/nlhf."""

from pathlib import Path

import pytest

from nlhf import assets


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.delenv("NLHF_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_default_is_home_cache(env, tmp_path):
    assert assets.cache_dir() == tmp_path / "home" / ".cache" / "nlhf"


def test_xdg_cache_home(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert assets.cache_dir() == tmp_path / "xdg" / "nlhf"


def test_nlhf_cache_wins_over_xdg(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("NLHF_CACHE", str(tmp_path / "own"))
    assert assets.cache_dir() == tmp_path / "own"


def test_nlhf_cache_expands_user_and_makes_absolute(env, tmp_path):
    env.setenv("NLHF_CACHE", "~/models")
    assert assets.cache_dir() == tmp_path / "home" / "models"
    env.chdir(tmp_path)
    env.setenv("NLHF_CACHE", "rel/cache")
    assert assets.cache_dir() == tmp_path / "rel" / "cache"
    assert assets.cache_dir().is_absolute()


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_variables_count_as_unset(env, tmp_path, value):
    env.setenv("NLHF_CACHE", value)
    env.setenv("XDG_CACHE_HOME", value)
    assert assets.cache_dir() == tmp_path / "home" / ".cache" / "nlhf"


def test_relative_xdg_is_ignored(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", "relative/cache")
    assert assets.cache_dir() == tmp_path / "home" / ".cache" / "nlhf"


def test_policy_cache_path_names_version_and_format(env, tmp_path):
    env.setenv("NLHF_CACHE", str(tmp_path / "c"))
    path = assets.policy_cache_path("9.9.9")
    assert path.parent == tmp_path / "c"
    assert path.name == f"smollm2-135m-instruct-9.9.9-f{assets.POLICY_FORMAT}"
    assert assets.policy_cache_path("1.0") != path


def test_tree_size_counts_nested_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"0" * 100)
    (tmp_path / "y.bin").write_bytes(b"0" * 23)
    assert assets.tree_size(tmp_path) == 123
    assert assets.tree_size(tmp_path / "y.bin") == 23
    assert isinstance(assets.cache_dir(), Path)
