"""The connected devices a test describes (the JSON file named by MLBENCH_FAKE_DEVICES), what has happened to them
across processes (`<file>.state`), and the log of every call (`<file>.log`). Imported by file path beside the real
coremltools as well as inside the fake package, so it imports nothing of coremltools."""

import json
import os


def scenario() -> dict:
    with open(os.environ["MLBENCH_FAKE_DEVICES"], encoding="utf-8") as handle:
        return json.load(handle)


def log(event: str, **details) -> None:
    with open(os.environ["MLBENCH_FAKE_DEVICES"] + ".log", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"event": event, **details}) + "\n")


def state() -> dict:
    try:
        with open(os.environ["MLBENCH_FAKE_DEVICES"] + ".state", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {"loads": {}, "gone": []}


def save(data: dict) -> None:
    path = os.environ["MLBENCH_FAKE_DEVICES"] + ".state"
    with open(path + ".partial", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(path + ".partial", path)


def device_settings(udid: str) -> dict:
    return scenario().get("behaviour", {}).get(udid, {})
