"""A TF 2.1 Keras notebook for GPU, TPU and TPU pod: `model.fit` with a validation set of files.

Source: GoogleCloudPlatform/training-data-analyst,
courses/fast-and-lean-data-science/keras_flowers_gputputpupod_tf2.1.ipynb at commit
46825f014ee4035fe62c31eb6f9ea70b65249a79 (Martin Gorner's flowers notebook, "TPU pod v2-32 (32
cores): 2s per epoch"). Its distribution code is the notebook's, line for line: the "Detect
hardware" cell, the configuration cell's batch sizes and learning-rate schedule by replica
count (a pod takes the `else` branch: 16 images a core, validation batches of 256), and the
TFRecord cell (files split into training and validation; training files repeated and
shuffled, the validation files read once, DATA auto-sharded since a pod has more hosts than
validation files). `install()` is added at the top. Changed: the flowers are small synthetic
JPEGs (32x32 instead of 331x331) written to TFRecord files named as the notebook's
(`flowers00-192.tfrec`: the count is in the name) in a temporary directory instead of
gs://flowers-public, encoded on this machine rather than on the TPU host; squeezenet is a
one-convolution model with SGD, its initial weights seeded; 4 epochs instead of 60; `fit` is given
no `validation_steps`, so each validation pass reads its files to their end.
Prints the notebook's lines, then one "epoch N loss X val_loss Y val_accuracy Z" line an epoch.
"""

import compat_distribute

compat_distribute.install()

import os  # pylint: disable=g-import-not-at-top,wrong-import-position
import re  # pylint: disable=g-import-not-at-top,wrong-import-position
import tempfile  # pylint: disable=g-import-not-at-top,wrong-import-position

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

# Detect hardware, return appropriate distribution strategy
try:
    tpu = tf.distribute.cluster_resolver.TPUClusterResolver()  # TPU detection
    print('Running on TPU ', tpu.cluster_spec().as_dict()['worker'])
except ValueError:
    tpu = None

if tpu:
    tf.config.experimental_connect_to_cluster(tpu)
    tf.tpu.experimental.initialize_tpu_system(tpu)
    strategy = tf.distribute.experimental.TPUStrategy(tpu)
else:
    strategy = tf.distribute.get_strategy()

print("REPLICAS: ", strategy.num_replicas_in_sync)

EPOCHS = 4

if strategy.num_replicas_in_sync == 1: # GPU
    BATCH_SIZE = 16
    VALIDATION_BATCH_SIZE = 16
    start_lr = 0.01
    max_lr = 0.01
    min_lr = 0.01
    rampup_epochs = 0
    sustain_epochs = 0
    exp_decay = 1

elif strategy.num_replicas_in_sync == 8: # single TPU
    BATCH_SIZE = 32 * strategy.num_replicas_in_sync
    VALIDATION_BATCH_SIZE = 256
    start_lr = 0.01
    max_lr = 0.01 * strategy.num_replicas_in_sync
    min_lr = 0.001
    rampup_epochs = 0
    sustain_epochs = 13
    exp_decay = .95

else: # TPU pod
    BATCH_SIZE = 16 * strategy.num_replicas_in_sync  # Gobal batch size.
    VALIDATION_BATCH_SIZE = 256
    start_lr = 0.06
    max_lr = 0.012 * strategy.num_replicas_in_sync
    min_lr = 0.01
    rampup_epochs = 5
    sustain_epochs = 8
    exp_decay = 0.95

CLASSES = ['daisy', 'dandelion', 'roses', 'sunflowers', 'tulips'] # do not change, maps to the labels in the data (folder names)

IMAGE_SIZE = [32, 32]
_LOCAL_DATA = tempfile.TemporaryDirectory()  # removed at exit
GCS_PATTERN = os.path.join(_LOCAL_DATA.name, '*.tfrec')
VALIDATION_SPLIT = 0.19

# Learning rate schedule
def lrfn(epoch):
    def lr(epoch, start_lr, min_lr, max_lr, rampup_epochs, sustain_epochs, exp_decay):
        if epoch < rampup_epochs:
            lr = (max_lr - start_lr)/rampup_epochs * epoch + start_lr
        elif epoch < rampup_epochs + sustain_epochs:
            lr = max_lr
        else:
            lr = (max_lr - min_lr) * exp_decay**(epoch-rampup_epochs-sustain_epochs) + min_lr
        return lr
    return lr(epoch, start_lr, min_lr, max_lr, rampup_epochs, sustain_epochs, exp_decay)

lr_callback = tf.keras.callbacks.LearningRateScheduler(lambda epoch: lrfn(epoch), verbose=False)


# Synthetic flowers: each class a colour, plus noise.
COLOURS = np.array([(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (200, 30, 200)])


def write_flowers(pattern, files=20, per_file=192):
    """The notebook's data, synthetic: JPEGs of each class's colour, in TFRecord files."""
    rng = np.random.RandomState(0)
    for f in range(files):
        path = pattern.replace('*', 'flowers%02d-%d' % (f, per_file))
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(per_file):
                label = rng.randint(len(CLASSES))
                pixels = COLOURS[label] + rng.randint(-25, 26, [*IMAGE_SIZE, 3])
                jpeg = tf.io.encode_jpeg(tf.constant(pixels.clip(0, 255), tf.uint8)).numpy()
                one_hot = np.eye(len(CLASSES), dtype=np.float32)[label]
                feature = {
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                    "class": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    "one_hot_class": tf.train.Feature(float_list=tf.train.FloatList(value=one_hot)),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


with tf.device('/job:localhost/device:CPU:0'):  # on this machine, not on the TPU host
    write_flowers(GCS_PATTERN)

AUTOTUNE = tf.data.experimental.AUTOTUNE

def count_data_items(filenames):
    # trick: the number of data items is written in the name of
    # the .tfrec files a flowers00-230.tfrec = 230 data items
    n = [int(re.compile(r"-([0-9]*)\.").search(filename).group(1)) for filename in filenames]
    return np.sum(n)

def data_augment(image, one_hot_class):
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_saturation(image, 0, 2)
    return image, one_hot_class

def read_tfrecord(example):
    features = {
        "image": tf.io.FixedLenFeature([], tf.string), # tf.string means bytestring
        "class": tf.io.FixedLenFeature([], tf.int64),  # shape [] means scalar
        "one_hot_class": tf.io.VarLenFeature(tf.float32),
    }
    example = tf.io.parse_single_example(example, features)
    image = tf.image.decode_jpeg(example['image'], channels=3)
    image = tf.cast(image, tf.float32) / 255.0  # convert image to floats in [0, 1] range
    image = tf.reshape(image, [*IMAGE_SIZE, 3]) # force the image size so that the shape of the tensor is known to Tensorflow
    class_label = tf.cast(example['class'], tf.int32)
    one_hot_class = tf.sparse.to_dense(example['one_hot_class'])
    one_hot_class = tf.reshape(one_hot_class, [5])
    return image, one_hot_class

def load_dataset(filenames):
    # read from TFRecords. For optimal performance, use TFRecordDataset with
    # num_parallel_calls=AUTOTUNE to read from multiple TFRecord files at once
    # band set the option experimental_deterministic = False
    # to allow order-altering optimizations.

    opt = tf.data.Options()
    opt.experimental_deterministic = False

    dataset = tf.data.Dataset.from_tensor_slices(filenames).with_options(opt)
    dataset = tf.data.TFRecordDataset(filenames, num_parallel_reads=16) # can be AUTOTUNE in TF 2.1
    dataset = dataset.map(read_tfrecord, num_parallel_calls=AUTOTUNE)
    return dataset

def batch_dataset(filenames, batch_size, train):
    dataset = load_dataset(filenames)
    n = count_data_items(filenames)

    if train:
        dataset = dataset.repeat() # training dataset must repeat
        dataset = dataset.map(data_augment, num_parallel_calls=AUTOTUNE)
        dataset = dataset.shuffle(2048)
    else:
        # usually fewer validation files than workers so disable FILE auto-sharding on validation
        if strategy.num_replicas_in_sync > 1: # option not useful if there is no sharding (not harmful either)
            opt = tf.data.Options()
            opt.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
            dataset = dataset.with_options(opt)
        # validation dataset does not need to repeat
        # also no need to shuffle or apply data augmentation
    dataset = dataset.batch(batch_size)
    dataset = dataset.prefetch(AUTOTUNE) # prefetch next batch while training (autotune prefetch buffer size)
    return dataset, n//batch_size

def get_training_dataset(filenames):
    dataset, steps = batch_dataset(filenames, BATCH_SIZE, train=True)
    return dataset, steps

def get_validation_dataset(filenames):
    dataset, steps = batch_dataset(filenames, VALIDATION_BATCH_SIZE, train=False)
    return dataset, steps

# instantiate datasets
filenames = tf.io.gfile.glob(GCS_PATTERN)
split = len(filenames) - int(len(filenames) * VALIDATION_SPLIT)
train_filenames = filenames[:split]
valid_filenames = filenames[split:]

training_dataset, steps_per_epoch = get_training_dataset(train_filenames)
validation_dataset, validation_steps = get_validation_dataset(valid_filenames)

print("TRAINING   IMAGES: ", count_data_items(train_filenames), ", STEPS PER EPOCH: ", steps_per_epoch)
print("VALIDATION IMAGES: ", count_data_items(valid_filenames), ", STEPS PER EPOCH: ", validation_steps)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input([*IMAGE_SIZE, 3]),
        tf.keras.layers.Conv2D(8, 3, activation='relu', kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(len(CLASSES), activation='softmax', kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2)),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(), loss='categorical_crossentropy', metrics=['accuracy'])

history = model.fit(training_dataset, steps_per_epoch=steps_per_epoch, epochs=EPOCHS,
                    validation_data=validation_dataset, callbacks=[lr_callback], verbose=0)

for epoch, (loss, val_loss, val_accuracy) in enumerate(zip(
        history.history['loss'], history.history['val_loss'], history.history['val_accuracy'])):
    print("epoch %d loss %.6f val_loss %.6f val_accuracy %.6f" % (epoch + 1, loss, val_loss, val_accuracy))
