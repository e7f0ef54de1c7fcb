"""The smoke test: a table of TF1-style checks run through the shims (`compat-distribute smoke`).

Its public face is the command (`cli.py`); one module per concern; the table
and topology names import no TensorFlow.
"""
