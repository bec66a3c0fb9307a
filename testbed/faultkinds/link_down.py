"""A cut fibre or a dead optic: one cable goes dark, and the switches at both ends see it."""

TARGET = "link"
