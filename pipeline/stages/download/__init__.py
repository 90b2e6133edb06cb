"""Stage `download` (stage.py) and its helper: resumable, verified HTTP downloads (http.py)."""
from pipeline.stages.download.stage import STAGE
