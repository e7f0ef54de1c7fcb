"""Check a replica step for what a TPU cannot compile, on an ordinary CPU.

A TPU compiles every replica step with XLA. A step that runs on a
MirroredStrategy can still fail on a TPU, and only once the TPU is booked: an
op XLA has no kernel for, or a dtype the TPU lacks. `check_tpu_compatible`
finds these on the CPU, without running the step.

1. Trace (`check`). The step is traced into a `FuncGraph`, never run. With no
   strategy (and none in scope) `fn` is traced alone under the default
   strategy; with one, `strategy.run(fn, args, kwargs)` is traced inside a
   `tf.function`, so `all_reduce` / `all_gather` / `merge_call` build that
   strategy's real cross-replica ops. Tensor arguments become
   `tf.TensorSpec`s, so no value is constant-folded into the graph.
2. Walk (`walker`). Every op, in the graph and every function it calls, is
   tested against the table in `rules` (XLA's kernel table in `kernels`, the
   TPU's dtypes, hazards that compile but cost); `source` finds the user's
   line that made it.
3. Compile (`compiling`). The replica computation is compiled to HLO with
   XLA for the CPU; TF's own error text is attached to what the walk found.
4. Report (`report`, `errors`). A `TPUCompatibilityReport` of problems and
   warnings; strict mode (`ensure_tpu_compatible`) raises
   `TPUCompatibilityError`, a `tf.errors.InvalidArgumentError` as a TPU's
   compile failure is, and warns once (`TPUPerformanceWarning`) for hazards.

Each public name is imported from its module on first use; `rules` and
`report` import no TensorFlow.
"""

from compat_distribute import _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    {
        "compat_distribute.testing.xla_check.check": (
            "check_graph",
            "check_tpu_compatible",
            "ensure_graph_compatible",
            "ensure_tpu_compatible",
        ),
        "compat_distribute.testing.xla_check.errors": ("TPUCompatibilityError", "TPUPerformanceWarning"),
        "compat_distribute.testing.xla_check.report": ("TPUCompatibilityReport", "TPUProblem"),
    },
)
