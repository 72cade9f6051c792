"""The ``nlhf`` command line: one sub-command per job, each driven by a dataclass config.

    nlhf --help                      # the sub-commands
    nlhf tabular --help              # every option of one, with its default
    nlhf tabular --config configs/tabular.yaml tau=0.05

A command lives in its own module, which defines a ``Config`` dataclass (fields written with
:func:`nlhf.config.option`) and ``run(config)``.  Only the module of the command being run
is imported, so ``nlhf --help`` stays fast and heavy libraries load only when needed.

A user error (``nlhf.errors``: bad data, a wrong path, option or port) ends the command with
one line, ``nlhf <command>: error: <message>``, and exit status 2; ``--debug`` (anywhere on
the line) or ``NLHF_DEBUG=1`` shows its traceback as well.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType

from nlhf import __version__
from nlhf.config import add_config_arguments, config_from_args
from nlhf.errors import USAGE_EXIT, one_line


@dataclass(frozen=True)
class Command:
    """A leaf command: ``module`` defines ``Config`` and ``run(config)``."""

    module: str
    help: str
    config: str = "Config"  # the class in ``module``: a preset of a trainer subclasses its Config

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def config_class(self, module: ModuleType) -> type:
        return getattr(module, self.config)


@dataclass(frozen=True)
class CommandGroup:
    """A command with sub-commands of its own (e.g. ``nlhf train <algorithm>``)."""

    help: str
    commands: dict[str, Command | CommandGroup] = field(default_factory=dict)


COMMANDS: dict[str, Command | CommandGroup] = {
    "demo": Command(
        "nlhf.demo.run",
        "The main job: RLHF-PPO against Nash-MD-PG on SmolLM2 with judges trained on IMDB "
        "labels, a tournament under VADER and the preference model, report.md.",
    ),
    "experiment": CommandGroup(
        "Experiments beyond the demo, each with resumable stages and a report.md.",
        {
            "population": Command(
                "nlhf.experiment.run",
                "When does NLHF beat RLHF? Annotators whose majority cycles label reference "
                "completions; both judges, the restricted-game prediction, PPO and Nash-MD-PG "
                "on one comparison budget (and exact-population controls), a tournament.",
            ),
            "decoy": Command(
                "nlhf.experiment.decoy",
                "The decisive experiment: a forced choice whose Borda pick (RLHF) and Condorcet "
                "winner (Nash) part as the decoy's share among the judges' pairs grows; exact "
                "predictions before training, prediction beside measurement per cell.",
            ),
            "cycle": Command(
                "nlhf.experiment.cycle",
                "The decoy experiment's negative control: voters whose majority cycles; theory "
                "predicts ½ head to head and a gap only in the worst-case win rate.",
            ),
        },
    ),
    "train": CommandGroup(
        "Train a judge or a policy (reward and preference models; Nash-MD-PG, DPO/IPO, SFT…).",
        {
            "reward-model": Command(
                "nlhf.train.reward_model",
                "Bradley–Terry reward model r(x, y) from preference pairs (HH, IMDB, JSONL/CSV).",
            ),
            "nash-md": Command(
                "nlhf.train.nash_md",
                "Nash-MD-PG: policy gradient against the geometric mixture π^(1−β)μ^β (NLHF).",
            ),
            "nash-ema": Command(
                "nlhf.train.nash_ema",
                "Nash-EMA: policy gradient against the moving average of the policy's weights.",
            ),
            "nash-mp": Command(
                "nlhf.train.nash_mp",
                "Nash Mirror Prox: a look-ahead step, then the update against it (Tiapkin+ 2025).",
            ),
            "ppo": Command(
                "nlhf.train.ppo",
                "RLHF-PPO: clipped PPO + value head against a scalar reward (reward model, "
                "VADER) with an adaptive KL penalty.",
            ),
            "sppo": Command(
                "nlhf.train.sppo",
                "SPPO: K samples, leave-one-out win rates from pairwise judgements, square loss "
                "towards η(P̂ − ½) against the policy of the step.",
            ),
            "inpo": Command(
                "nlhf.train.inpo",
                "INPO: a knockout tournament of K samples, IPO's loss against the mixture "
                "π_ref^{τ/η}·π_t^{1−τ/η}.",
            ),
            "onpo": Command(
                "nlhf.train.inpo",
                "ONPO: INPO with optimism, each step's gradient taken after a predictor step "
                "along the last one (optimistic mirror descent).",
                config="OnpoConfig",
            ),
            "mpo": Command(
                "nlhf.train.nash_md",
                "MPO: magnetic mirror descent against the policy itself, the magnet (reference) "
                "reset to the current policy every N steps.",
                config="MpoConfig",
            ),
            "dno": Command(
                "nlhf.train.dno",
                "DNO: DPO against the policy of the step on large-margin pairs by win rate, "
                "with replay of earlier pairs.",
            ),
            "online-dpo": Command(
                "nlhf.train.online_dpo",
                "Online DPO / IPO (loss_type=ipo): two samples per prompt, the judge picks.",
            ),
            "online-ipo": Command(
                "nlhf.train.online_dpo",
                "Online IPO: two samples per prompt, IPO's square loss towards (P − ½)/β with "
                "the judge's P as a soft target.",
                config="OnlineIpoConfig",
            ),
            "egpo": Command(
                "nlhf.train.online_dpo",
                "EGPO: online IPO with the extragradient outer loop (a look-ahead step, then "
                "the step from the same weights with its gradient).",
                config="EgpoConfig",
            ),
            "dpo": Command(
                "nlhf.train.dpo", "Offline DPO on preference pairs (HH, IMDB, JSONL/CSV)."
            ),
            "ipo": Command(
                "nlhf.train.ipo", "Offline IPO: regress each pair's log-ratio margin to 1/(2β)."
            ),
            "sft": Command(
                "nlhf.train.sft",
                "Supervised fine-tuning on demonstrations (prompt/response or chosen replies).",
            ),
            "preference-model": Command(
                "nlhf.train.preference_model",
                "Pairwise preference model P(y ≻ y′ | x), antisymmetric, cycles allowed.",
            ),
        },
    ),
    "assets": Command(
        "nlhf.assets_cli",
        "Embedded defaults (SmolLM2 policy, MiniLM encoder, VADER, movie reviews): what is "
        "installed and cached, sizes, pip commands; --convert builds the policy cache now.",
    ),
    "eval": Command(
        "nlhf.eval.cli",
        "Tournament among policies: k × k win rates P(row ≻ column) with 95% intervals, "
        "KL to the reference, judge scores, where two judges disagree; markdown + heat map.",
    ),
    "judge": CommandGroup(
        "Judges on their own: check one on labelled pairs before optimizing against it, or "
        "serve one over HTTP to several trainers.",
        {
            "eval": Command(
                "nlhf.judge.eval_cli",
                "Check a judge on preference pairs (HH, IMDB, JSONL/CSV): accuracy with 95% "
                "interval, log loss, calibration, position and length bias, agreement of two.",
            ),
            "serve": Command(
                "nlhf.judge.serve_cli",
                "Serve a judge over HTTP (--judge http://HOST:PORT elsewhere), batching "
                "concurrent requests; token required beyond loopback.",
            ),
        },
    ),
    "label": CommandGroup(
        "Human feedback: a pairwise labeling web app and its preference-dataset export.",
        {
            "serve": Command(
                "nlhf.label.serve_cli",
                "Run the labeling web app (loopback by default; tokens when bound beyond).",
            ),
            "add": Command(
                "nlhf.label.add_cli", "Add comparison tasks from a file or sampled from policies."
            ),
            "export": Command(
                "nlhf.label.export_cli", "Export labels as preference pairs (JSONL)."
            ),
            "tokens": Command(
                "nlhf.label.tokens_cli", "List, create and revoke labeler and admin tokens."
            ),
            "keys": Command(
                "nlhf.label.keys_cli",
                "Show or rotate the key that signs session cookies (--rotate: all sign out).",
            ),
        },
    ),
    "control": CommandGroup(
        "Preference-based control in gymnasium games (pip install 'nlhf[control]'): RLHF and "
        "NLHF routes from segment labels, their evaluation and a CartPole demo.",
        {
            "train": CommandGroup(
                "Train a policy from segment labels (oracle, B-Pref teachers, a population or "
                "people) by one of the two routes.",
                {
                    "rlhf": Command(
                        "nlhf.control.train_cli",
                        "RLHF: a Bradley–Terry reward model of segments, PPO on its r̂.",
                        config="RLHFConfig",
                    ),
                    "nlhf": Command(
                        "nlhf.control.train_cli",
                        "NLHF: a preference model of segments, Nash-MD-PG against it.",
                        config="NLHFConfig",
                    ),
                },
            ),
            "eval": Command(
                "nlhf.control.eval_cli",
                "True return of each policy folder with a 95% interval, and head-to-head win "
                "rates under a labeler from paired continuations.",
            ),
            "demo": Command(
                "nlhf.control.demo",
                "RLHF and NLHF side by side from one label budget on CartPole, the true-reward "
                "PPO curve as reference: report.md, a plot and GIF clips.",
            ),
        },
    ),
    "tabular": Command(
        "nlhf.tabular.cli",
        "Tabular NLHF lab: exact Nash equilibria, Nash-MD and other dynamics vs RLHF on "
        "matrix preference games; writes a report and plots.",
    ),
}


def _build(
    parser: argparse.ArgumentParser,
    commands: dict[str, Command | CommandGroup],
    path: list[str],
    depth: int = 0,
) -> None:
    sub = parser.add_subparsers(dest=f"command_{depth}", metavar="COMMAND", required=True)
    for name, cmd in commands.items():
        text = cmd.help.replace("%", "%%")  # argparse formats help strings with %
        child = sub.add_parser(name, help=text, description=text)
        selected = len(path) > depth and path[depth] == name
        if isinstance(cmd, CommandGroup):
            _build(child, cmd.commands, path if selected else [], depth + 1)
        elif selected:
            module = cmd.load()
            config_class = cmd.config_class(module)
            doc = (config_class.__doc__ or "").strip()
            if doc:
                child.description = doc
                child.formatter_class = argparse.RawDescriptionHelpFormatter
            add_config_arguments(child, config_class)
            child.set_defaults(_command=cmd)


def _selected_path(argv: list[str]) -> list[str]:
    path, level = [], COMMANDS
    for token in argv:
        if token.startswith("-"):
            continue
        cmd = level.get(token)
        if cmd is None:
            break
        path.append(token)
        if not isinstance(cmd, CommandGroup):
            break
        level = cmd.commands
    return path


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nlhf",
        description="Align language models with pairwise human preferences: RLHF "
        "(reward model + PPO) and NLHF (preference model + Nash-MD), and measure which wins.",
    )
    parser.add_argument("--version", action="version", version=f"nlhf {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of a user error too (also NLHF_DEBUG=1); may come anywhere",
    )
    _build(parser, COMMANDS, _selected_path(argv or []))
    return parser


def _is_override(token: str) -> bool:
    key, sep, _ = token.partition("=")
    return bool(sep) and key.isidentifier()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # `nlhf` alone: the command list
        build_parser().print_help()
        return 0
    debug = "--debug" in argv or os.environ.get("NLHF_DEBUG", "") not in ("", "0")
    argv = [token for token in argv if token != "--debug"]
    parser = build_parser(argv)
    # key=value overrides may come anywhere, also after later flags (argparse hands such a
    # second group back as unrecognized)
    args, extra = parser.parse_known_args(argv)
    unknown = [token for token in extra if not _is_override(token)]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra and hasattr(args, "overrides"):
        args.overrides = [*(args.overrides or []), *extra]
    command: Command = args._command
    name = " ".join(["nlhf", *_selected_path(argv)])
    module = command.load()
    try:
        config = config_from_args(command.config_class(module), args)
        return int(module.run(config) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`… | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        message = one_line(exc)
        if message is None or debug:
            raise
        if os.environ.get("RANK", "0") == "0":  # several processes: the first one speaks
            print(f"{name}: error: {message}", file=sys.stderr)
        return USAGE_EXIT


if __name__ == "__main__":
    sys.exit(main())
