"""`build-kernel nightly`: one night of a recipe, start to end, on a schedule.

upstream (branch -> commit, what is new since the last good night) -> series_choice (the newest series
version that applies, or the conflict with its first bad upstream commit) -> the lock's nightly pins ->
the pipeline's own stages (fetch, patch, build, verify, test, publish) -> one record per night (record),
kept in a state folder (state) under a lock that names its holder; retention for old nights' wheels,
a systemd timer or a cron line (timer), and the morning report (report). night.py runs them in order.
"""
