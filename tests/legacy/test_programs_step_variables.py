"""Public TF 2.2-2.3 programs whose step creates variables, their distribution code as written.

Each program below names its source (repository, path, commit) and keeps that
source's distribution lines; only the data (small and synthetic), the model's
size, the step counts and `compat_distribute.install()` at the top differ. Each
runs as the corpus runs (`conftest.run_legacy_script`): in its own process, on the
fake TPU. Each must train, show the fake's 8 replicas, end, and earn no warning
of the fake's; the trainer must also log one core's losses.
"""

import json
import re

import numpy as np
import pytest

COLAB_TPU = {"COLAB_TPU_ADDR": "127.0.0.1:8470"}  # a Colab TPU runtime, on loopback
TF_KERAS = {"TF_USE_LEGACY_KERAS": "1"}  # tf.keras is tf-keras, as in 2020
ONE_CORE = "v5litepod-1"
FALL_BACK = "traces this step once per replica"  # the fake's RuntimeWarning

TPU_GUIDE_CUSTOM_LOOP = '''\
"""The TPU guide's "Train a model using custom training loop", run with Keras 3.

Source: tensorflow/docs, site/en/guide/tpu.ipynb at commit
0080b9f6a9450e5b725515dc226b33f0b71adf02 (TF 2.3). The TPU set-up, the model,
optimizer and metrics made in `strategy.scope()`, the per-replica batch size,
`experimental_distribute_datasets_from_function`, `train_step` and the loop are
the guide's. The optimizer is `tf.keras.optimizers.Adam()`, not built: Keras 3
makes its slots in the first `apply_gradients`, inside `strategy.run`. Changed:
`install()`; synthetic 8x8 digits and 16-filter convolutions in place of MNIST
and 256; 3 epochs of 16 steps; Keras 3 names the metrics' `reset_states`
`reset_state`; the random seed is set, so the loss falls the same on every run.
Prints the replica count last.
"""

import compat_distribute

compat_distribute.install()

import os  # pylint: disable=g-import-not-at-top,wrong-import-position

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

tf.keras.utils.set_random_seed(0)

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu='grpc://' + os.environ['COLAB_TPU_ADDR'])
tf.config.experimental_connect_to_cluster(resolver)
# This is the TPU initialization code that has to be at the beginning.
tf.tpu.experimental.initialize_tpu_system(resolver)

strategy = tf.distribute.TPUStrategy(resolver)


def create_model():
  return tf.keras.Sequential(
      [tf.keras.layers.Conv2D(16, 3, activation='relu', input_shape=(8, 8, 1)),
       tf.keras.layers.Conv2D(16, 3, activation='relu'),
       tf.keras.layers.Flatten(),
       tf.keras.layers.Dense(32, activation='relu'),
       tf.keras.layers.Dense(16, activation='relu'),
       tf.keras.layers.Dense(10)])


def synthetic_digits(count=1024, seed=0):
  """Noise images with one bright pixel of ten, the class."""
  rng = np.random.RandomState(seed)
  labels = rng.randint(10, size=count)
  images = rng.uniform(0.0, 0.1, size=(count, 8, 8, 1)).astype(np.float32)
  images[np.arange(count), 1 + labels // 5 * 5, 1 + labels % 5, 0] = 1.0
  return images, labels.astype(np.int64)


def get_dataset(batch_size, is_training=True):
  dataset = tf.data.Dataset.from_tensor_slices(synthetic_digits())
  if is_training:
    dataset = dataset.shuffle(10000)
    dataset = dataset.repeat()

  dataset = dataset.batch(batch_size)

  return dataset


batch_size = 64
steps_per_epoch = 1024 // batch_size

# Create the model, optimizer and metrics inside strategy scope, so that the
# variables can be mirrored on each device.
with strategy.scope():
  model = create_model()
  optimizer = tf.keras.optimizers.Adam()
  training_loss = tf.keras.metrics.Mean('training_loss', dtype=tf.float32)
  training_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(
      'training_accuracy', dtype=tf.float32)

# Calculate per replica batch size, and distribute the datasets on each TPU
# worker.
per_replica_batch_size = batch_size // strategy.num_replicas_in_sync

train_dataset = strategy.experimental_distribute_datasets_from_function(
    lambda _: get_dataset(per_replica_batch_size, is_training=True))

@tf.function
def train_step(iterator):
  """The step function for one training step"""

  def step_fn(inputs):
    """The computation to run on each TPU device."""
    images, labels = inputs
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = tf.keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True)
      loss = tf.nn.compute_average_loss(loss, global_batch_size=batch_size)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
    training_loss.update_state(loss * strategy.num_replicas_in_sync)
    training_accuracy.update_state(labels, logits)

  strategy.run(step_fn, args=(next(iterator),))


train_iterator = iter(train_dataset)
for epoch in range(3):
  print('Epoch: {}/3'.format(epoch))

  for step in range(steps_per_epoch):
    train_step(train_iterator)
  print('Current step: {}, training loss: {}, accuracy: {}%'.format(
      optimizer.iterations.numpy(),
      round(float(training_loss.result()), 4),
      round(float(training_accuracy.result()) * 100, 2)))
  training_loss.reset_state()
  training_accuracy.reset_state()

print('replicas', strategy.num_replicas_in_sync, 'traced', train_step.experimental_get_tracing_count())
'''

HF_TRAINER_GRADIENT_ACCUMULATION = '''\
"""Hugging Face's TFTrainer of 2020 with gradient accumulation, on tf-keras.

Sources: huggingface/transformers, src/transformers/trainer_tf.py at commit
ad6030f14ea2d9417dd9c4473c349634a14fb448 (`training_step`, `apply_gradients`,
`distributed_training_steps`, `_compute_nb_instances`, `_get_step_inputs` and the
training loop's calls, as written), and src/transformers/optimization_tf.py at
commit 19048ed00c4a90c36e1e35e86a4780b5b3c89623 (`GradientAccumulator`, as
written): on the first step, inside `strategy.run` and a `tf.range` loop, the
accumulator creates its ON_READ / ONLY_FIRST_REPLICA variables. Changed:
`install()`; a Dense model of seeded weights on synthetic features in place of a
pretrained transformer (`run_model`); `args` a small namespace; the optimizer `create_optimizer` makes
with no warm-up or weight decay (tf.keras Adam on a PolynomialDecay); logs
printed as JSON. Runs under tf-keras (TF_USE_LEGACY_KERAS=1), TF 2.3's tf.keras.
"""

import compat_distribute

compat_distribute.install()

# pylint: disable=g-import-not-at-top,wrong-import-position
import json
import types

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute.values import PerReplica


class GradientAccumulator(object):
    def __init__(self):
        """Initializes the accumulator."""
        self._gradients = []
        self._accum_steps = None

    @property
    def step(self):
        """Number of accumulated steps."""
        if self._accum_steps is None:
            self._accum_steps = tf.Variable(
                tf.constant(0, dtype=tf.int64),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

        return self._accum_steps.value()

    @property
    def gradients(self):
        """The accumulated gradients on the current replica."""
        if not self._gradients:
            raise ValueError("The accumulator should be called first to initialize the gradients")
        return list(gradient.value() if gradient is not None else gradient for gradient in self._gradients)

    def __call__(self, gradients):
        """Accumulates `gradients` on the current replica."""
        if not self._gradients:
            _ = self.step  # Create the step variable.
            self._gradients.extend(
                [
                    tf.Variable(
                        tf.zeros_like(gradient),
                        trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                    )
                    if gradient is not None
                    else gradient
                    for gradient in gradients
                ]
            )
        if len(gradients) != len(self._gradients):
            raise ValueError(f"Expected {len(self._gradients)} gradients, but got {len(gradients)}")

        for accum_gradient, gradient in zip(self._gradients, gradients):
            if accum_gradient is not None and gradient is not None:
                accum_gradient.assign_add(gradient)

        self._accum_steps.assign_add(1)

    def reset(self):
        """Resets the accumulated gradients on the current replica."""
        if not self._gradients:
            return
        self._accum_steps.assign(0)
        for gradient in self._gradients:
            if gradient is not None:
                gradient.assign(tf.zeros_like(gradient))


class TFTrainer:
    def __init__(self, model, args, train_dataset, num_train_examples):
        self.model = model
        self.args = args
        self.train_dataset = train_dataset
        self.num_train_examples = num_train_examples
        self.gradient_accumulator = GradientAccumulator()
        self.total_train_batch_size = args.train_batch_size * args.gradient_accumulation_steps

    def get_train_tfdataset(self):
        ds = (
            self.train_dataset.repeat()
            .shuffle(self.num_train_examples, seed=self.args.seed)
            .batch(self.total_train_batch_size, drop_remainder=self.args.dataloader_drop_last)
            .prefetch(tf.data.experimental.AUTOTUNE)
        )

        return self.args.strategy.experimental_distribute_dataset(ds)

    def train(self):
        train_ds = self.get_train_tfdataset()
        self.gradient_accumulator.reset()

        with self.args.strategy.scope():
            lr_schedule = tf.keras.optimizers.schedules.PolynomialDecay(
                initial_learning_rate=self.args.learning_rate,
                decay_steps=self.args.max_steps,
                end_learning_rate=0.0,
            )
            self.optimizer = tf.keras.optimizers.Adam(learning_rate=lr_schedule)
            iterations = self.optimizer.iterations
            self.train_loss = tf.keras.metrics.Sum()

            for step, batch in enumerate(train_ds):
                self.distributed_training_steps(batch)

                self.global_step = iterations.numpy()
                training_loss = self.train_loss.result() / (step + 1)
                print(json.dumps({"loss": float(training_loss.numpy()), "step": int(self.global_step)}))

                if self.args.max_steps > 0 and self.global_step >= self.args.max_steps:
                    break

    def training_step(self, features, labels, nb_instances_in_global_batch):
        per_example_loss, _ = self.run_model(features, labels, True)
        scaled_loss = per_example_loss / tf.cast(nb_instances_in_global_batch, dtype=per_example_loss.dtype)
        gradients = tf.gradients(scaled_loss, self.model.trainable_variables)
        gradients = [
            g if g is not None else tf.zeros_like(v) for g, v in zip(gradients, self.model.trainable_variables)
        ]

        if self.args.gradient_accumulation_steps > 1:
            self.gradient_accumulator(gradients)

        self.train_loss.update_state(scaled_loss)

        if self.args.gradient_accumulation_steps == 1:
            return gradients

    def apply_gradients(self, features, labels, nb_instances_in_global_batch):
        if self.args.gradient_accumulation_steps == 1:
            gradients = self.training_step(features, labels, nb_instances_in_global_batch)

            self.optimizer.apply_gradients(list(zip(gradients, self.model.trainable_variables)))
        else:
            for _ in tf.range(self.args.gradient_accumulation_steps):
                reduced_features = {
                    k: ft[: self.args.train_batch_size // self.args.n_replicas] for k, ft in features.items()
                }
                reduced_labels = labels[: self.args.train_batch_size // self.args.n_replicas]

                self.training_step(reduced_features, reduced_labels, nb_instances_in_global_batch)

                features = {
                    k: tf.concat(
                        [ft[self.args.train_batch_size // self.args.n_replicas :], reduced_features[k]],
                        axis=0,
                    )
                    for k, ft in features.items()
                }

                labels = tf.concat(
                    [labels[self.args.train_batch_size // self.args.n_replicas :], reduced_labels], axis=0
                )

            gradients = self.gradient_accumulator.gradients
            gradients = [
                (tf.clip_by_value(grad, -self.args.max_grad_norm, self.args.max_grad_norm)) for grad in gradients
            ]

            self.optimizer.apply_gradients(list(zip(gradients, self.model.trainable_variables)))
            self.gradient_accumulator.reset()

    @tf.function
    def distributed_training_steps(self, batch):
        with self.args.strategy.scope():

            nb_instances_in_batch = self._compute_nb_instances(batch)
            inputs = self._get_step_inputs(batch, nb_instances_in_batch)

            self.args.strategy.run(self.apply_gradients, inputs)

    @staticmethod
    def _compute_nb_instances(batch):

        labels = batch[-1]
        if isinstance(labels, PerReplica):
            labels = tf.concat(labels.values, axis=0)

        nb_instances = tf.reduce_sum(tf.cast(labels != -100, dtype=tf.int32))

        return nb_instances

    @staticmethod
    def _get_step_inputs(batch, nb_instances):

        features, labels = batch

        if isinstance(labels, PerReplica):
            # need to make a `PerReplica` objects for ``nb_instances``
            nb_instances = PerReplica([nb_instances] * len(labels.values))

        step_inputs = (features, labels, nb_instances)

        return step_inputs

    def run_model(self, features, labels, training):
        logits = self.model(features["features"], training=training)
        loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return loss, logits


resolver = tf.distribute.cluster_resolver.TPUClusterResolver("grpc://127.0.0.1:8470")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.experimental.TPUStrategy(resolver)
tf.random.set_seed(42)  # transformers' set_seed(args.seed)

args = types.SimpleNamespace(
    strategy=strategy, n_replicas=strategy.num_replicas_in_sync, seed=42,
    # per_device_train_batch_size x n_replicas: 2 x 8 cores, 16 x 1
    train_batch_size=16, gradient_accumulation_steps=2,
    dataloader_drop_last=True, learning_rate=0.1, max_steps=24, max_grad_norm=1.0,
)
rng = np.random.RandomState(0)
points = rng.uniform(size=(256, 6)).astype(np.float32)
classes = points.reshape(256, 3, 2).sum(axis=2).argmax(axis=1).astype(np.int32)
with strategy.scope():
    # A pretrained model's weights are given: here, seeded.
    glorot = tf.keras.initializers.GlorotUniform
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(16, activation="relu", kernel_initializer=glorot(seed=1)),
        tf.keras.layers.Dense(3, kernel_initializer=glorot(seed=2)),
    ])
    model.build((None, 6))
TFTrainer(
    model, args, tf.data.Dataset.from_tensor_slices(({"features": points}, classes)), 256
).train()
print("replicas", strategy.num_replicas_in_sync)
'''


@pytest.fixture(name="run_program")
def run_program_fixture(run_legacy_script, tmp_path):
    def run(name, source, **kwargs):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        lines, stderr = run_legacy_script(str(path), with_stderr=True, **kwargs)
        assert FALL_BACK not in stderr, stderr[-3000:]
        return lines

    return run


def test_tpu_guide_custom_loop_builds_keras_3_adam_in_its_first_step(run_program):
    lines = run_program("tpu_guide_custom_loop", TPU_GUIDE_CUSTOM_LOOP, topology="v3-8", env=COLAB_TPU)
    assert [line for line in lines if line.startswith("Epoch")] == ["Epoch: 0/3", "Epoch: 1/3", "Epoch: 2/3"]
    logged = [
        re.fullmatch(r"Current step: (\d+), training loss: ([0-9.]+), accuracy: ([0-9.]+)%", line)
        for line in lines
    ]
    steps, losses, accuracies = zip(*[(int(m[1]), float(m[2]), float(m[3])) for m in logged if m])
    assert steps == (16, 32, 48)
    assert losses[0] > losses[1] > losses[2] and losses[2] < 0.8 * losses[0], losses
    assert accuracies[2] > accuracies[0], accuracies
    # The tf.function step was traced once, its slots made inside it.
    assert lines[-1] == "replicas 8 traced 1"


def _logs(lines):
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_hf_trainer_accumulates_gradients_in_variables_made_in_the_step(run_program):
    runs = {
        topology: run_program(
            "hf_trainer_gradient_accumulation", HF_TRAINER_GRADIENT_ACCUMULATION,
            topology=topology, env=TF_KERAS,
        )
        for topology in ("v3-8", ONE_CORE)
    }
    assert runs["v3-8"][-1] == "replicas 8"
    assert runs[ONE_CORE][-1] == "replicas 1"
    eight, one = _logs(runs["v3-8"]), _logs(runs[ONE_CORE])
    assert [log["step"] for log in eight] == [log["step"] for log in one] == list(range(1, 25))
    losses = [log["loss"] for log in eight]
    # 8 cores, each accumulating its share of the batch, log one core's losses.
    np.testing.assert_allclose(losses, [log["loss"] for log in one], rtol=1e-5)
    assert losses[-1] < 0.9 * losses[0], losses  # a running mean since the first step
