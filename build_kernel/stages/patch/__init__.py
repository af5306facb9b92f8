"""The patch stage."""
