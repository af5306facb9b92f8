"""The verify stage."""
