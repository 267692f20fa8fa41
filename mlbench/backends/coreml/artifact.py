"""What a Core ML export hands to measurement: the saved package and its static analysis.

Its own module so that the backend (which makes it) and the macOS runtime (which reads it) both
import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from mlbench.backends.apple.analysis import ProgramAnalysis


@dataclass
class CoremlArtifact:
    package: Path
    analysis: ProgramAnalysis
