"""From the GGUF file to a model and its tokenizer: the file's reader, the weights, the start-up cache."""
