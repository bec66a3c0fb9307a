"""A switch that loses power or crashes: every one of its links goes down at once."""

TARGET = "switch"
