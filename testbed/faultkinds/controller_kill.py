"""A controller crash: the SDN controller dies; the switches keep forwarding on their tables."""

TARGET = "controller"
