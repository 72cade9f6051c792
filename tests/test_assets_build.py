"""Atomic cache builds: one final folder, no leftovers, the same path for every racer."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nlhf import assets


def _temps(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.endswith(".tmp")]


def test_builds_once_and_writes_manifest(tmp_path):
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "weights.bin").write_bytes(b"w")

    target = tmp_path / "cache" / "model"
    assert assets.build_atomically(target, build, {"version": "1"}) == target
    assert assets.build_atomically(target, build) == target
    assert len(calls) == 1
    assert calls[0] != target and calls[0].parent == target.parent
    assert (target / "weights.bin").read_bytes() == b"w"
    manifest = json.loads((target / assets.MANIFEST).read_text())
    assert manifest["version"] == "1" and manifest["name"] == "model"
    assert _temps(target.parent) == []


def test_failed_build_leaves_nothing(tmp_path):
    def build(out: Path) -> None:
        (out / "half.bin").write_bytes(b"h")
        raise RuntimeError("converter crashed")

    target = tmp_path / "model"
    with pytest.raises(RuntimeError, match="converter crashed"):
        assets.build_atomically(target, build)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_unfinished_target_is_an_error(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "junk").write_text("x")
    with pytest.raises(assets.AssetError, match="not a finished nlhf build"):
        assets.build_atomically(target, lambda out: None)


def test_stale_temporary_folders_are_removed(tmp_path):
    target = tmp_path / "model"
    old, fresh = tmp_path / ".model.old.tmp", tmp_path / ".model.new.tmp"
    old.mkdir()
    fresh.mkdir()
    past = time.time() - 2 * assets.STALE_SECONDS
    os.utime(old, (past, past))
    assets.build_atomically(target, lambda out: None)
    assert not old.exists()
    assert fresh.exists()  # may belong to a build still running


def test_thread_race_one_folder_same_path(tmp_path):
    n = 4
    barrier = threading.Barrier(n, timeout=10)
    builders: list[int] = []
    results: list[Path] = []

    def build(out: Path) -> None:
        (out / "who").write_text(str(threading.get_ident()))
        builders.append(threading.get_ident())
        barrier.wait()  # every thread is mid-build: all of them will try to rename

    target = tmp_path / "model"

    def worker() -> None:
        results.append(assets.build_atomically(target, build))

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builders) == n
    assert results == [target] * n
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert int((target / "who").read_text()) in builders
    assert sorted(p.name for p in target.iterdir()) == sorted(["who", assets.MANIFEST])


RACER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from nlhf.assets import build_atomically

    target = Path(sys.argv[1])

    built = []

    def build(out):
        built.append(out)
        (out / "who").write_text(str(os.getpid()))
        deadline = time.time() + 20
        # wait until the other process is building too (or has already renamed its build),
        # so that both reach the rename
        while time.time() < deadline:
            if len(list(target.parent.glob(".model.*.tmp"))) >= 2 or target.exists():
                break
            time.sleep(0.01)
        else:
            sys.exit("the other racer never started building")

    print(build_atomically(target, build), len(built))
    """
)


def test_process_race_one_folder_same_path(tmp_path):
    target = tmp_path / "model"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(target)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    # both processes built a copy; the loser discarded its own and returned the winner's
    assert [out.split() for out, _ in outputs] == [[str(target), "1"]] * 2
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert int((target / "who").read_text()) in {p.pid for p in procs}


def test_policy_path_converts_once_with_injected_converter(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NLHF_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "pkg" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(assets, "gguf_path", lambda: gguf)
    monkeypatch.setattr(assets, "installed_version", lambda name: "0.1.2")
    seen = []

    def fake_convert(source: Path, out: Path) -> None:
        seen.append(source)
        (out / "model.safetensors").write_bytes(b"st")

    first = assets.policy_path(convert=fake_convert)
    second = assets.policy_path(convert=fake_convert)
    assert first == second == assets.policy_cache_path("0.1.2")
    assert seen == [gguf]
    assert (first / "model.safetensors").read_bytes() == b"st"
    manifest = json.loads((first / assets.MANIFEST).read_text())
    assert manifest["source"] == str(gguf) and manifest["version"] == "0.1.2"
    err = capsys.readouterr().err
    assert err.count("converting model.gguf") == 1


def test_policy_path_quiet(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NLHF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(assets, "gguf_path", lambda: tmp_path / "x.gguf")
    monkeypatch.setattr(assets, "installed_version", lambda name: "0.1.2")
    assets.policy_path(convert=lambda src, out: None, progress=False)
    assert capsys.readouterr().err == ""
