"""One thin entry point per workflow stage: `python -m pipeline.<stage> --config FILE`."""
