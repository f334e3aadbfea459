"""engine: verl: the job verl's own trainer runs (job: the field mapping, refusals, Hydra
overrides, the job file) and the finished run collected (collect)."""
