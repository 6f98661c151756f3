"""asyncfl: a discrete-event simulator of asynchronous federated learning."""

__version__ = "0.1.0"
