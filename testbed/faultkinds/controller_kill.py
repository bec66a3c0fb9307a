"""A controller crash: the SDN controller dies; the switches keep forwarding on their tables."""

TARGET = "controller"
ORDER = 110  # where it lists among the kinds, and draws in a schedule
EVIDENCE = ("down",)  # the controller stops answering; the switches keep forwarding
