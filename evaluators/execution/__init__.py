"""Running untrusted programs: the bubblewrap sandbox (`sandbox`, `sandbox_env`, `supervise`),
one program's tests in one sandbox (`batch`), warm sandboxes reused program after program
(`pool`), the runner's result channel (`frames`), and the programs that run inside the sandbox,
kept as real Python files and shipped in as text (`sandboxed/`). Imports nothing else of
evaluators: it knows programs, limits and outputs, never a benchmark (tests/test_layers.py)."""
