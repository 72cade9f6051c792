"""``nlhf judge``: commands about a judge itself, apart from any training.

    nlhf judge eval --judge vader --data imdb max_pairs=200     # check it on labelled pairs
    nlhf judge serve --judge runs/rm/model                      # share it over HTTP

Modules: ``evaluation`` (accuracy, calibration, position and length bias, agreement of two
judges: numpy, plus the loop that asks a judge about every pair), ``eval_report``
(metrics.json and report.md) and ``eval_cli`` (``nlhf judge eval``); ``server`` (a router and
its batching worker) and ``serve_cli`` (``nlhf judge serve``), served by nlhf.web.  The judges
themselves live in nlhf.models.judges.
"""
