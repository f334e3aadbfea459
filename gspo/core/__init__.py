"""The algorithm's core: the objectives compared (GRPO, GSPO, GSPO-token and their
successors) as pure tensor functions, registered by name. Imports nothing of gspo."""
