"""Fixtures shared by the cluster tests."""

import tempfile

import pytest


@pytest.fixture(name="temp_dir")
def temp_dir_fixture(tmp_path, monkeypatch):
    """A temp dir of the test's own, so that it can be checked to be empty."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory
