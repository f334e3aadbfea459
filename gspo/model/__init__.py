"""The model: presets and loading, tokenization, Mixture-of-Experts routing hooks and
measurements, compute accounting."""
