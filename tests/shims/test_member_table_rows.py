"""A new V1 member is one row of `_members.TABLE`, with nothing else touched."""


# A new V1 member is one row of TABLE: added before the shims are imported (as
# an edit of _members.py would be), it is on both shims, the fake TPU and the
# migration table, with nothing else touched.
_NEW_ROW = """
    import warnings
    from compat_distribute import _members
    _members.TABLE += (_members.Member("experimental_run_v9", _members.RENAMED,
                                       new="run", version="9.9"),)
    import compat_distribute as cd
    from compat_distribute.testing import FakeTPUClusterResolver
    strategies = {"TPU": cd.TPUStrategy(FakeTPUClusterResolver("v3-8")),
                  "MWMS": cd.MultiWorkerMirroredStrategy()}
    for shim, strategy in strategies.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert strategy.experimental_run_v9 == strategy.run
        print(shim, type(strategy).__name__, caught[0].category.__name__, caught[0].message)
    print("TPU shim class:", type(vars(cd.TPUStrategy)["experimental_run_v9"]).__name__)
    print([l for l in _members.migration_table().splitlines() if "_v9" in l][0])
"""


def test_a_new_v1_member_is_one_row_of_the_table(run_python):
    result = run_python(_NEW_ROW)
    assert result.returncode == 0, result.stderr[-3000:]
    message = "experimental_run_v9 is deprecated; use run (renamed in TensorFlow 9.9)"
    assert result.stdout.splitlines()[-4:] == [
        f"TPU FakeTPUStrategy DeprecationWarning {message}",
        f"MWMS MultiWorkerMirroredStrategy DeprecationWarning {message}",
        "TPU shim class: _Renamed",
        "| `strategy.experimental_run_v9` | TPU and MultiWorkerMirrored | renamed in TF 9.9 "
        "(warns) | use `run` |",
    ]
