"""The reservoir node: an echo state network on a state topic, predicting the next state (see node.py)."""
