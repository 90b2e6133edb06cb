"""A Parquet corpus of many row groups through the corpus stage's reader: CPU of reading every row group as its own
task (the stage's read unit) with the file's footer parsed once per process (readers._parquet_metadata) against
parsing it again for every task (the reader before; the baseline, in the same process). A file's footer grows with
its row groups, so the per-task parse made a row group's cost grow with its file.

    python bench/parquet_tasks.py [--row-groups 2000] [--rows 64] [--smoke]
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.stages.corpus import readers  # noqa: E402


def read_all(path: Path) -> tuple[float, int]:
    """(CPU seconds, documents) of reading every row group of `path` as its own task."""
    tasks, _ = readers.read_tasks([path], path.parent, readers.Fields(text="text"), "auto")
    started, documents = time.process_time(), 0
    for task in tasks:
        documents += sum(1 for _ in readers.read_documents(task))
    return time.process_time() - started, documents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-groups", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=64, help="rows of a row group (pages of ~1 KB)")
    parser.add_argument("--smoke", action="store_true", help="100 row groups of 8 rows")
    args = parser.parse_args()
    if args.smoke:
        args.row_groups, args.rows = 100, 8
    with tempfile.TemporaryDirectory(prefix="wiki2bert-parquet-") as tmp:
        path = Path(tmp) / "web.parquet"
        rows = args.row_groups * args.rows
        text = "Egy mondat a weboldalról, amely elég hosszú ahhoz, hogy számítson. " * 15
        pq.write_table(pa.table({"id": [str(i) for i in range(rows)], "text": [f"{i} {text}" for i in range(rows)]}),
                       path, row_group_size=args.rows)
        footer = pq.ParquetFile(path).metadata.serialized_size
        once, documents = read_all(path)
        cached = readers._parquet_metadata
        readers._parquet_metadata = lambda p, size, mtime_ns: readers._parquet_file(Path(p)).metadata
        try:
            each, again = read_all(path)
        finally:
            readers._parquet_metadata = cached
        assert documents == again == rows
    print(f"{args.row_groups:,} row groups of {args.rows} rows, footer {footer / 1e6:.2f} MB")
    print(f"footer once per process: {once:.2f} CPU-s; once per task: {each:.2f} CPU-s")
    print(f"once per task / once per process: {each / once:.2f}x CPU; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
