"""The Markdown reports: a run's (`run_report`, laid out to fit a pull-request comment by `layout`), a generative
model's table (`generation`), `mlbench compare`'s (`compare`) and `mlbench plan`'s (`plan`)."""
