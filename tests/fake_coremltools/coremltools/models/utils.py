import os

from coremltools._scenario import log


def compile_model(model, destination_path=None):
    """Like coremltools: compile an .mlpackage into an .mlmodelc folder and return its path."""
    log("compile_model", model=str(model), destination=str(destination_path))
    os.makedirs(destination_path, exist_ok=True)
    return str(destination_path)
