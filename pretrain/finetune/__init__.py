"""`pretrain finetune`: fine-tune models on labelled tasks with one fixed recipe per task kind and score them on the
dev split (task.py: what a task is; tasks.py: reading one from files; metrics.py: the figures it is judged by)."""
