"""wiki2bert corpus pipeline: Wikipedia dump -> BERT pretraining data."""
