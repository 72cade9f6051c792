"""The tutorial notebook: committed as a full-size run, and it runs top to bottom in quick mode.

    .venv/bin/python -m pytest tests/test_notebook.py -q

The execution test starts a kernel from this interpreter's environment (ipykernel's
``python3`` spec, launched with ``sys.executable``), sets ``NLHF_NOTEBOOK_QUICK=1`` and
``NLHF_NOTEBOOK_OUT`` to a temporary folder, and checks what the notebook computed: the
judges' accuracies, the tabular Nash-MD curve against Theorem 1's bound, the training
metrics and the 3 × 3 tournament.  It runs on a tiny random-init GPT-2 and BERT built here
(``NLHF_NOTEBOOK_POLICY``, ``NLHF_NOTEBOOK_ENCODER``): what it checks is that every cell runs
and computes what it says, not what SmolLM2 learns (tests/test_assets_real.py loads the real
models).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "tutorial.ipynb"
CELL_TIMEOUT = 600  # seconds per cell; quick-mode cells take well under a minute


def test_committed_notebook_is_a_full_size_run():
    """The committed copy carries the outputs of one run at the default sizes, top to bottom,
    so that a reader on GitHub sees the numbers and the plots."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    counts = [cell.get("execution_count") for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"not one run top to bottom: {counts}"
    outputs = [o for cell in code for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert text.startswith("default sizes; outputs in runs/tutorial"), text[:80]
    assert "/work/" not in text and "/home/" not in text  # no machine's paths
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 7  # margins, PPO curves, 2 tabular plots, Nash-MD-PG, heat map, population


def test_notebook_images_exist():
    """Every image a markdown cell shows is in the repository."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    images = [part.split(")")[0] for part in text.split("](")[1:]]
    local = [i for i in images if not i.startswith("http")]
    assert local, "the notebook shows no diagrams"
    for name in local:
        assert (NOTEBOOK.parent / name).is_file(), name


@pytest.mark.slow
def test_notebook_runs_in_quick_mode(tmp_path, monkeypatch):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from eval_tiny import build_folders
    from tiny_encoder import make_tiny_encoder

    out = tmp_path / "out"
    words = "the a movie film good bad great awful review write".split()
    monkeypatch.setenv("NLHF_NOTEBOOK_POLICY", str(build_folders(tmp_path / "models")["base"]))
    encoder = make_tiny_encoder(tmp_path / "enc", words, positions=256)  # the judges' length
    monkeypatch.setenv("NLHF_NOTEBOOK_ENCODER", str(encoder))
    monkeypatch.setenv("NLHF_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("NLHF_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("MPLBACKEND", "Agg")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:  # start from a blank page whatever the committed copy holds
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:  # pragma: no cover - the message names the cell
        pytest.fail(f"a notebook cell raised:\n{exc}")

    # the kernel ran this environment's interpreter
    first = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert Path(first.strip()).resolve() == Path(sys.executable).resolve()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["quick"] is True

    for judge in ("reward_model", "preference_model"):
        acc = summary[judge]["accuracy"]
        low, high = summary[judge]["ci95"]
        assert 0.0 <= low <= acc <= high <= 1.0, (judge, acc, low, high)
    assert summary["reward_model"]["pairs"] >= 10

    tab = summary["tabular"]
    assert tab["nash_md_below_bound"] is True
    assert tab["final_kl"]["nash-md"] < tab["bound_final"]
    assert tab["final_kl"]["nash-md"] < 1e-3 * tab["nash_md_kl_start"]
    assert tab["final_kl"]["best-response"] > 1e-2  # the fixed opponent converges elsewhere

    for run, steps in (("ppo", "ppo_steps"), ("ppo-no-kl", "ppo_steps"), ("nash-md", "nash_steps")):
        lines = (out / run / "metrics.jsonl").read_text().splitlines()
        assert len(lines) == summary["sizes"][steps]
        assert (out / run / "policy").is_dir()
        for line in lines:
            assert all(math.isfinite(v) for v in json.loads(line).values() if isinstance(v, float))
    hacking = summary["reward_hacking"]
    assert set(hacking) == {"reference", "ppo", "ppo-no-kl"}
    assert all(0.0 <= h["distinct"] <= 1.0 and -1.0 <= h["vader"] <= 1.0 for h in hacking.values())

    tournament = json.loads((out / "tournament" / "tournament.json").read_text())
    assert [p["name"] for p in tournament["policies"]] == ["reference", "ppo", "nash-md"]
    assert set(tournament["judges"]) == {"vader", "preference model", "reward model"}
    for judge in tournament["judges"].values():
        matrix = judge["win_rate"]
        assert len(matrix) == 3 and all(len(row) == 3 for row in matrix)
        for a in range(3):
            assert matrix[a][a] == pytest.approx(0.5)
            for b in range(3):
                assert 0.0 <= matrix[a][b] <= 1.0
                assert matrix[a][b] + matrix[b][a] == pytest.approx(1.0, abs=1e-6)
    assert tournament["n_prompts"] == summary["sizes"]["tournament_prompts"]
    assert (out / "tournament" / "heatmap.png").stat().st_size > 1000

    population = summary["population"]  # the last chapter ran the experiment at tiny sizes
    assert population["policies"] == ["reference", "ppo", "nash-md", "ppo-exact",
                                      "nash-md-exact", "nash-md-time"]  # fmt: skip
    assert 0.0 <= population["nash_vs_ppo"] <= 1.0 and 0.0 <= population["predicted"] <= 1.0
    assert (out / "population" / "report.md").is_file()

    # the figures and tables were displayed
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 7  # margins, PPO curves, 2 tabular plots, Nash-MD-PG, heat map, population
    assert any("text/markdown" in o.get("data", {}) for o in outputs)
