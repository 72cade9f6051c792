"""``nlhf experiment population``: when does NLHF beat RLHF?  A population whose majority cycles.

    nlhf experiment population                  # the default run (its time: the README)
    nlhf experiment population --quick          # every stage at toy sizes, a few minutes
    nlhf experiment population --out runs/x     # resume an interrupted run (Ctrl-C is safe)

1. reference completions of the training prompts, labelled by the population (one annotator
   per pair); a Bradley–Terry reward model and a pairwise preference model on those labels;
2. the tabular prediction: the K × K game of the population's exact P on held-out prompts, its
   regularized Nash equilibrium against the RLHF policy of the same restricted game;
3. PPO (reward model), Nash-MD-PG (preference model) and their two exact-population controls,
   all with the same number of judged comparisons, and Nash-MD-PG once more for as many
   steps as fit in PPO's training time (the equal wall-clock comparison);
4. a tournament under the population and under each criterion alone; ``report.md``.

Modules: ``config`` (options, presets, the run folder), ``analysis`` (numpy: cycles,
restricted games, accuracies), ``exact_population`` (the population, its exact P and the
controls' judges), ``plan`` (the trainer configs), ``stages``, ``tuning``, ``report`` and
``run`` (the command), on :mod:`nlhf.resumable` and :mod:`nlhf.reporting`; ``theory`` says
why its null is what theory predicts.  ``nlhf experiment decoy`` and ``cycle`` (the decisive
experiment, a forced choice whose Borda and Condorcet winners part): ``choice``,
``choice_config``, ``choice_plan``, ``choice_stages``, ``choice_measure``, ``choice_report``,
``decoy`` and ``cycle``.
"""
