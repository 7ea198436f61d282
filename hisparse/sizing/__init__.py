"""Sizing: what HiSparse gives a serving engineer's model, GPU budget, host RAM and traffic.

``plan`` answers from geometry and budgets alone (instant); ``replay`` runs a Mooncake
replay at production geometry on the accounting executor, side by side with the same
budget and HiSparse disabled (``baseline``); ``table`` prints and plots the two.
"""
