"""``rstar2 view``: a local page over run folders (curves, rollouts with their prompts, RoC's
verdicts and log-probs, eval drill-down, step timelines), and a self-contained HTML export of
one run.

``runs`` reads the folders (through ``index``'s cached byte-offset index of each JSONL file,
and ``confined``'s opener, which refuses links, for every file),
``server`` answers the page's JSON requests, ``export`` writes the single-file page.
"""
