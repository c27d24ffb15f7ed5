"""A trained-on-device build: the bundle a device trains and predicts from (docs/spec.md section 7)."""
