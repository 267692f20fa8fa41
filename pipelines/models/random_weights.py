"""torchvision models with random weights whose outputs still carry signal.

Placement and latency depend on the architecture, not the weight values, so sweeps use random
weights (`weights=None`). But torchvision initialises some classifier heads so that random outputs
are useless for checking an export: ViT's head is all zeros (every output is exactly 0) and
MobileNet's final layers use std 0.01 (outputs around 1e-9). A check against outputs that are
all ≈ 0 cannot tell a wrong export from a right one. This factory resets every Linear layer to
PyTorch's default initialisation, so outputs have a usable scale; mlbench seeds it as usual.
"""

from __future__ import annotations

from typing import Any

from torch import nn


def torchvision_model(name: str, **kwargs: Any) -> nn.Module:
    import torchvision

    model = torchvision.models.get_model(name, **kwargs)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.reset_parameters()
    return model
