"""What the test tiers share (GPU visibility notes, the interpreter child, spec-decode inputs); importable as
``helpers`` because pytest
puts ``tests/`` on ``sys.path`` for ``tests/conftest.py``."""
