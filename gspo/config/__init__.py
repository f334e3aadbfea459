"""Configuration: the typed, documented config dataclasses of every stage (train: SFT and RL;
data: the data stage) and what they are built from and loaded with (fields)."""
