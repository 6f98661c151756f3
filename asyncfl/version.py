"""asyncfl's version: a leaf module, so that code below the package's top can name it without
importing the package's public surface (which imports almost everything)."""

__version__ = "0.2.0"
