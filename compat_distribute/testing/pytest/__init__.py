"""The pytest plugin, one module a role (`hooks` is the plugin pytest loads).

Imported by absolute names only; nothing imports TensorFlow until a test needs it.
"""
