"""The Snakemake workflow's Python: `plan`, the validated master config turned into stage configs,
paths and rule helpers (imported by the Snakefile), and `launch`, the command prefix that starts a
training job on the GPUs and nodes its rule is given, and `invocation`, what depends on how
Snakemake was started (a dry run, its interpreter, the MLflow store's URI and tags). The jobs themselves are the stage commands,
`python -m pipeline.<stage>`."""
