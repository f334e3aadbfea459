"""The other trainers' adapters, each a module group of its own: TRL (trl/) and verl (verl/)."""
