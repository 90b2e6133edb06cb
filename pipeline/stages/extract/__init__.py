"""Stage `extract` (stage.py) and its helpers: reading MediaWiki XML dumps (dump.py) and the dump's templates as
files mapped into the workers' memory (template_files.py)."""
from pipeline.stages.extract.stage import STAGE
