"""A switch that loses power or crashes: every one of its links goes down at once."""

TARGET = "switch"
ORDER = 70  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("down",)  # every port of the switch goes down
EFFECT = "down"
