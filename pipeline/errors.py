class PipelineError(Exception):
    """Bad input or a failed step the user must act on; str(e) is one line naming the file and the problem."""
