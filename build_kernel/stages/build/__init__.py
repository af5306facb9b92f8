"""The build stage."""
