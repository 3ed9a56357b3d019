"""The scan of a submission's source: integrity findings and similarity between submissions."""
