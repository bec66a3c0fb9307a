"""A cut fibre or a dead optic: one cable goes dark, and the switches at both ends see it."""

TARGET = "link"
ORDER = 10  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("down",)  # the switches at both ends see the port go down; traffic moves off it
EFFECT = "down"
