"""The fetch stage."""
