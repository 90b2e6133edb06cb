"""BERT pretraining on DeepSpeed: model, optimizers, data, training loop, checkpoints, export to Hugging Face."""
