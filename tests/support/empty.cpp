// empty.cpp — keeps the test-support library non-empty when it has no other sources.
