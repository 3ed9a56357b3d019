"""From the GGUF file to a model and its tokenizer: the file's reader, the weights, the start-up cache,
and a cache-free model (the learner's decoder_block) behind the generator's protocol."""
