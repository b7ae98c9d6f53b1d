"""The catalogue's record types: one file (name, URL, SHA-256) and one entry (its files). ROS-free."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelFile:
    """One file of an entry: its cache file name, official URL and SHA-256 (lower-case hex)."""

    name: str
    url: str
    sha256: str


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A catalogue entry. ``edgetpu`` is what a config's ``model`` names; ``cpu`` its twin (the same name
    without ``_edgetpu``, which is where the pipeline looks for it by default); ``labels`` optional."""

    name: str
    task: str
    description: str
    edgetpu: ModelFile | None  # None: a template without a compiled model (the pattern tracker's)
    cpu: ModelFile
    labels: ModelFile | None = None
    sidecar: ModelFile | None = None  # a template's NAME_edgetpu.json (models/template_catalogue.py)

    @property
    def files(self) -> tuple[ModelFile, ...]:
        return tuple(f for f in (self.edgetpu, self.cpu, self.labels, self.sidecar) if f is not None)

    @property
    def is_template(self) -> bool:
        """A robotics/control template (compiled + twin + sidecar) or the embedding extractor."""
        return self.task in TEMPLATE_TASKS


TEMPLATE_TASKS = frozenset({"dense", "tracker", "pattern", "looming", "flow", "embed"})
