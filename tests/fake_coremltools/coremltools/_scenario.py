"""The scenario a test wrote (MLBENCH_FAKE_PLAN) and the log of what the child called."""

import json
import os


def scenario() -> dict:
    with open(os.environ["MLBENCH_FAKE_PLAN"], encoding="utf-8") as handle:
        return json.load(handle)


def log(event: str, **details) -> None:
    with open(os.environ["MLBENCH_FAKE_PLAN"] + ".log", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"event": event, **details}) + "\n")
