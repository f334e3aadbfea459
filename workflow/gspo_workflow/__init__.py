"""The Snakemake workflow's Python: `plan`, the validated master config turned into stage configs,
paths and rule helpers (imported by the Snakefile). The jobs themselves are the stage commands,
`python -m pipeline.<stage>`."""
