"""Steps the test folders share."""


def replica_ids_summed(strategy):
    """What each replica gets from one traced step's all-reduce (SUM) of the replica
    ids: every replica's id counted once, on every replica (floats)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            return context.all_reduce("SUM", tf.cast(context.replica_id_in_sync_group, tf.float32))

        return strategy.run(replica)

    return [float(v) for v in strategy.experimental_local_results(step())]
