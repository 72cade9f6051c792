"""``MetricsLog``: metrics.jsonl, TensorBoard, and the optional trackers (a fake ``wandb`` and
``trackio`` stand in for the real packages, which are not dependencies)."""

import json
import sys
import types

import pytest

from nlhf.train.metrics_log import MetricsLog, TrackerMissingError
from nlhf.train.online import OnlineConfig


class FakeRun:
    def __init__(self, calls, **kwargs):
        self.calls = calls
        calls.append(("init", kwargs))

    def log(self, metrics, step):
        self.calls.append(("log", step, metrics))

    def finish(self):
        self.calls.append(("finish",))


@pytest.fixture
def fake_trackers(monkeypatch):
    calls = {"wandb": [], "trackio": []}
    for name in calls:
        module = types.ModuleType(name)
        module.__spec__ = types.SimpleNamespace(name=name)  # found by importlib.util.find_spec
        module.init = lambda _c=calls[name], **kw: FakeRun(_c, **kw)
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_trackers_get_every_step_and_resume_the_same_run(tmp_path, fake_trackers):
    log = MetricsLog(tmp_path, False, 0, ["wandb", "trackio"], "proj", {"lr": 0.1})
    for step in (1, 2, 3):
        log.write(step, {"loss": 1.0 / step})
    log.close()
    first = fake_trackers["wandb"][0][1]
    assert first["project"] == "proj" and first["config"] == {"lr": 0.1}
    assert first["resume"] == "allow"
    assert [c[1] for c in fake_trackers["wandb"] if c[0] == "log"] == [1, 2, 3]
    assert fake_trackers["trackio"][-1] == ("finish",)

    resumed = MetricsLog(tmp_path, False, 2, ["wandb"], "proj", {"lr": 0.1})  # from step 2
    resumed.write(3, {"loss": 0.3})
    resumed.close()
    inits = [c[1] for c in fake_trackers["wandb"] if c[0] == "init"]
    assert inits[0]["id"] == inits[1]["id"]  # the same tracker run continues
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert lines[-1]["loss"] == 0.3


def test_tensorboard_events_are_written(tmp_path):
    log = MetricsLog(tmp_path, True, 0)
    log.write(1, {"loss": 0.5})
    log.close()
    assert any((tmp_path / "tensorboard").iterdir())


def test_a_missing_tracker_names_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(TrackerMissingError, match="pip install wandb"):
        MetricsLog(tmp_path, False, 0, ["wandb"])
    assert not (tmp_path / "metrics.jsonl").exists()


def test_unknown_trackers_are_refused_by_the_config():
    with pytest.raises(ValueError, match=r"report_to: unknown \['mlflow'\]"):
        OnlineConfig(report_to=["mlflow"])
