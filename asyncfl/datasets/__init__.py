"""Readers of the data sets federated-learning papers use, from a folder the user gives
(docs/tasks.md §13–17): LEAF JSON (:mod:`.leaf`), CIFAR python pickles (:mod:`.cifar`), MNIST and
EMNIST IDX files (:mod:`.idx`), TensorFlow Federated / FLAIR HDF5 (:mod:`.hdf5`, optional
``h5py``), the splits of a centralised data set over clients and their statistics
(:mod:`.splits`), and the seeded choice of users of a data set with natural users
(:mod:`.users`).

Every reader returns numpy arrays and refuses a file of the wrong shape, dtype or size with a
:class:`~asyncfl.errors.ScenarioError` naming the file (the CLI exits 2 with the message); nothing
is downloaded. Torch-free.
"""
