"""The small core both halves import: errors and exit codes, config layering, crash-safe files, logging, the vocabulary files and (format) NVIDIA's HDF5 layout."""
