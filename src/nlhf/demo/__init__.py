"""``nlhf demo``: RLHF against NLHF on the embedded SmolLM2, end to end and offline.

    nlhf demo                       # the full run (its time on 2 CPU cores: the README)
    nlhf demo --quick               # a few minutes: the same pipeline at toy sizes
    nlhf demo --all-methods         # adds Nash-MD self-play (β = 0) and Nash-EMA
    nlhf demo --out runs/demo-x     # resume an interrupted run (Ctrl-C is safe)

Stages (each one is skipped when a previous run in ``--out`` finished it):

1. ``judges``: a Bradley–Terry reward model and a pairwise preference model trained on
   IMDB human labels (a positive review preferred to a negative one), held-out accuracy;
2. ``policies``: from the same reference policy, each for its fixed number of steps, RLHF-PPO
   against the reward model and Nash-MD-PG (β = 0.125) against the preference model, both
   with LoRA (the adapter switched off is the reference);
3. ``tournament``: every policy and the reference sample completions for held-out prompts;
   VADER (which no method trained on) and the preference model compare every pair;
4. ``report.md``: judges, training curves, win-rate tables and heat map, samples, config.

Modules: :mod:`nlhf.demo.config` (the options and the two presets), :mod:`nlhf.demo.plan`
(the per-stage configs derived from them), :mod:`nlhf.demo.stages`, :mod:`nlhf.demo.report`
and :mod:`nlhf.demo.run` (the command), on :mod:`nlhf.resumable` and :mod:`nlhf.reporting`.
"""
