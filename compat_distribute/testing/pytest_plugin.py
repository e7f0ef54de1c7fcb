"""pytest plugin of compat_distribute (options, fixtures, markers)."""
