"""wiki2bert_core/errors.py: how an exception is quoted inside a one-line error message."""
from __future__ import annotations

from wiki2bert_core.errors import first_line


def test_an_exception_is_quoted_by_its_type_and_first_line():
    assert first_line(RuntimeError("\n  [enforce fail at inline_container.cc:672] . PytorchStreamWriter failed\n"
                                    "Exception raised from write_record at ...\nframe #0: ...")) == \
        "RuntimeError: [enforce fail at inline_container.cc:672] . PytorchStreamWriter failed"
    assert first_line(AssertionError()) == "AssertionError"
    assert first_line(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"
