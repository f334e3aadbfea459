"""The trainer's own stop condition, importable without torch (the command line catches it)."""


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. non-finite updates in a row, a run of another config)."""
